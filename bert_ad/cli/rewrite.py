"""rewrite_finetune.py: does a candidate phrase fit the blank of an ad text?

Fine-tunes BERT's pair classifier on N towers on rewrite rows
(scripts/prepare_rewrite_data.py): `label<TAB>segment_index<TAB>candidate<TAB>
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

from bert_ad import driver
from bert_ad.cli.flags import (check_training_flags, define_finetuning_flags,
                               export_settings_from_flags, use_export_model_files,
                               placement_from_flags, run_settings_from_flags,
                               text_encoder_from_flags)
from bert_ad.cli.runner import run_launcher
from bert_ad.errors import fail
from bert_ad.tasks.rewrite import RewriteTask

log = logging.getLogger("bert_ad")


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("data_dir", None, "Folder with train.tsv and dev.tsv "
                        "(scripts/prepare_rewrite_data.py).", **d)
    define_finetuning_flags(fv)
    flags.DEFINE_bool("rank", False, "With --do_predict: also write ranked.txt, each "
                      "slot's candidates sorted by probability.", **d)


def main(f: flags.FlagValues) -> int:
    if not (f.do_train or f.do_eval or f.do_predict or f.do_export):
        fail("nothing to do: set at least one of --do_train, --do_eval, --do_predict, "
             "--do_export")
    use_export_model_files(f)
    export_settings = export_settings_from_flags(f)
    if (f.do_train or f.do_eval) and not f.data_dir:
        fail("--data_dir is required for --do_train and --do_eval (the folder "
             "with train.tsv and dev.tsv of scripts/prepare_rewrite_data.py)")
    if f.do_predict and not (f.predict_file or f.data_dir):
        fail("--do_predict needs --predict_file (or --data_dir, to score its dev.tsv)")
    if f.rank and not f.do_predict:
        fail("--rank ranks the predictions: set --do_predict too")
    check_training_flags(f, "predict_batch_size")
    placement = placement_from_flags(f)
    task = RewriteTask(text_encoder_from_flags(f), f.data_dir, f.predict_file, f.rank,
                       f.max_train_examples, f.max_eval_examples)
    settings = run_settings_from_flags(f, placement)
    log.info("%s", placement.plan.describe())
    return driver.run(task, settings, placement, f.do_train, f.do_eval, f.do_predict,
                      export_settings)


def cli(argv=None) -> None:
    """Console entry point (rewrite_finetune.py, bert-ad-rewrite)."""
    run_launcher(define_flags, main, __doc__, argv=argv)
