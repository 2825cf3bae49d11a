#!/usr/bin/env bash
# Named entities on real Chinese text: People's Daily (January 1998, character-level
# BIO, PER/LOC/ORG) with run_ner_mgpu.py, trained on the first TRAIN_SENTENCES
# training sentences and scored on the FULL test split. Sized for a 2-core CPU
# (each run about 20 minutes on an idle machine); see docs/ner.md for the results.
#
#   bash scripts/ner_demo.sh [RUN ...]
#
# RUN is one of (default: all, one after the other):
#   chinese_softmax   the Chinese default model (multilingual-e5-small trimmed to
#                     Chinese+English pieces, scripts/fetch_chinese_model.sh), softmax
#   chinese_crf       the same with --use_crf
#   transplant_softmax, transplant_crf
#                     e5 on Google's Chinese BERT vocab (MODEL=transplant
#                     scripts/fetch_chinese_model.sh), softmax / CRF
#   minilm_softmax    MiniLM-L6 (English vocab: most Chinese characters are [UNK])
#   chinese_2towers   chinese_softmax on 2 towers x half the batch (same global batch)
#   chinese_head_x1   chinese_softmax with --head_learning_rate_multiplier=1 (the
#                     fresh head at the encoder's rate: why the default is 100)
#
# Environment: PYTHON (default python), BERT_AD_CACHE (downloads, default
# ~/.cache/bert_ad), OUTPUT_ROOT (default output/ner_demo), TRAIN_SENTENCES (4000),
# EPOCHS (1), NICE (niceness, default 10). Each run writes OUTPUT_ROOT/RUN
# (eval_results.txt: entity precision/recall/F1 per type and micro, on test.txt).
# A run whose eval_results.txt exists is skipped; the table is printed at the end.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUTPUT_ROOT="${OUTPUT_ROOT:-output/ner_demo}"
TRAIN_SENTENCES="${TRAIN_SENTENCES:-4000}"
EPOCHS="${EPOCHS:-1}"
NICE="${NICE:-10}"
RUNS=("$@")
if [ ${#RUNS[@]} -eq 0 ]; then
  RUNS=(chinese_softmax chinese_crf transplant_softmax transplant_crf minilm_softmax
        chinese_2towers chinese_head_x1)
fi

DATA_DIR="$CACHE/data/peoples_daily_ner"
if [ ! -f "$DATA_DIR/test.txt" ]; then
  "$PYTHON" -m bert_ad data prepare peoples_daily_ner --output_dir="$DATA_DIR" >&2
fi

run() {  # run NAME MODEL_DIR CHECKPOINT [flags]
  local name="$1" model="$2" checkpoint="$3"
  shift 3
  local out="$OUTPUT_ROOT/$name"
  if [ -f "$out/eval_results.txt" ]; then
    echo "ner_demo: $name already done ($out/eval_results.txt)" >&2
    return
  fi
  echo "ner_demo: $name -> $out" >&2
  # A piece list (pieces.tsv) sets its own casing; a WordPiece vocab.txt is uncased here.
  local vocab=(--vocab_file="$model/vocab.txt" --do_lower_case=true)
  [ -f "$model/pieces.tsv" ] && vocab=(--vocab_file="$model/pieces.tsv")
  # CPU towers even where there is a GPU: the figures in docs/ner.md are CPU ones.
  nice -n "$NICE" "$PYTHON" "$REPO/run_ner_mgpu.py" \
    --data_dir="$DATA_DIR" --dev_file=test.txt \
    "${vocab[@]}" --bert_config_file="$model/bert_config.json" \
    --init_checkpoint="$checkpoint" \
    --max_seq_length=128 --max_train_examples="$TRAIN_SENTENCES" \
    --num_train_epochs="$EPOCHS" --learning_rate=5e-5 --warmup_proportion=0.1 \
    --bucket_by_length=true --eval_batch_size=32 \
    --save_checkpoints_steps=100000 --log_every_n_steps=25 \
    --do_train=true --do_eval=true --output_dir="$out" "$@"
}

for name in "${RUNS[@]}"; do
  case "$name" in
    chinese_*) fetch_chinese_model ;;
    transplant_*) fetch_transplant_model ;;
    minilm_softmax) fetch_minilm ;;
  esac
  case "$name" in
    chinese_softmax)
      run "$name" "$CHINESE_MODEL_DIR" "$CHINESE_MODEL_DIR/bert_model.ckpt" \
        --n_gpus=1 --train_batch_size=16 ;;
    chinese_crf)
      run "$name" "$CHINESE_MODEL_DIR" "$CHINESE_MODEL_DIR/bert_model.ckpt" \
        --n_gpus=1 --train_batch_size=16 --use_crf=true ;;
    transplant_softmax)
      run "$name" "$TRANSPLANT_MODEL_DIR" "$TRANSPLANT_MODEL_DIR/bert_model.ckpt" \
        --n_gpus=1 --train_batch_size=16 ;;
    transplant_crf)
      run "$name" "$TRANSPLANT_MODEL_DIR" "$TRANSPLANT_MODEL_DIR/bert_model.ckpt" \
        --n_gpus=1 --train_batch_size=16 --use_crf=true ;;
    minilm_softmax)
      run "$name" "$MODEL_DIR" "$MODEL_DIR/bert_model.ckpt" \
        --n_gpus=1 --train_batch_size=16 ;;
    chinese_2towers)
      run "$name" "$CHINESE_MODEL_DIR" "$CHINESE_MODEL_DIR/bert_model.ckpt" \
        --n_gpus=2 --train_batch_size=8 ;;
    chinese_head_x1)
      run "$name" "$CHINESE_MODEL_DIR" "$CHINESE_MODEL_DIR/bert_model.ckpt" \
        --n_gpus=1 --train_batch_size=16 --head_learning_rate_multiplier=1 ;;
    *) echo "ner_demo: unknown run $name" >&2; exit 2 ;;
  esac
done

"$PYTHON" - "$OUTPUT_ROOT" "${RUNS[@]}" <<'PY'
import os, sys
root, runs = sys.argv[1], sys.argv[2:]
print(f"{'run':18} {'micro F1':>8} {'P':>7} {'R':>7} {'PER F1':>7} {'LOC F1':>7} {'ORG F1':>7}")
for run in runs:
    path = os.path.join(root, run, "eval_results.txt")
    if not os.path.exists(path):
        continue
    r = dict(line.strip().split(" = ") for line in open(path, encoding="utf-8"))
    print(f"{run:18} {float(r['eval_f1']):8.4f} {float(r['eval_precision']):7.4f} "
          f"{float(r['eval_recall']):7.4f} " + " ".join(
              f"{float(r['eval_' + t + '_f1']):7.4f}" for t in ("PER", "LOC", "ORG")))
PY
