#!/usr/bin/env bash
# Same accuracy at any tower count: fine-tune the real MiniLM-L6 on the movie-review
# sentences with 1 tower x 32 and 2 towers x 16 (the same global batch), for several seeds,
# and print dev accuracy per run and the mean per tower count.
#
#   bash scripts/tower_parity.sh [SEEDS...]        (default seeds: 1 2 3)
#
# Environment: PYTHON, BERT_AD_CACHE, OUTPUT_ROOT (default output/parity).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUTPUT_ROOT="${OUTPUT_ROOT:-output/parity}"
SEEDS=("$@")
[ $# -eq 0 ] && SEEDS=(1 2 3)

fetch_minilm
DATA_DIR="$(prepare_dataset movie_reviews)"

printf "%-8s %-6s %-10s %s\n" towers seed batch dev_accuracy
for seed in "${SEEDS[@]}"; do
  for setting in "1 32" "2 16"; do
    set -- $setting
    out="$OUTPUT_ROOT/towers$1-seed$seed"
    "$PYTHON" "$REPO/run_classifier_mgpu.py" --task_name=sentiment --data_dir="$DATA_DIR" \
      --vocab_file="$MODEL_DIR/vocab.txt" --bert_config_file="$MODEL_DIR/bert_config.json" \
      --init_checkpoint="$MODEL_DIR/bert_model.ckpt" --max_seq_length=64 \
      --train_batch_size="$2" --n_gpus="$1" --num_train_epochs=2 --learning_rate=5e-5 \
      --lr_scaling=none \
      --seed="$seed" --save_checkpoints_steps=1000 --log_every_n_steps=100 \
      --do_train=true --do_eval=true --output_dir="$out" 2>/dev/null
    accuracy=$(sed -n 's/^eval_accuracy = //p' "$out/eval_results.txt")
    printf "%-8s %-6s %-10s %s\n" "$1" "$seed" "$1x$2" "$accuracy"
  done
done | tee "$OUTPUT_ROOT.tsv"
awk '{ s[$1] += $4; q[$1] += $4 * $4; n[$1]++ }
     END { for (t in s) { sd = n[t] > 1 ? sqrt((q[t] - s[t] * s[t] / n[t]) / (n[t] - 1)) : 0
           printf "towers=%s: mean %.4f, sd %.4f over %d seeds\n", t, s[t] / n[t], sd, n[t] } }' \
  "$OUTPUT_ROOT.tsv"
