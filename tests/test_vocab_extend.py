"""`bert-ad vocab extend` on a unigram piece list (bert_ad/tools/vocab_extend.py).

A tiny hand-made piece list whose splits are worked out by hand in the
comments: the added words become one piece, in our reader and in the written
sentencepiece.model; held-out lines without them get the same ids as before;
a new piece's score is checked against a brute-force search over every split
(just above the best one, and no higher: a higher score is shown to cut a
longer word); old rows are kept to the bit, new rows are the mean of the rows
they replace, and a tiny BERT gives the same outputs on old text.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bert_ad.cli import vocab as vocab_cli
from bert_ad.compat import list_checkpoint_variables, load_checkpoint_tensor, tf
from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.errors import run_cli
from bert_ad.model.modeling import BertConfig, BertModel
from bert_ad.parallel.checkpoints import WarmStart
from bert_ad.tools import convert, weight_names
from bert_ad.tools.vocab_extend import SCORE_MARGIN, orphan_characters, plan_pieces

from helpers import tree_digest

WORDS = "bert/embeddings/word_embeddings"
BIAS = "cls/predictions/output_bias"
W = "\u2581"
CONTROL = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
# Every character inside a longer piece is also a piece of its own (no orphans).
LETTERS = [(c, -9.0 - 0.05 * i) for i, c in enumerate("abcdefghilmnort")]
PIECES = CONTROL + [(W, -3.0), (W + "bio", -9.0), ("informati", -11.0), ("cs", -8.5),
                    (W + "data", -8.0), ("base", -7.5), (W + "database", -12.0),
                    (W + "the", -4.0), (W + "is", -4.5), (W + "good", -7.0),
                    (W + "film", -7.7), (W + "Paris", -9.5), ("P", -10.3), ("s", -5.1),
                    (".", -4.2), (",", -4.3), ("!", -6.1)] + LETTERS + [
    ("新", -9.75), ("冠", -12.7), ("肺", -13.2), ("炎", -12.1), ("疫", -13.6), ("情", -10.9),
    ("我", -9.9), ("爱", -10.2), ("发", -10.4), ("展", -11.3), ("中", -9.0), ("国", -9.3),
    ("家", -9.6), ("好", -9.85), ("的", -6.8), ("了", -8.3),
    # `▁新` beats `▁` + `新` at a word start, as in multilingual-e5.
    (W + "新", -10.0), ("疫情", -11.0), ("我爱", -10.5), ("发展中", -12.0), ("国家", -10.8),
    ("发展", -11.5), ("<mask>", 0.0)]
NAMES = [p for p, _ in PIECES]
PADDING_ROWS = 2
# Tab -> space, fullwidth o -> o, fullwidth comma -> comma, middle dot -> space.
NORMALIZATION = ["0009\t0020", "FF4F\t006F", "FF0C\t002C", "00B7\t0020"]
TINY = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=16, type_vocab_size=2)
WORD_LIST = ["bioinformatics", "新冠肺炎", "中国", "the", "新冠", "g\uff4f\uff4fds", "我爱",
             "bioinformatics", "龘龘"]
# form -> its split by the old pieces (worked out from the scores above).
OLD_SPLITS = {W + "bioinformatics": [W + "bio", "informati", "cs"],   # -28.5
              "新冠肺炎": ["新", "冠", "肺", "炎"],                   # -47.75
              "中国": ["中", "国"],                                   # -18.3
              "新冠": ["新", "冠"],                                   # -22.45
              W + "goods": [W + "good", "s"],                       # -12.1
              "龘龘": ["<unk>", "<unk>"]}                           # 2 x (-13.6 - 10)
NEW = list(OLD_SPLITS)   # the new pieces in id order (the words' order)
HELD_OUT = ["the film is good.", "the database is good", "我爱", "疫情好，我爱发展", "Paris!",
            "bio data", "我爱龍", "  the\tfilm ", "新的肺炎", "龘", "新", "中 国", "新 冠"]


def write_lines(path, lines):
    with open(str(path), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


def make_model(folder, pieces, padding_rows=0, normalization=None, seed=0):
    """A random tiny BERT over `pieces` (+ rows past them) with an MLM output
    bias and optimizer state; returns its {name: array}."""
    os.makedirs(str(folder))
    write_lines(os.path.join(str(folder), "pieces.tsv"), [f"{p}\t{s!r}" for p, s in pieces])
    if normalization:
        write_lines(os.path.join(str(folder), "normalization.tsv"), normalization)
    config = BertConfig(vocab_size=len(pieces) + padding_rows, **TINY)
    rng = np.random.RandomState(seed)
    tensors = {name: rng.normal(0, 0.5, shape).astype(np.float32) for name, shape in
               weight_names.google_variable_shapes(config, True).items()}
    tensors[WORDS + "/adam_m"] = np.ones([config.vocab_size, 8], np.float32)
    convert.write_tf_checkpoint(tensors, os.path.join(str(folder), "bert_model.ckpt"))
    with open(os.path.join(str(folder), "bert_config.json"), "w") as f:
        f.write(config.to_json_string())
    return tensors


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    """The hand-made model, extended with WORD_LIST through the command line."""
    root = tmp_path_factory.mktemp("extend")
    old = make_model(root / "model", PIECES, PADDING_ROWS, NORMALIZATION)
    words = write_lines(root / "words.txt", WORD_LIST)
    out = root / "out"
    argv = ["extend", "--checkpoint", str(root / "model"), "--words", words,
            "--output_dir", str(out)]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: vocab_cli.main(argv))
    assert exit_info.value.code == 0
    return root, old, out


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: vocab_cli.main(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err.splitlines()


def spm_processor(path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor()
    assert sp.Load(str(path))
    return sp


def best_split(text, scores):
    """The highest total of any split of `text` into pieces of `scores` or
    single unknown characters (each at lowest score - 10): every split tried."""
    unk = min(scores.values()) - 10.0
    matchable = {p: s for p, s in scores.items() if p not in ("<s>", "<pad>", "</s>",
                                                              "<unk>", "<mask>")}

    def walk(start):
        if start == len(text):
            yield 0.0
            return
        for end in range(start + 1, len(text) + 1):
            piece = text[start:end]
            score = matchable.get(piece, unk if end == start + 1 else None)
            if score is not None:
                for rest in walk(end):
                    yield score + rest
    return max(walk(0))


# --- what the tokenizer makes of the words ------------------------------------------------

def test_added_words_are_one_piece_in_our_reader_and_the_sentencepiece_model(extended):
    _, _, out = extended
    new = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    sp = spm_processor(out / "sentencepiece.model")
    assert new.pieces == NAMES + NEW and sp.GetPieceSize() == len(NAMES) + len(NEW)
    cases = {
        "bioinformatics": [W + "bioinformatics"],
        "bioinformatics is good": [W + "bioinformatics", W + "is", W + "good"],
        "g\uff4f\uff4fds!": [W + "goods", "!"],
        # Chinese: the bare piece after a word start's lone `▁`, and inside text.
        "新冠肺炎": [W, "新冠肺炎"],
        "新冠肺炎疫情": [W, "新冠肺炎", "疫情"],
        "新冠疫情": [W, "新冠", "疫情"],
        "我爱中国": [W, "我爱", "中国"],
        "我爱新冠肺炎的": [W, "我爱", "新冠肺炎", "的"],
        "龘龘": [W, "龘龘"],
        # 发展中|国家 ran across 中国's ends: the old split stays.
        "发展中国家": [W, "发展中", "国家"],
        # Deep into a long line (a running score near -49,000, where float32's
        # step is 1/256) the margin still decides.
        "好" * 5000 + "我爱中国": [W] + ["好"] * 5000 + ["我爱", "中国"],
    }
    for text, pieces in cases.items():
        assert new.tokenize(text) == pieces, text[-20:]
        assert list(sp.EncodeAsPieces(text)) == pieces, text[-20:]
        assert list(sp.EncodeAsIds(text)) == new.encode(text), text[-20:]


def test_lines_without_the_new_words_get_the_same_ids(extended):
    root, _, out = extended
    old = UnigramTokenizer.from_file(str(root / "model" / "pieces.tsv"))
    new = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    sp = spm_processor(out / "sentencepiece.model")
    for line in HELD_OUT + ["发展中国家"]:
        assert new.encode(line) == old.encode(line), line
        assert list(sp.EncodeAsIds(line)) == old.encode(line), line
    assert "<unk>" in old.tokenize("我爱龍") and "<unk>" in old.tokenize("龘")


def test_a_new_score_is_just_above_the_old_best_split(extended):
    """Brute force over every split, shortest new form first against the
    pieces added before it; a bare (Chinese) form must also win after `▁`."""
    root, _, out = extended
    new = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    scores = dict(PIECES)
    for form in sorted(NEW, key=len):
        best = best_split(form, scores)
        if not form.startswith(W):
            best = max(best, best_split(W + form, scores) - scores[W])
        written = new.scores[new.piece_ids[form]]
        assert written == pytest.approx(best + SCORE_MARGIN, abs=1e-4), form
        scores[form] = written
    # 新冠 needs the word-start bound (`▁新` + `冠` = -22.7 beats `▁` + -22.45).
    assert new.scores[new.piece_ids["新冠"]] == pytest.approx(-22.7 + 3.0 + SCORE_MARGIN,
                                                            abs=1e-4)
    # A higher score would cut 发展中国家 (-25.8) into ▁ 发展 中国 家 (-24.1 at 0.0).
    pieces = [p for p, _ in PIECES] + ["中国"]
    high = UnigramTokenizer(pieces, [s for _, s in PIECES] + [0.0])
    assert high.tokenize("发展中国家") == [W, "发展", "中国", "家"]
    assert orphan_characters(new) == ["龘"] and orphan_characters(
        UnigramTokenizer.from_file(str(root / "model" / "pieces.tsv"))) == []


# --- rows, files, report ------------------------------------------------------------------

def read_checkpoint(prefix):
    return {name: np.asarray(load_checkpoint_tensor(prefix, name))
            for name, _ in list_checkpoint_variables(prefix)}


def test_old_rows_are_kept_and_new_rows_are_the_mean_of_the_replaced_ones(extended):
    root, old, out = extended
    new = read_checkpoint(str(out / "bert_model.ckpt"))
    old_tok = UnigramTokenizer.from_file(str(root / "model" / "pieces.tsv"))
    size = len(NAMES) + len(NEW)          # 2 rows past the list reused, 4 appended
    assert new[WORDS].shape == (size, 8) and new[BIAS].shape == (size,)
    with open(str(out / "bert_config.json")) as f:
        assert json.load(f)["vocab_size"] == size
    np.testing.assert_array_equal(new[WORDS][:len(NAMES)], old[WORDS][:len(NAMES)])
    np.testing.assert_array_equal(new[BIAS][:len(NAMES)], old[BIAS][:len(NAMES)])
    for n, form in enumerate(NEW):
        split = OLD_SPLITS[form]
        assert [old_tok.pieces[i] for i in old_tok.segment(form)] == split, form
        known = [NAMES.index(p) for p in split if p != "<unk>"]
        row = new[WORDS][len(NAMES) + n]
        if known:
            np.testing.assert_allclose(row, old[WORDS][known].mean(0), rtol=1e-6, atol=1e-7)
            assert new[BIAS][len(NAMES) + n] == pytest.approx(old[BIAS][known].mean(),
                                                              rel=1e-6)
        else:   # 龘龘: fresh, like BERT's initializer (stddev 0.02, cut at 2 stddev)
            assert 0 < np.abs(row).max() <= 0.04 and new[BIAS][len(NAMES) + n] == 0.0
    assert sorted(new) == sorted(n for n in old if not n.endswith("adam_m"))
    for name in set(new) - {WORDS, BIAS}:
        np.testing.assert_array_equal(new[name], old[name], err_msg=name)


def forward(folder, ids):
    """Sequence and pooled output of the checkpoint in `folder` (dropout off)."""
    config = BertConfig.from_json_file(os.path.join(str(folder), "bert_config.json"))
    with tf.Graph().as_default():
        model = BertModel(config, False, tf.constant(ids), tf.ones_like(ids),
                          tf.zeros_like(ids))
        warm = WarmStart(os.path.join(str(folder), "bert_model.ckpt"))
        assert not warm.new
        with tf.Session() as session:
            warm.restore(session)
            return session.run([model.get_sequence_output(), model.get_pooled_output()])


def test_the_model_gives_the_same_outputs_on_text_without_new_words(extended):
    root, _, out = extended
    old = UnigramTokenizer.from_file(str(root / "model" / "pieces.tsv"))
    rows = [[0] + old.encode(line)[:14] + [2] for line in HELD_OUT[:4]]
    ids = np.array([row + [1] * (16 - len(row)) for row in rows], np.int32)
    before, after = forward(root / "model", ids), forward(out, ids)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


def test_files_report_and_summary(extended, tmp_path, capsys):
    root, _, out = extended
    assert sorted(os.listdir(str(out))) == sorted([
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "extend_report.txt", "normalization.tsv", "pieces.tsv", "sentencepiece.model"])
    new = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    with open(str(root / "model" / "pieces.tsv"), "rb") as f:
        old_bytes = f.read()
    assert (out / "pieces.tsv").read_bytes() == old_bytes + "".join(
        f"{p}\t{new.scores[new.piece_ids[p]]!r}\n" for p in NEW).encode("utf-8")
    assert (out / "normalization.tsv").read_bytes() == (
        root / "model" / "normalization.tsv").read_bytes()
    with open(str(out / "extend_report.txt"), encoding="utf-8") as f:
        report = f.read().split("\n")[:-1]
    assert report[1:5] == ["added\t6", "present\t2", "rows_reused\t2", "lower_case\tfalse"]
    start = len(NAMES)
    rows = [line.split("\t")[:4] for line in report[7:]]
    assert rows == [
        ["bioinformatics", W + "bioinformatics", str(start), "added"],
        ["新冠肺炎", "新冠肺炎", str(start + 1), "added"],
        ["中国", "中国", str(start + 2), "added"],
        ["the", W + "the", str(NAMES.index(W + "the")), "already a piece"],
        ["新冠", "新冠", str(start + 3), "added"],
        ["g\uff4f\uff4fds", W + "goods", str(start + 4), "added"],
        ["我爱", "我爱", str(NAMES.index("我爱")), "already a piece"],
        ["bioinformatics", W + "bioinformatics", str(start), "repeated in --words"],
        ["龘龘", "龘龘", str(start + 5), "added"]]
    assert report[7].split("\t")[6] == f"{W}bio informati cs"

    # Only known words: not an error; reported, the model copied as it was.
    words = write_lines(tmp_path / "known.txt", ["the", "我爱"])
    code, stdout, err = run(["extend", "--checkpoint", str(root / "model"), "--words", words,
                             "--output_dir", str(tmp_path / "same")], capsys)
    assert code == 0, err
    assert stdout.splitlines() == [
        f"wrote {tmp_path / 'same'}: added 0 piece(s), vocab_size {len(NAMES) + PADDING_ROWS}"
        f"; already pieces, not added: {W}the, 我爱"]
    assert (tmp_path / "same" / "pieces.tsv").read_bytes() == old_bytes


def test_an_uncased_list_lower_cases_and_rows_past_the_list_stay(tmp_path, capsys):
    pieces = CONTROL + [(W, -3.0), (W + "bio", -9.0), ("informati", -11.0), ("cs", -8.5)] + \
        LETTERS + [("<mask>", 0.0)]
    old = make_model(tmp_path / "model", pieces, padding_rows=3)
    words = write_lines(tmp_path / "words.txt", ["BioInformatics"])
    code, stdout, err = run(["extend", "--checkpoint", str(tmp_path / "model"), "--words",
                             words, "--output_dir", str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert stdout.splitlines() == [f"wrote {tmp_path / 'out'}: added 1 piece(s), vocab_size "
                                   f"{len(pieces) + 3}"]
    new_tok = UnigramTokenizer.from_file(str(tmp_path / "out" / "pieces.tsv"))
    assert new_tok.pieces[-1] == W + "bioinformatics"
    new = read_checkpoint(str(tmp_path / "out" / "bert_model.ckpt"))
    ids = [i for i, (p, _) in enumerate(pieces) if p in (W + "bio", "informati", "cs")]
    np.testing.assert_allclose(new[WORDS][len(pieces)], old[WORDS][ids].mean(0), rtol=1e-6)
    # The two rows past the list that the new piece did not take are kept.
    np.testing.assert_array_equal(new[WORDS][len(pieces) + 1:], old[WORDS][len(pieces) + 1:])
    assert (tmp_path / "out" / "normalization.tsv").exists() is False


def test_a_list_with_orphan_characters_keeps_its_unk_penalty(tmp_path, capsys):
    """`a` is inside `ab` but no piece of its own: ▁ <unk> bc (-34) beats
    ▁ ab c (-35) only while <unk> costs -30 (lowest score -20, minus 10)."""
    pieces = CONTROL + [(W, -3.0), ("ab", -20.0), ("bc", -1.0), ("b", -5.0), ("c", -12.0),
                        ("<mask>", 0.0)]
    make_model(tmp_path / "model", pieces)
    words = write_lines(tmp_path / "words.txt", ["cccc"])
    code, _, err = run(["extend", "--checkpoint", str(tmp_path / "model"), "--words", words,
                        "--output_dir", str(tmp_path / "out")], capsys)
    assert code == 0, err
    new = UnigramTokenizer.from_file(str(tmp_path / "out" / "pieces.tsv"))
    sp = spm_processor(tmp_path / "out" / "sentencepiece.model")
    # V(▁cccc) = -51 would give -50.95; floored at the lowest score instead.
    assert new.scores[-1] == -20.0 and new.tokenize("cccc") == [W + "cccc"]
    assert new.tokenize("abc") == [W, "<unk>", "bc"]
    assert list(sp.EncodeAsIds("abc")) == new.encode("abc")
    # Without the floor the penalty drops to -60.95 and `abc` splits differently.
    unfloored = UnigramTokenizer([p for p, _ in pieces] + [W + "cccc"],
                                 [s for _, s in pieces] + [-50.95])
    assert unfloored.tokenize("abc") == [W, "ab", "c"]


# --- bad input ---------------------------------------------------------------------------

def test_bad_input_is_one_error_line_and_nothing_written(extended, tmp_path, capsys):
    root, _, _ = extended
    model = str(root / "model")
    good_words = write_lines(tmp_path / "words.txt", ["bioinformatics"])
    no_vocab = tmp_path / "no_vocab"
    no_vocab.mkdir()
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
                 "bert_config.json"):
        (no_vocab / name).write_bytes((root / "model" / name).read_bytes())
    long_list = tmp_path / "long"
    long_list.mkdir()
    for name in os.listdir(str(no_vocab)):
        (long_list / name).write_bytes((no_vocab / name).read_bytes())
    write_lines(long_list / "pieces.tsv", [f"{p}\t{s!r}" for p, s in PIECES] +
                [f"extra{i}\t-30.0" for i in range(PADDING_ROWS + 1)])
    exists = tmp_path / "exists"
    exists.mkdir()
    (exists / "keep.txt").write_text("mine")
    cases = [
        (model, write_lines(tmp_path / "empty.txt", ["", " "]), tmp_path / "o1",
         ["--words", "has no words; give one word per line"]),
        (str(no_vocab), good_words, tmp_path / "o2",
         [f"no vocab.txt or pieces.tsv next to checkpoint {no_vocab / 'bert_model.ckpt'}",
          "pass --vocab_file"]),
        (model, good_words, exists, ["already exists; give a new folder or pass --overwrite"]),
        (str(long_list), good_words, tmp_path / "o3",
         [f"has {len(PIECES) + PADDING_ROWS + 1} pieces but the checkpoint only "
          f"{len(PIECES) + PADDING_ROWS} word embeddings"]),
        (model, write_lines(tmp_path / "dot.txt", ["data\u00b7base"]), tmp_path / "o4",
         ["'data\u00b7base' reads as '\u2581data\u2581base'", "not as one word"]),
    ]
    for checkpoint, words, out, expected in cases:
        before = tree_digest(str(out))
        code, _, lines = run(["extend", "--checkpoint", checkpoint, "--words", words,
                              "--output_dir", str(out)], capsys)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
        for text in expected:
            assert text in lines[0], lines[0]
        assert tree_digest(str(out)) == before
    assert [n for n in os.listdir(str(tmp_path)) if n.startswith(".")] == []
    # --overwrite replaces what extend wrote, never a file of the user's.
    code, _, err = run(["extend", "--checkpoint", model, "--words", good_words,
                        "--output_dir", str(exists), "--overwrite"], capsys)
    assert code == 2 and "holds keep.txt, which this command does not write" in err[-1]
    (exists / "keep.txt").unlink()
    code, _, err = run(["extend", "--checkpoint", model, "--words", good_words,
                        "--output_dir", str(exists), "--overwrite"], capsys)
    assert code == 0, err
    assert (exists / "sentencepiece.model").exists()


def test_the_segmentation_benchmark_counts(extended):
    from studies.extend_segmentation import compare, report
    root, _, out = extended
    texts = HELD_OUT + ["我爱中国", "发展中国家", "bioinformatics is good"]
    counts = compare(str(root / "model"), str(out), texts)
    assert {k: v for k, v in counts.items() if k != "per_piece"} == dict(
        lines=len(texts), without_new=len(HELD_OUT), same_ids=len(HELD_OUT),
        sentencepiece_same=len(texts))
    # 发展中国家 holds 中国's text but keeps its old split.
    assert counts["per_piece"] == {W + "bioinformatics": [1, 1], "新冠肺炎": [0, 0],
                                   "中国": [2, 1], "新冠": [0, 0], W + "goods": [0, 0],
                                   "龘龘": [0, 0]}
    assert report(counts)[-6:] == ["_bioinformatics\t1\t1", "新冠肺炎\t0\t0", "中国\t2\t1",
                                   "新冠\t0\t0", "_goods\t0\t0", "龘龘\t0\t0"]


def test_a_list_without_the_lone_word_start_gets_both_forms_of_a_chinese_word():
    """Without `▁` alone, `▁` + 中国 cannot follow a word start: `▁中国` is added too.
    (`▁` is then an orphan, so the scores are floored at -40, below them.)"""
    pieces = CONTROL + [("中", -9.0), ("国", -9.3), (W + "中", -9.5), ("x", -40.0),
                        ("<mask>", 0.0)]
    tokenizer = UnigramTokenizer([p for p, _ in pieces], [s for _, s in pieces])
    plan = plan_pieces(tokenizer, ["中国"], False, "words.txt")
    assert [(p.piece, p.how, p.piece_id) for p in plan] == [
        ("中国", "added", len(pieces)), (W + "中国", "added", len(pieces) + 1)]
    # 中国 inside text: 中 国 (-18.3); after a word start: ▁中 国 (-18.8).
    assert plan[0].score == pytest.approx(-18.3 + SCORE_MARGIN, abs=1e-5)
    assert plan[1].score == pytest.approx(-18.8 + SCORE_MARGIN, abs=1e-5)
    new = UnigramTokenizer([p for p, _ in pieces] + [p.piece for p in plan],
                           [s for _, s in pieces] + [p.score for p in plan])
    assert new.tokenize("中国") == [W + "中国"]
    assert new.tokenize("x中国") == ["<unk>", "x", "中国"]
