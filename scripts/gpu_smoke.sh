#!/usr/bin/env bash
# GPU readiness: a short multi-tower fine-tuning of the real MiniLM-L6 on the real
# movie-review sentences with 1 card and with every visible card; prints
# examples/sec per tower count and the scaling efficiency
# (examples/sec with N cards / (N x examples/sec with 1 card)).
#
#   bash scripts/gpu_smoke.sh [extra benchmarks/bench_train.py flags]
#   CUDA_VISIBLE_DEVICES=0,1,2,3 bash scripts/gpu_smoke.sh --seq 128 --batch 32
#
# Environment: PYTHON (default python), BERT_AD_CACHE (downloads, default
# ~/.cache/bert_ad). Defaults: max_seq_length 128, batch 32 per tower, fixed
# (max_length) padding, 5 warm-up + 30 timed steps per tower count. On a machine
# where TensorFlow sees no GPU it says so and exits 0: there is nothing to do.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

GPUS="$("$PYTHON" -c 'from bert_ad.compat import list_gpu_count; print(list_gpu_count())' | tail -n 1)"
if [ "$GPUS" -eq 0 ]; then
  echo "gpu_smoke: TensorFlow sees no GPU here (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}); nothing to do"
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
fi

fetch_minilm
DATA_DIR="$(prepare_dataset movie_reviews)"

COUNTS=1
if [ "$GPUS" -gt 1 ]; then COUNTS="1,$GPUS"; fi
echo "gpu_smoke: $GPUS GPU(s) visible; towers: $COUNTS"
"$PYTHON" -m benchmarks.bench_train --towers_scaling "$COUNTS" \
  --model_dir "$MODEL_DIR" --data_dir "$DATA_DIR" \
  --seq 128 --batch 32 --padding max_length --warmup 5 --steps 30 "$@"
