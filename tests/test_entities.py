"""Entity metrics: hand-computed cases in both lanes, seqeval as the reference in tf2."""

from __future__ import annotations

import random
import warnings

import pytest

from bert_ad.metrics.entities import count_entities, entity_metrics


def test_hand_computed_case():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["S-ORG", "O"]]
    guess = [["B-PER", "I-PER", "O", "B-ORG"], ["S-ORG", "B-PER"]]
    assert count_entities(gold, guess) == {"LOC": (0, 0, 1), "ORG": (1, 2, 1),
                                           "PER": (1, 2, 1)}
    results = entity_metrics(gold, guess, types=["LOC", "MISC", "ORG", "PER"])
    # 2 correct of 4 predicted, of 3 gold.
    assert results["eval_precision"] == pytest.approx(0.5)
    assert results["eval_recall"] == pytest.approx(2 / 3)
    assert results["eval_f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert results["eval_PER_precision"] == 0.5 and results["eval_PER_recall"] == 1.0
    assert results["eval_PER_f1"] == pytest.approx(2 / 3)
    assert results["eval_LOC_f1"] == 0.0 and results["eval_LOC_support"] == 1
    # MISC is listed (stable keys) but, absent from both, not in the macro mean.
    assert results["eval_MISC_f1"] == 0.0 and results["eval_MISC_support"] == 0
    assert results["eval_macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 0.0) / 3)
    assert results["eval_macro_precision"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert results["eval_accuracy"] == pytest.approx(4 / 6)
    assert (results["eval_true_entities"], results["eval_predicted_entities"],
            results["eval_correct_entities"]) == (3, 4, 2)


def test_typeless_segmentation_has_only_micro_figures():
    gold = [["B", "E", "S", "B", "M", "E"]]
    guess = [["B", "E", "B", "E", "M", "E"]]  # 我们|是|中国人 vs 我们|是中|国人
    results = entity_metrics(gold, guess)
    assert results["eval_precision"] == pytest.approx(1 / 3)
    assert results["eval_recall"] == pytest.approx(1 / 3)
    assert not [k for k in results if k.startswith("eval__")]


def test_no_entities_anywhere_gives_zeros_not_errors():
    results = entity_metrics([["O", "O"]], [["O", "O"]])
    assert results["eval_f1"] == 0.0 and results["eval_macro_f1"] == 0.0
    assert results["eval_accuracy"] == 1.0


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="sentence 0: 1 predicted tags for 2"):
        entity_metrics([["O", "O"]], [["O"]])


def _random_tags(rng, letters, types, length):
    tags = []
    for _ in range(length):
        letter = rng.choice(letters)
        kind = rng.choice(types)
        tags.append(letter if letter == "O" or not kind else f"{letter}-{kind}")
    return tags


def _perturb(rng, tags, letters, types, rate):
    return [_random_tags(rng, letters, types, 1)[0] if rng.random() < rate else t
            for t in tags]


def _seqeval_view(sentences):
    """seqeval does not know M; BMES is BIOES with M for I."""
    return [["I" + t[1:] if t.startswith("M") else t for t in tags] for tags in sentences]


@pytest.mark.parametrize("letters, types, seed", [
    ("BIO", ["PER", "LOC", "ORG"], 1),
    ("BIO", ["PER", "LOC", "ORG"], 2),
    ("BIOES", ["PER", "LOC"], 3),
    ("BMES", [""], 4),            # word segmentation
    ("BIOES", [""], 5),
    ("IO", ["A", "B", "C", "D"], 6),
    ("BMESO", ["PER", "LOC"], 7),
])
def test_equals_seqeval_on_random_sequences(letters, types, seed):
    metrics = pytest.importorskip("seqeval.metrics")
    rng = random.Random(seed)
    gold = [_random_tags(rng, letters, types, rng.randint(1, 15)) for _ in range(60)]
    guess = [_perturb(rng, tags, letters, types, 0.3) for tags in gold]
    ours = entity_metrics(gold, guess)
    y_true, y_pred = _seqeval_view(gold), _seqeval_view(guess)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns about zero divisions
        assert ours["eval_precision"] == pytest.approx(metrics.precision_score(y_true, y_pred))
        assert ours["eval_recall"] == pytest.approx(metrics.recall_score(y_true, y_pred))
        assert ours["eval_f1"] == pytest.approx(metrics.f1_score(y_true, y_pred))
        for name in ("precision", "recall", "f1"):
            reference = getattr(metrics, f"{name}_score")(y_true, y_pred, average="macro")
            assert ours[f"eval_macro_{name}"] == pytest.approx(reference), name
        assert ours["eval_accuracy"] == pytest.approx(metrics.accuracy_score(y_true, y_pred))
        report = metrics.classification_report(y_true, y_pred, output_dict=True)
    for kind, scores in report.items():
        if kind.endswith(" avg") or kind == "_":
            continue
        assert ours[f"eval_{kind}_precision"] == pytest.approx(scores["precision"])
        assert ours[f"eval_{kind}_recall"] == pytest.approx(scores["recall"])
        assert ours[f"eval_{kind}_f1"] == pytest.approx(scores["f1-score"])
        assert ours[f"eval_{kind}_support"] == scores["support"]
    assert ours["eval_true_entities"] == report["micro avg"]["support"]
    # The random sequences really exercise the metric: some hits, some misses.
    assert 0.0 < ours["eval_f1"] < 1.0
