"""Masked-LM masking: Google's create_masked_lm_predictions, in reusable parts.

Google's BERT picks the positions to predict like this:

  1. candidates: every position except [CLS] and [SEP]; with whole-word
     masking, the pieces of one word form one candidate group (a "##" piece
     joins the word before it)
  2. shuffle the groups with the instance's random generator
  3. take groups in that order until num_to_predict =
     min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))
     positions are chosen (len(tokens) counts [CLS] and [SEP]); a group that
     would overshoot is skipped, so whole-word masking may choose fewer
  4. each chosen position becomes [MASK] 80% of the time, stays itself 10%,
     and becomes a random vocab entry 10% (any entry, as Google: [PAD] and
     [unused*] included)

The random draws are Google's, call for call (`random.Random.shuffle`, then
per position `random()`, maybe a second `random()`, maybe `randint`), so the
same generator state gives the same masks as Google's script.

Groups can also come from `word_ids` (one id per position, None for special
tokens): positions next to each other with the same id are one group. That is
how pre-segmented Chinese text (words separated by spaces, each character its
own WordPiece) and SentencePiece words get whole-word masking, and how a
caller can mask arbitrary spans (give each span its own id).

The one deviation from Google: a "##" piece joins the group before it only
when that group ends right before it. Google would also join a "##" piece
that starts segment B (after truncation) to the last word of segment A,
across the [SEP].
"""

from __future__ import annotations

import random
from typing import List, Optional, Sequence, Tuple

from bert_ad.data.tokenization import CLS, MASK, SEP

SPECIAL_TOKENS = (CLS, SEP)
MASK_PROB = 0.8  # of the chosen positions become [MASK]
KEEP_PROB = 0.5  # of the rest stay as they are; the others become random words


def num_to_predict(num_tokens: int, masked_lm_prob: float,
                   max_predictions: int) -> int:
    """How many positions Google masks in a sequence of `num_tokens` tokens.

    Args:
      num_tokens: the whole sequence, [CLS] and [SEP] included.
      masked_lm_prob: the share to mask (0.15).
      max_predictions: the cap (max_predictions_per_seq).

    Returns:
      min(max_predictions, max(1, round(num_tokens * masked_lm_prob))), with
      Python's round (ties to even), as Google's script under Python 3.
    """
    return min(max_predictions, max(1, int(round(num_tokens * masked_lm_prob))))


def candidate_groups(tokens: Sequence[str], whole_word: bool = False,
                     word_ids: Optional[Sequence[Optional[int]]] = None,
                     special_tokens: Sequence[str] = SPECIAL_TOKENS
                     ) -> List[List[int]]:
    """The positions that may be masked, grouped into units masked together.

    Args:
      tokens: [seq] the instance's tokens.
      whole_word: group a "##" piece with the piece right before it
        (Google's --do_whole_word_mask for WordPiece).
      word_ids: [seq] optional word id per position; when given, adjacent
        positions with the same id form one group and `whole_word` is not
        consulted. None marks a position that belongs to no word.
      special_tokens: tokens that are never masked.

    Returns:
      Groups of positions, in sequence order; each group is ascending.
    """
    if word_ids is not None and len(word_ids) != len(tokens):
        raise ValueError(f"word_ids has {len(word_ids)} entries for "
                         f"{len(tokens)} tokens")
    groups = []  # type: List[List[int]]
    for i, token in enumerate(tokens):
        if token in special_tokens:
            continue
        follows_previous = bool(groups) and groups[-1][-1] == i - 1
        if word_ids is not None:
            joins = (follows_previous and word_ids[i] is not None
                     and word_ids[i] == word_ids[i - 1])
        else:
            joins = whole_word and follows_previous and token.startswith("##")
        if joins:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def choose_groups(groups: List[List[int]], rng: random.Random,
                  budget: int) -> List[List[int]]:
    """Shuffle `groups` in place and take them, in that order, up to `budget`.

    A group that would take the count past `budget` is skipped and the next
    ones are still tried (Google's loop), so the result can hold fewer than
    `budget` positions when groups are longer than one.

    Returns:
      The chosen groups in the order they were chosen (the order the
      replacements draw their random numbers in).
    """
    rng.shuffle(groups)
    chosen = []
    count = 0
    for group in groups:
        if count >= budget:
            break
        if count + len(group) > budget:
            continue
        chosen.append(group)
        count += len(group)
    return chosen


def replacement(token: str, rng: random.Random, vocab_words: Sequence[str],
                mask_token: str = MASK) -> str:
    """What a chosen position shows the model: 80% [MASK], 10% itself,
    10% a random entry of `vocab_words`."""
    if rng.random() < MASK_PROB:
        return mask_token
    if rng.random() < KEEP_PROB:
        return token
    return vocab_words[rng.randint(0, len(vocab_words) - 1)]


def mask_tokens(tokens: Sequence[str], rng: random.Random,
                masked_lm_prob: float, max_predictions: int,
                vocab_words: Sequence[str], whole_word: bool = False,
                word_ids: Optional[Sequence[Optional[int]]] = None
                ) -> Tuple[List[str], List[int], List[str]]:
    """Google's create_masked_lm_predictions.

    Args:
      tokens: [seq] the instance, with its [CLS] and [SEP].
      rng: the instance's random generator (advanced as Google's is).
      masked_lm_prob: share of the sequence to mask.
      max_predictions: most positions to mask (max_predictions_per_seq).
      vocab_words: the vocab in id order; random replacements come from it.
      whole_word: mask all pieces of a word together ("##" pieces).
      word_ids: [seq] optional word ids that define the groups instead (see
        `candidate_groups`).

    Returns:
      (output_tokens [seq], positions [n], labels [n]): the tokens the model
      sees, the masked positions in ascending order, and the original token
      at each of them; n <= num_to_predict(len(tokens), ...).
    """
    groups = candidate_groups(tokens, whole_word=whole_word, word_ids=word_ids)
    budget = num_to_predict(len(tokens), masked_lm_prob, max_predictions)
    output = list(tokens)
    positions = []
    for group in choose_groups(groups, rng, budget):
        for index in group:
            output[index] = replacement(tokens[index], rng, vocab_words)
            positions.append(index)
    positions.sort()
    return output, positions, [tokens[i] for i in positions]
