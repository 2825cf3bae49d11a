#!/usr/bin/env bash
# Same accuracy with several workers: fine-tune the real MiniLM-L6 on the movie-review
# sentences with 1 worker x 2 towers x 16 and with 2 local workers x 1 tower x 16 (the same
# global batch of 32, dropout on), for several seeds, and print dev accuracy per run and the
# mean per setting.
#
#   bash scripts/worker_parity.sh [SEEDS...]        (default seeds: 1 2 3)
#
# Environment: PYTHON, BERT_AD_CACHE, OUTPUT_ROOT (default output/worker_parity),
# EPOCHS (default 2), MAX_TRAIN_EXAMPLES (default: all 3,200), MAX_SEQ_LENGTH (default 64).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUTPUT_ROOT="${OUTPUT_ROOT:-output/worker_parity}"
EPOCHS="${EPOCHS:-2}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
SEEDS=("$@")
[ $# -eq 0 ] && SEEDS=(1 2 3)
LIMIT=()
[ -n "${MAX_TRAIN_EXAMPLES:-}" ] && LIMIT=("--max_train_examples=$MAX_TRAIN_EXAMPLES")

fetch_minilm
DATA_DIR="$(prepare_dataset movie_reviews)"
mkdir -p "$OUTPUT_ROOT"

printf "%-22s %-6s %s\n" setting seed dev_accuracy | tee "$OUTPUT_ROOT.tsv"
for seed in "${SEEDS[@]}"; do
  for setting in one_worker_two_towers two_workers_one_tower; do
    out="$OUTPUT_ROOT/$setting-seed$seed"
    args=(--task_name=sentiment --data_dir="$DATA_DIR" --vocab_file="$MODEL_DIR/vocab.txt"
      --bert_config_file="$MODEL_DIR/bert_config.json"
      --init_checkpoint="$MODEL_DIR/bert_model.ckpt" --max_seq_length="$MAX_SEQ_LENGTH"
      --train_batch_size=16 --num_train_epochs="$EPOCHS" --learning_rate=5e-5
      --seed="$seed" --save_checkpoints_steps=1000 --log_every_n_steps=100
      --do_train=true --do_eval=true --output_dir="$out" ${LIMIT[@]+"${LIMIT[@]}"})
    if [ "$setting" = one_worker_two_towers ]; then
      "$PYTHON" "$REPO/run_classifier_mgpu.py" --n_gpus=2 "${args[@]}" 2>"$out.log"
    else
      PYTHON="$PYTHON" WORKER_LOG_DIR="$out.logs" \
        bash "$REPO/scripts/launch_local_workers.sh" 2 "$REPO/run_classifier_mgpu.py" \
        --n_gpus=1 "${args[@]}" 2>"$out.log"
    fi
    accuracy=$(sed -n 's/^eval_accuracy = //p' "$out/eval_results.txt")
    printf "%-22s %-6s %s\n" "$setting" "$seed" "$accuracy" | tee -a "$OUTPUT_ROOT.tsv"
  done
done
awk 'NR > 1 { sum[$1] += $3; n[$1]++ } END { for (s in sum) printf "mean %s: %.4f over %d seeds\n", s, sum[s] / n[s], n[s] }' "$OUTPUT_ROOT.tsv"
