"""extract_features.py's vectors against Hugging Face's BertModel with the same weights.

A tiny 4-layer BERT (random weights, initializer range 0.1 so attention is
far from uniform) is saved as a Google checkpoint and converted to Hugging
Face's layout (bert_ad/tools/convert.py); real English and Chinese lines
(data/sample_corpus: news, People's Daily) and pairs are embedded by ours on
1 and 2 towers and by transformers.BertModel (eval mode, no grad) on the same
token ids:

* Google's per-token output: every layer of --layers equals HF's hidden
  state to 1e-4 (the values are rounded to 6 decimals, as Google's), with
  the encoder on the padded batch (the command's default) and on the real
  tokens only (--remove_padding);
* --pooling=mean equals sentence-transformers' mean pooling computed here,
  sum(token_vectors * mask) / sum(mask); --normalize its unit vector;
  --pooling=cls the [CLS] vector of the named layer;
* HF's BertTokenizer gives the same token ids (truncation included).

With the real MiniLM (skipped if the asset is unavailable) the whole
sentence-transformers recipe is compared: HF's own tokenizer with padding,
mean pooling, normalisation, against ours on the converted checkpoint.

TF2 lane only: PyTorch and transformers are not in the TF 1.15 lane.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bert_ad.cli import features as features_cli
from helpers import REPO, run_main, save_initial_checkpoint, tiny_model

torch = pytest.importorskip("torch", reason="PyTorch is only in the TF2 lane")
transformers = pytest.importorskip("transformers",
                                   reason="Hugging Face transformers is only in the TF2 lane")

SAMPLE_CORPUS = os.path.join(REPO, "data", "sample_corpus")
MAX_SEQ_LENGTH = 48
TOLERANCE = 1e-4


def real_lines() -> list:
    """English news sentences, Chinese People's Daily lines (spaces between its
    words removed) and a few pairs of them: real text, some longer than
    MAX_SEQ_LENGTH."""
    with open(os.path.join(SAMPLE_CORPUS, "en.txt"), encoding="utf-8") as f:
        english = [line.strip() for line in f if line.strip()][:12]
    with open(os.path.join(SAMPLE_CORPUS, "zh_segmented.txt"), encoding="utf-8") as f:
        chinese = ["".join(line.split()) for line in f if line.strip()][:12]
    pairs = [f"{english[i]} ||| {chinese[i]}" for i in range(3)]
    return english + chinese + pairs


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(lines, input file, Google model folder, HF model, HF tokenizer)."""
    from bert_ad.tools.convert import convert_google_to_hf
    lines = real_lines()
    root = tmp_path_factory.mktemp("features_reference")
    texts = [part for line in lines for part in line.split(" ||| ")]
    model = tiny_model(str(root / "google"), texts=texts, num_hidden_layers=4,
                       initializer_range=0.1)
    prefix = save_initial_checkpoint(str(root / "google" / "bert_model.ckpt"),
                                     model.bert_config(), seed=7)
    convert_google_to_hf(prefix, str(root / "hf"))
    input_file = root / "input.txt"
    input_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    hf_model = transformers.BertModel.from_pretrained(str(root / "hf"), local_files_only=True)
    hf_model.eval()
    tokenizer = transformers.BertTokenizer(model.vocab_file, do_lower_case=True)
    return lines, str(input_file), model, prefix, hf_model, tokenizer


def hf_inputs(tokenizer, line: str) -> dict:
    """HF's token ids of one input line (a pair split as Google's), truncated
    longest-first to MAX_SEQ_LENGTH."""
    parts = line.split(" ||| ")
    return tokenizer(*parts, truncation=True, max_length=MAX_SEQ_LENGTH)


def hf_hidden_states(hf_model, encoded: dict) -> list:
    """Every hidden state of one row, [embeddings, layer 1, ..., layer L], each [seq, H]."""
    with torch.inference_mode():
        out = hf_model(input_ids=torch.tensor([encoded["input_ids"]]),
                       attention_mask=torch.tensor([encoded["attention_mask"]]),
                       token_type_ids=torch.tensor([encoded["token_type_ids"]]),
                       output_hidden_states=True)
    return [h[0].numpy() for h in out.hidden_states]


def run_ours(reference, tmp_path, name: str, **flags) -> str:
    _, input_file, model, prefix, _, _ = reference
    output = str(tmp_path / name)
    run_main(features_cli, dict(
        input_file=input_file, output_file=output, vocab_file=model.vocab_file,
        bert_config_file=model.config_file, init_checkpoint=prefix,
        max_seq_length=MAX_SEQ_LENGTH, batch_size=3, **flags))
    return output


def mean_pooling(token_vectors: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' Pooling(mode_mean_tokens) for one row."""
    mask = mask[:, None].astype(np.float64)
    return (token_vectors * mask).sum(0) / np.clip(mask.sum(), 1e-9, None)


@pytest.mark.parametrize("towers, remove_padding", [(1, False), (2, True)])
def test_google_token_vectors_equal_hugging_face(reference, tmp_path, towers,
                                                 remove_padding):
    lines, _, _, _, hf_model, tokenizer = reference
    output = run_ours(reference, tmp_path, "tokens.jsonl", n_gpus=towers,
                      remove_padding=remove_padding)
    with open(output, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert [row["linex_index"] for row in rows] == list(range(len(lines)))
    truncated = 0
    for line, row in zip(lines, rows):
        encoded = hf_inputs(tokenizer, line)
        tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
        assert [feature["token"] for feature in row["features"]] == tokens, line
        truncated += len(tokens) == MAX_SEQ_LENGTH
        hidden = hf_hidden_states(hf_model, encoded)
        for feature_position, feature in enumerate(row["features"]):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2, -3, -4]
            for layer in feature["layers"]:
                np.testing.assert_allclose(layer["values"],
                                           hidden[layer["index"]][feature_position],
                                           atol=TOLERANCE, err_msg=line)
    assert truncated >= 3  # the long lines were cut, and still agree
    assert any("\u4e00" <= row["features"][1]["token"] <= "\u9fff" for row in rows)


@pytest.mark.parametrize("towers", [1, 2])
def test_mean_pooled_vectors_equal_sentence_transformers_pooling(reference, tmp_path, towers):
    lines, _, _, _, hf_model, tokenizer = reference
    pooled = np.load(run_ours(reference, tmp_path, "mean.npy", n_gpus=towers,
                              pooling="mean"))
    normalised = [json.loads(line) for line in open(run_ours(
        reference, tmp_path, "normalised.jsonl", n_gpus=towers, pooling="mean",
        normalize=True), encoding="utf-8")]
    assert pooled.dtype == np.float32 and pooled.shape == (len(lines), 32)
    assert [row["linex_index"] for row in normalised] == list(range(len(lines)))
    for i, line in enumerate(lines):
        encoded = hf_inputs(tokenizer, line)
        last = hf_hidden_states(hf_model, encoded)[-1]
        expected = mean_pooling(last, np.array(encoded["attention_mask"]))
        np.testing.assert_allclose(pooled[i], expected, atol=TOLERANCE, err_msg=line)
        np.testing.assert_allclose(normalised[i]["embedding"],
                                   expected / np.linalg.norm(expected), atol=TOLERANCE)


def test_cls_pooling_of_a_named_layer_is_its_cls_vector(reference, tmp_path):
    lines, _, _, _, hf_model, tokenizer = reference
    output = run_ours(reference, tmp_path, "cls.tsv", n_gpus=2, pooling="cls", layers="-2")
    with open(output, encoding="utf-8") as f:
        rows = [[float(x) for x in line.rstrip("\n").split("\t")] for line in f]
    assert len(rows) == len(lines)
    for line, row in zip(lines, rows):
        hidden = hf_hidden_states(hf_model, hf_inputs(tokenizer, line))
        np.testing.assert_allclose(row, hidden[-2][0], atol=TOLERANCE, err_msg=line)


@pytest.mark.real_model
def test_minilm_embeddings_equal_the_sentence_transformers_recipe(minilm_dir,
                                                                  minilm_google_ckpt,
                                                                  tmp_path):
    """Real MiniLM: HF's tokenizer with padding, mean pooling and normalisation
    (what sentence-transformers' all-MiniLM-L6-v2 does) against ours on 2 towers."""
    lines = real_lines()[:8] + real_lines()[12:20]
    input_file = tmp_path / "input.txt"
    input_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = str(tmp_path / "minilm.npy")
    run_main(features_cli, dict(
        input_file=str(input_file), output_file=output,
        vocab_file=os.path.join(minilm_google_ckpt, "vocab.txt"),
        bert_config_file=os.path.join(minilm_google_ckpt, "bert_config.json"),
        init_checkpoint=os.path.join(minilm_google_ckpt, "bert_model.ckpt"),
        max_seq_length=128, batch_size=4, n_gpus=2, pooling="mean", normalize=True))
    ours = np.load(output)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir, local_files_only=True)
    model = transformers.BertModel.from_pretrained(minilm_dir, local_files_only=True)
    model.eval()
    batch = tokenizer(lines, padding=True, truncation=True, max_length=128,
                      return_tensors="pt")
    with torch.inference_mode():
        last = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = (last * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    expected = torch.nn.functional.normalize(expected, p=2, dim=1).numpy()
    assert ours.shape == expected.shape == (len(lines), 384)
    np.testing.assert_allclose(ours, expected, atol=TOLERANCE)
