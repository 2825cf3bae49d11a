"""`bert-ad data prepare` (bert_ad/tools/prepare.py): its names, flags and refusals.

What each data set holds is tested beside its module (test_datasets.py,
test_peoples_daily.py, test_rewrite_data.py, test_chinese_words.py), through
the same command.
"""

from __future__ import annotations

import inspect

import pytest

from bert_ad.cli.data import define_flags
from bert_ad.cli.runner import parse_flags
from bert_ad.data import datasets, peoples_daily, rewrite_rows
from bert_ad.tools import prepare
from helpers import assert_one_error_line
from prepare_command import PROGRAM, USAGE, run_prepare


def parsed(*flag_args: str):
    return parse_flags(define_flags, [PROGRAM] + list(flag_args), USAGE,
                       prepare.__doc__)


def test_every_data_set_is_a_name_with_a_builder_and_its_flags():
    assert set(prepare.DATASETS) == (set(datasets.DATASETS) | {"lee_similarity"}
                                     | set(peoples_daily.DATASETS)
                                     | {"peoples_daily_mrc", "rewrite", "domain_text",
                                        "trim_corpus"})
    assert set(prepare.BUILDERS) == set(prepare.FLAGS_OF) == set(prepare.DATASETS)
    assert all("\n" not in line for line in prepare.DATASETS.values())
    assert "\n" not in prepare.SUMMARY
    defined = set(parsed())
    taken = {flag for flags in prepare.FLAGS_OF.values() for flag in flags}
    assert taken == defined             # no flag that nothing takes
    for name, required in prepare.REQUIRED.items():
        assert set(required) <= set(prepare.FLAGS_OF[name])


def test_shared_flags_default_to_what_each_data_sets_code_does():
    f = parsed()
    for build in (datasets.prepare, datasets.prepare_lee_similarity):
        defaults = inspect.signature(build).parameters
        for flag in ("seed", "dev_fraction", "test_fraction", "overwrite"):
            assert f[flag].default == defaults[flag].default, (build, flag)
    assert (f.dev_fraction, f.test_fraction) == (peoples_daily.DEV_FRACTION,
                                                 peoples_daily.TEST_FRACTION)
    settings = rewrite_rows.PrepareSettings()
    for flag in ("negatives", "length_match", "dev_fraction", "seed", "slots_per_text",
                 "min_segments", "max_texts"):
        assert f[flag].default == getattr(settings, flag), flag


def test_flags_are_absl_flags():
    f = parsed("--nolength_match", "--do_lower_case=false", "--overwrite",
               "--seed", "3", "--output_dir=out")
    assert (f.length_match, f.do_lower_case, f.overwrite, f.seed) == (False, False, True, 3)
    assert parsed("--length_match=true").length_match is True
    run = run_prepare("movie_reviews", "--output_dir=out", "--seed=three")
    assert_one_error_line(run, "--seed")


def test_an_unknown_name_is_refused_with_the_names(tmp_path):
    run = run_prepare("movie_review", f"--output_dir={tmp_path / 'out'}")
    line = assert_one_error_line(run, "'movie_review'")
    for name in prepare.DATASETS:
        assert name in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, given, flag", [
    ("peoples_daily_ner", "--seed=3", "seed"),       # split by corpus order
    ("peoples_daily_mrc", "--seed=3", "seed"),
    ("rewrite", "--overwrite", "overwrite"),
    ("rewrite", "--source=raw.txt", "source"),
    ("domain_text", "--dev_fraction=0.2", "dev_fraction"),
    ("movie_reviews", "--vocab_file=vocab.txt", "vocab_file"),
    ("movie_reviews", "--nodo_lower_case", "do_lower_case"),
    ("movie_reviews", "--do_lower_case=true", "do_lower_case"),   # even at its default
])
def test_a_flag_the_data_set_does_not_take_is_refused(tmp_path, name, given, flag):
    run = run_prepare(name, f"--output_dir={tmp_path / 'out'}", given)
    line = assert_one_error_line(run, f"--{flag} does not apply to {name}")
    for taken in prepare.FLAGS_OF[name]:
        assert f"--{taken}" in line
    assert run.stdout == "" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, flags, missing", [
    ("movie_reviews", [], "--output_dir"),
    ("rewrite", ["--output_dir=out"], "--input_file"),
    ("domain_text", ["--output_dir=out", "--reviews_dir=r"], "--peoples_daily"),
])
def test_a_missing_required_flag_is_refused(name, flags, missing):
    assert_one_error_line(run_prepare(name, *flags), f"{missing} is required for {name}")


def test_help_lists_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        parsed("--help")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {PROGRAM} {USAGE}\n")
    for flag in parsed():
        assert f"  --{flag}: " in out, flag
    for name in prepare.DATASETS:               # an example command of every data set
        assert f"  bert-ad data prepare {name} --" in out, name
