"""The flags that say how scores become answers, for every command that answers with
bert_ad/inference/predictions.py (`bert-ad serve`, `bert-ad predict`): defined and
checked once here, turned into its ServeOptions by `options_from_flags`."""

from __future__ import annotations

from absl import flags

from bert_ad.errors import fail


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_float("multi_label_threshold", 0.5,
                       "Multi-label classifiers: a label is answered at this probability "
                       "or more.", **d)
    flags.DEFINE_enum("token_split", None, ["words", "characters"],
                      "Token classification: a text's words are split at whitespace with "
                      "each punctuation mark and CJK character alone (words), or every "
                      "character is one (characters: models trained one character a line). "
                      "Default: as the model was trained (its export.json), else words.",
                      **d)
    flags.DEFINE_integer("doc_stride", 0,
                         "Pieces between windows of a long sentence or context (0: the "
                         "task's default: half a window for token classification, 128 for "
                         "squad).", **d)
    flags.DEFINE_integer("max_query_length", 64, "Squad: question pieces kept.", **d)
    flags.DEFINE_integer("n_best_size", 20, "Squad: candidates searched.", **d)
    flags.DEFINE_integer("max_answer_length", 30, "Squad: longest answer, in pieces.", **d)
    flags.DEFINE_bool("version_2_with_negative", None,
                      'Squad v2.0: answer "" when the null answer wins. Default: as the '
                      "model was trained (its export.json), else v1.1.", **d)
    flags.DEFINE_float("null_score_diff_threshold", None,
                       "Squad v2.0: answer \"\" when null score - best span's > this "
                       "(default: export.json's, else 0).", **d)


def check_flags(f: flags.FlagValues) -> None:
    """One line naming the first answer flag out of range."""
    for name in ("max_query_length", "n_best_size", "max_answer_length"):
        if f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1")
    if f.doc_stride < 0:
        fail(f"--doc_stride={f.doc_stride} must be at least 0")
    if not 0.0 < f.multi_label_threshold < 1.0:
        fail(f"--multi_label_threshold={f.multi_label_threshold} must be between 0 and 1")


def options_from_flags(f: flags.FlagValues):
    """The ServeOptions the flags say."""
    from bert_ad.inference.predictions import ServeOptions  # (numpy, the data modules)
    return ServeOptions(f.multi_label_threshold, f.token_split, f.doc_stride,
                        f.max_query_length, f.n_best_size, f.max_answer_length,
                        f.version_2_with_negative, f.null_score_diff_threshold)
