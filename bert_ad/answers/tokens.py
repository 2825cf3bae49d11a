"""A token classifier's answer: one tag per word, from its scored windows (numpy only).

The task's predict.txt and metrics and the inference layer's answers
(bert_ad/inference/predictions.py) take their tags from here.
"""

from __future__ import annotations

from typing import List, Sequence

from bert_ad.data.token_features import TokenFeatures, words_from_windows


def predicted_tags(features: TokenFeatures, predicted: Sequence, labels: Sequence[str]
                   ) -> List[List[str]]:
    """One predicted tag per word of each sentence.

    Args:
      features: the sentences' windows (bert_ad.data.token_features.convert_sentences).
      predicted: each window's tag ids padded to its batch's length (a 2-D array,
        or an object array of rows when batches differ): the export's `predicted`.
      labels: the tag list (labels.txt order).
    Returns:
      Per sentence, each word's tag from the window where it has the most context.
    """
    per_sentence = words_from_windows(features, list(predicted))
    return [[labels[int(i)] for i in ids] for ids in per_sentence]
