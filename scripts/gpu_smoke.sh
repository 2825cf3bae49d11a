#!/usr/bin/env bash
# Both --variable_update layouts measured on this machine's cards: one training step of
# BERT-base (seq 128 x batch 32 per card) with 1 card and with every visible card, each
# split, from a trace of the real graph, into compute, all-reduce, the apply (on the CPU
# or on the cards) and host <-> card transfers, with the scaling model's prediction for
# the same cards beside it (benchmarks/step_split.py; docs/gpu_scaling.md). The output is
# a markdown table to paste into an issue.
#
#   bash scripts/gpu_smoke.sh [extra benchmarks/step_split.py flags]
#   CUDA_VISIBLE_DEVICES=0,1,2,3 bash scripts/gpu_smoke.sh --model chinese --seq 512 --batch 12
#
# Environment: PYTHON (default python); INTERCONNECT, pcie or nvlink, for the model's
# all-reduce (default: nvlink when `nvidia-smi topo -m` shows NVLink between the cards).
# Nothing is downloaded: the variables start random and the rows are synthetic (where
# the time goes does not depend on them). On a machine where TensorFlow sees no GPU the
# same script runs the logical-device path (1 and 2 towers on logical CPU devices, the
# tiny model at seq 32 x 4 unless flags say otherwise) and says so.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

GPUS="$("$PYTHON" -c 'from bert_ad.compat.installed import list_gpu_count; print(list_gpu_count())' | tail -n 1)"
if [ "$GPUS" -eq 0 ]; then
  echo "gpu_smoke: TensorFlow sees no GPU here (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}): the logical-device path, towers on logical CPU devices; no GPU is measured"
  "$PYTHON" -m benchmarks.step_split --model tiny --seq 32 --batch 4 --cards 1,2 \
    --warmup 2 --steps 5 --traced 1 "$@"
  exit 0
fi

nvidia-smi --query-gpu=index,name,memory.total,pcie.link.gen.max,pcie.link.width.max,driver_version \
  --format=csv,noheader
NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
GEN="$(nvidia-smi --query-gpu=pcie.link.gen.max --format=csv,noheader | head -n 1 | tr -d ' ')"
case "$GEN" in
  3|4|5) ;;
  6) GEN=5 ;;   # the model's figures stop at PCIe 5 (measured on an H200)
  *) echo "gpu_smoke: PCIe generation '$GEN' unknown to the model; taking 4" >&2; GEN=4 ;;
esac
if [ -z "${INTERCONNECT:-}" ]; then
  INTERCONNECT=pcie
  if nvidia-smi topo -m 2>/dev/null | grep -Eq '[[:space:]]NV[0-9]+'; then INTERCONNECT=nvlink; fi
fi

COUNTS=1
if [ "$GPUS" -gt 1 ]; then COUNTS="1,$GPUS"; fi
echo "gpu_smoke: $GPUS GPU(s) visible; cards: $COUNTS; both layouts"
"$PYTHON" -m benchmarks.step_split --cards "$COUNTS" --card_name "$NAME" --pcie_gen "$GEN" \
  --interconnect "$INTERCONNECT" "$@"
