"""The table of scripts/domain_pretrain_demo.sh: masked-LM before/after, sentiment per model.

  python -m studies.domain_pretrain_report OUTPUT_ROOT REVIEWS_DIR

reads OUTPUT_ROOT/{before,continued}/eval_results.txt and every
OUTPUT_ROOT/sentiment/<model>_seed<N>/ (dev figures from eval_results.txt, test
accuracy from predict.txt against REVIEWS_DIR/test.tsv) and prints markdown tables.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict

from studies.accuracy_study import mean_sd, test_metrics
from bert_ad.files import read_key_values


def main(output_root: str, reviews_dir: str) -> int:
    print("| model | held-out masked_lm_accuracy | masked_lm_loss | step |")
    print("|---|---|---|---|")
    for name in ("before", "continued"):
        path = os.path.join(output_root, name, "eval_results.txt")
        if os.path.exists(path):
            r = read_key_values(path)
            print(f"| {name} | {float(r['masked_lm_accuracy']):.4f} | "
                  f"{float(r['masked_lm_loss']):.3f} | {r.get('global_step', '0')} |")
    runs = defaultdict(dict)  # model -> seed -> (dev accuracy, test accuracy)
    sentiment = os.path.join(output_root, "sentiment")
    for run in sorted(os.listdir(sentiment)) if os.path.isdir(sentiment) else []:
        match = re.fullmatch(r"(.+)_seed(\d+)", run)
        folder = os.path.join(sentiment, run)
        if not match or not os.path.exists(os.path.join(folder, "predict.txt")):
            continue
        dev = float(read_key_values(os.path.join(folder, "eval_results.txt"))["eval_accuracy"])
        test = test_metrics(reviews_dir, folder)["test_accuracy"]
        runs[match.group(1)][int(match.group(2))] = (dev, test)
    print()
    print("| model | seeds | test accuracy per seed | test mean ± sd | dev mean |")
    print("|---|---|---|---|---|")
    for model, by_seed in runs.items():
        seeds = sorted(by_seed)
        tests = [by_seed[s][1] for s in seeds]
        mean, sd = mean_sd(tests)
        dev_mean, _ = mean_sd([by_seed[s][0] for s in seeds])
        print(f"| {model} | {' '.join(map(str, seeds))} | "
              f"{' / '.join(f'{t:.4f}' for t in tests)} | {mean:.4f} ± {sd:.4f} | "
              f"{dev_mean:.4f} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    sys.exit(main(sys.argv[1], sys.argv[2]))
