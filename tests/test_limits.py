"""Count flags that multiply a resource are bounded, with one line saying why.

`--n_gpus` (towers per device) is tested with the device plan in
test_towers.py; here the bound itself and `--num_workers` of
create_pretraining_data, which started one interpreter per worker unbounded.
"""

from __future__ import annotations

import os

import pytest

from bert_ad.errors import UserError
from bert_ad.limits import (MAX_WORKERS_PER_CPU, check_tower_count, check_worker_count,
                            logical_cpus)
from bert_ad.pretraining.instances import InstanceSettings
from bert_ad.pretraining.pipeline import create_pretraining_data
from helpers import SAMPLE_SENTIMENT, sample_sentiment_texts, write_vocab


def test_logical_cpus_are_those_this_process_may_use():
    assert logical_cpus() == len(os.sched_getaffinity(0)) >= 1


def test_the_bounds_say_why_and_what_to_use_instead():
    check_tower_count(16, 2, "GPUs")
    with pytest.raises(UserError, match=r"--n_gpus=17 asks for 17 towers on 2 GPUs: at most "
                                        r"8 towers per device \(16 here\)"):
        check_tower_count(17, 2, "GPUs")
    check_worker_count(8, cpus=2)
    with pytest.raises(UserError, match=r"^--num_workers=9 would start 9 processes on 2 "
                                        r"logical CPUs: at most 4 per CPU \(8 here\), .*; use "
                                        r"--num_workers=2 for the fastest run$"):
        check_worker_count(9, cpus=2)
    with pytest.raises(UserError, match=r"--num_workers=0 must be at least 1"):
        check_worker_count(0, cpus=2)


def test_create_pretraining_data_refuses_more_workers_than_the_bound(tmp_path):
    """--num_workers=100000 would have spawned 100,000 interpreters, one per worker."""
    vocab = str(tmp_path / "vocab.txt")
    write_vocab(vocab, sample_sentiment_texts())
    corpus = os.path.join(SAMPLE_SENTIMENT, "train.tsv")
    output = tmp_path / "out" / "shard.tfrecord"
    too_many = MAX_WORKERS_PER_CPU * logical_cpus() + 1
    with pytest.raises(UserError, match=rf"--num_workers={too_many} would start"):
        create_pretraining_data([corpus], [str(output)],
                                InstanceSettings(vocab_file=vocab, max_seq_length=32,
                                                 dupe_factor=1),
                                doc_per_line=True, num_workers=too_many)
    assert not os.path.exists(str(tmp_path / "out"))
