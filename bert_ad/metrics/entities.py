"""Entity-level precision, recall and F1 (conlleval / seqeval) and token accuracy.

An entity counts as found only if its type and both boundaries match a gold
entity (spans from `bert_ad.data.tag_schemes.extract_spans`, seqeval's default
mode). Sentences are scored separately, so no entity crosses a sentence end.

Keys, in the style of eval_results.txt:
  eval_precision, eval_recall, eval_f1        micro: over all entities
  eval_macro_precision, _recall, eval_macro_f1
                                              mean over the types found in the
                                              gold or the predicted tags (as
                                              seqeval's average="macro")
  eval_<TYPE>_precision, _recall, _f1, _support
                                              per type (support = gold count);
                                              not for typeless tags (word
                                              segmentation), whose only "type"
                                              is the micro figure
  eval_accuracy                               tags equal, over all tokens
  eval_true_entities, eval_predicted_entities, eval_correct_entities
A ratio with a zero denominator is 0 (seqeval's and scikit-learn's
zero_division=0).
"""

from __future__ import annotations

import collections
from typing import Dict, List, Sequence, Tuple

from bert_ad.data.tag_schemes import extract_spans


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _f1(precision: float, recall: float) -> float:
    return _ratio(2 * precision * recall, precision + recall)


def count_entities(true_tags: Sequence[Sequence[str]],
                   predicted_tags: Sequence[Sequence[str]]
                   ) -> Dict[str, Tuple[int, int, int]]:
    """{type: (correct, predicted, true)} entity counts over all sentences.

    Args:
      true_tags, predicted_tags: one tag list per sentence, equal lengths.
    """
    if len(true_tags) != len(predicted_tags):
        raise ValueError(f"{len(predicted_tags)} predicted sentences for "
                         f"{len(true_tags)} gold ones")
    correct: collections.Counter = collections.Counter()
    predicted: collections.Counter = collections.Counter()
    true: collections.Counter = collections.Counter()
    for index, (gold, guess) in enumerate(zip(true_tags, predicted_tags)):
        if len(gold) != len(guess):
            raise ValueError(f"sentence {index}: {len(guess)} predicted tags for "
                             f"{len(gold)} gold ones")
        gold_spans = set(extract_spans(gold))
        guess_spans = set(extract_spans(guess))
        true.update(span.type for span in gold_spans)
        predicted.update(span.type for span in guess_spans)
        correct.update(span.type for span in gold_spans & guess_spans)
    kinds = set(true) | set(predicted)
    return {kind: (correct[kind], predicted[kind], true[kind]) for kind in sorted(kinds)}


def entity_metrics(true_tags: Sequence[Sequence[str]],
                   predicted_tags: Sequence[Sequence[str]],
                   types: Sequence[str] = ()) -> Dict[str, float]:
    """The metrics of the module docstring.

    Args:
      true_tags, predicted_tags: one tag list per sentence, equal lengths.
      types: entity types that get per-type keys even when absent from both
        (e.g. every type of the label list, so the keys do not depend on the
        data); types found in the tags get them anyway.

    Returns:
      {key: value}; counts are ints, everything else floats.
    """
    counts = count_entities(true_tags, predicted_tags)
    results: Dict[str, float] = {}
    total_correct = sum(c for c, _, _ in counts.values())
    total_predicted = sum(p for _, p, _ in counts.values())
    total_true = sum(t for _, _, t in counts.values())
    precision = _ratio(total_correct, total_predicted)
    recall = _ratio(total_correct, total_true)
    results["eval_precision"] = precision
    results["eval_recall"] = recall
    results["eval_f1"] = _f1(precision, recall)

    per_type = {}
    for kind, (correct, predicted, true) in counts.items():
        kind_precision = _ratio(correct, predicted)
        kind_recall = _ratio(correct, true)
        per_type[kind] = (kind_precision, kind_recall, _f1(kind_precision, kind_recall), true)
    for name, position in (("precision", 0), ("recall", 1), ("f1", 2)):
        values = [scores[position] for scores in per_type.values()]
        results[f"eval_macro_{name}"] = sum(values) / len(values) if values else 0.0
    for kind in sorted(set(types) | set(per_type)):
        if not kind:
            continue  # typeless tags: the micro figures are the only ones
        kind_precision, kind_recall, kind_f1, support = per_type.get(kind, (0.0, 0.0, 0.0, 0))
        results[f"eval_{kind}_precision"] = kind_precision
        results[f"eval_{kind}_recall"] = kind_recall
        results[f"eval_{kind}_f1"] = kind_f1
        results[f"eval_{kind}_support"] = support

    tokens = sum(len(gold) for gold in true_tags)
    equal = sum(g == p for gold, guess in zip(true_tags, predicted_tags)
                for g, p in zip(gold, guess))
    results["eval_accuracy"] = _ratio(equal, tokens)
    results["eval_true_entities"] = total_true
    results["eval_predicted_entities"] = total_predicted
    results["eval_correct_entities"] = total_correct
    return results


def entity_metric_names(types: Sequence[str]) -> List[str]:
    """The figures entity_metrics gives for the entity `types` (for --best_metric)."""
    names = ["eval_precision", "eval_recall", "eval_f1", "eval_accuracy",
             "eval_true_entities", "eval_predicted_entities", "eval_correct_entities"]
    names += [f"eval_macro_{name}" for name in ("precision", "recall", "f1")]
    names += [f"eval_{kind}_{name}" for kind in types
              for name in ("precision", "recall", "f1", "support")]
    return names
