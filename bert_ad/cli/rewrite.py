"""rewrite_finetune.py: does a candidate phrase fit the blank of an ad text?

Fine-tunes BERT's pair classifier on N towers on rewrite rows
(`bert-ad data prepare rewrite`): `label<TAB>segment_index<TAB>candidate<TAB>
text_with_slot`. Outputs in --output_dir besides the checkpoints:
predict.txt (--do_predict: the probability that the candidate fits, then the
row's columns, one line per row of --predict_file, default --data_dir/dev.tsv),
ranked.txt (--rank: each slot's candidates by falling probability) and
eval_results.txt (--do_eval on --data_dir/dev.tsv: the classifier's figures
plus eval_top1, eval_mrr and their chance levels). Details in
bert_ad/tasks/rewrite.py and docs/rewrite.md.
"""

from __future__ import annotations

import logging

from absl import flags

from bert_ad.cli.registry import register_task
from bert_ad.cli import task_runner
from bert_ad.errors import fail

log = logging.getLogger("bert_ad")


def define_task_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("data_dir", None, "Folder with train.tsv and dev.tsv "
                        "(bert-ad data prepare rewrite).", **d)
    flags.DEFINE_bool("rank", False, "With --do_predict: also write ranked.txt, each "
                      "slot's candidates sorted by probability.", **d)


def check_flags(f: flags.FlagValues) -> None:
    if (f.do_train or f.do_eval) and not f.data_dir:
        fail("--data_dir is required for --do_train and --do_eval (the folder "
             "with train.tsv and dev.tsv of `bert-ad data prepare rewrite`)")
    if f.do_predict and not (f.predict_file or f.data_dir):
        fail("--do_predict needs --predict_file (or --data_dir, to score its dev.tsv)")
    if f.rank and not f.do_predict:
        fail("--rank ranks the predictions: set --do_predict too")


def build(f: flags.FlagValues, encoder):
    """The RewriteTask the flags describe."""
    from bert_ad.tasks.rewrite import RewriteTask  # TensorFlow: once run
    return RewriteTask(encoder, f.data_dir, f.predict_file, f.rank, f.max_train_examples,
                       f.max_eval_examples)


COMMAND = register_task(
    "rewrite", "does a candidate phrase fit the blank of an ad text? (rewrite fine-tuning)",
    define_flags=define_task_flags, build=build, check_flags=check_flags,
    positive_flags=("predict_batch_size",), description=__doc__,
    launcher="rewrite_finetune.py", console_script="bert-ad-rewrite")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
