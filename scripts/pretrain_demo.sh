#!/usr/bin/env bash
# Domain continued pretraining of a released checkpoint, end to end on real data:
# the real MiniLM-L6 (which ships without MLM/NSP heads) continues masked-LM + NSP
# pretraining on English news (gensim's lee_background.cor, one document per line)
# with 2 towers; masked-LM and next-sentence accuracy are measured on held-out documents.
#
#   bash scripts/pretrain_demo.sh [extra run_pretraining_mgpu.py flags]
#
# Environment: PYTHON, BERT_AD_CACHE, OUTPUT_DIR (default output/pretrain_demo), STEPS (300),
# COMPARE_FROM_SCRATCH=1 to also train the same model shape from a random init.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUTPUT_DIR="${OUTPUT_DIR:-output/pretrain_demo}"
STEPS="${STEPS:-300}"

fetch_minilm
GENSIM_DIR="$("$PYTHON" -m bert_ad.assets gensim | cut -f2)"
CORPUS="$GENSIM_DIR/gensim/test/test_data/lee_background.cor"

DATA="$OUTPUT_DIR/data"
mkdir -p "$DATA"
if [ ! -f "$DATA/heldout.tfrecord" ]; then
  # The last 30 documents are held out for eval; the rest is training text.
  head -n -30 "$CORPUS" > "$DATA/train.txt"
  tail -n 30 "$CORPUS" > "$DATA/heldout.txt"
  common=(--vocab_file="$MODEL_DIR/vocab.txt" --do_lower_case=true --doc_per_line
          --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15)
  "$PYTHON" "$REPO/create_pretraining_data.py" "${common[@]}" --input_file="$DATA/train.txt" \
    --output_dir="$DATA/train" --num_shards=2 --dupe_factor=5 --num_workers=2
  "$PYTHON" "$REPO/create_pretraining_data.py" "${common[@]}" \
    --input_file="$DATA/heldout.txt" --output_file="$DATA/heldout.tfrecord" --dupe_factor=1
fi

flags=(--bert_config_file="$MODEL_DIR/bert_config.json" --max_seq_length=128
       --max_predictions_per_seq=20 --eval_input_file="$DATA/heldout.tfrecord"
       --eval_batch_size=32 --max_eval_steps=100 --n_gpus=2)
echo "== before: the released MiniLM (its MLM/NSP heads start fresh)"
"$PYTHON" "$REPO/run_pretraining_mgpu.py" "${flags[@]}" --do_eval --nsp=true \
  --init_checkpoint="$MODEL_DIR/bert_model.ckpt" --output_dir="$OUTPUT_DIR/before"
echo "== continued pretraining, $STEPS steps"
"$PYTHON" "$REPO/run_pretraining_mgpu.py" "${flags[@]}" --do_train --do_eval \
  --input_file="$DATA/train" --init_checkpoint="$MODEL_DIR/bert_model.ckpt" \
  --train_batch_size=16 --learning_rate=1e-4 --num_train_steps="$STEPS" \
  --num_warmup_steps=$((STEPS / 10)) --save_checkpoints_steps=100 --log_every_n_steps=25 \
  --output_dir="$OUTPUT_DIR/after" "$@"
if [ "${COMPARE_FROM_SCRATCH:-0}" = 1 ]; then
  echo "== the same $STEPS steps from a random init (MiniLM's shape), for comparison"
  "$PYTHON" "$REPO/run_pretraining_mgpu.py" "${flags[@]}" --do_train --do_eval \
    --input_file="$DATA/train" --train_batch_size=16 --learning_rate=1e-4 \
    --num_train_steps="$STEPS" --num_warmup_steps=$((STEPS / 10)) \
    --save_checkpoints_steps=100 --log_every_n_steps=25 --output_dir="$OUTPUT_DIR/scratch" "$@"
fi
echo "demo: eval_results.txt in $OUTPUT_DIR/{before,after${COMPARE_FROM_SCRATCH:+,scratch}}"
