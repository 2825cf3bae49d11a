"""Cutting a text's tokens to the room a sequence has, and checking that room.

`truncate_tokens` and `truncate_pair` cut texts to the room left for the
special tokens ([CLS], [SEP]): keeping the head, the tail, or both
(--truncation); `check_max_seq_length` refuses sequence lengths the model has
no position embeddings for.
"""

from __future__ import annotations

from typing import Sequence, Tuple

from bert_ad.errors import fail

TRUNCATION_STRATEGIES = ("head", "tail", "head+tail")


def _check_strategy(strategy: str, head_fraction: float) -> None:
    if strategy not in TRUNCATION_STRATEGIES:
        fail(f"--truncation={strategy} is not one of "
             f"{', '.join(TRUNCATION_STRATEGIES)}")
    if not 0.0 <= head_fraction <= 1.0:
        fail(f"the head+tail truncation head fraction {head_fraction} is not "
             f"between 0 and 1")


def truncate_tokens(tokens: Sequence, max_tokens: int, strategy: str = "head",
                    head_fraction: float = 0.25) -> list:
    """At most `max_tokens` of `tokens`, as a new list.

    Args:
      tokens: the tokens (or ids) of one text.
      max_tokens: how many may stay (>= 0).
      strategy: "head" keeps the first max_tokens, "tail" the last, and
        "head+tail" the first round(head_fraction * max_tokens) and the rest
        from the end (Sun et al. 2019: 128 + 382 of 510 is
        head_fraction=128/510). Python's round() sends ties to even.
      head_fraction: the share of the head in "head+tail".

    Returns:
      A new list; `tokens` is left as it is.
    """
    _check_strategy(strategy, head_fraction)
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    n = len(tokens)
    if n <= max_tokens:
        return list(tokens)
    if strategy == "head":
        return list(tokens[:max_tokens])
    if strategy == "tail":
        return list(tokens[n - max_tokens:])
    n_head = int(round(head_fraction * max_tokens))
    n_tail = max_tokens - n_head
    return list(tokens[:n_head]) + list(tokens[n - n_tail:])


def _pair_lengths(len_a: int, len_b: int, max_tokens: int) -> Tuple[int, int]:
    """Lengths left by Google's `_truncate_seq_pair`, in closed form.

    Google trims one token at a time from the longer sequence, from b on a
    tie, until the total fits. Once the lengths meet they go down in turns.
    """
    excess = len_a + len_b - max_tokens
    if excess <= 0:
        return len_a, len_b
    if len_a > len_b:
        gap = len_a - len_b  # trims of a until a == b
        if excess <= gap:
            return len_a - excess, len_b
        rest = excess - gap  # from a == b: b, a, b, a, ...
        return len_b - rest // 2, len_b - (rest + 1) // 2
    gap = len_b - len_a + 1  # trims of b (ties go to b) until b == a - 1
    if excess <= gap:
        return len_a, len_b - excess
    rest = excess - gap  # from b == a - 1: a, b, a, b, ...
    return len_a - (rest + 1) // 2, len_a - 1 - rest // 2


def truncate_pair(tokens_a: Sequence, tokens_b: Sequence, max_tokens: int,
                  strategy: str = "head", head_fraction: float = 0.25
                  ) -> Tuple[list, list]:
    """Cut a text pair to at most `max_tokens` tokens in all.

    Like Google's `_truncate_seq_pair`: the longer of the two loses a token
    until they fit, so a short question keeps all of its tokens while a long
    passage is cut. Where the tokens go depends on `strategy`: from the end
    ("head"), the start ("tail") or the middle ("head+tail", keeping
    round(head_fraction * kept) tokens of the start, as `truncate_tokens`).

    Args:
      tokens_a, tokens_b: the two texts' tokens (or ids).
      max_tokens: room for both (max_seq_length - 3 with [CLS] and two [SEP]).
      strategy, head_fraction: as for `truncate_tokens`.

    Returns:
      (new_a, new_b), new lists; the inputs are left as they are.
    """
    _check_strategy(strategy, head_fraction)
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    len_a, len_b = _pair_lengths(len(tokens_a), len(tokens_b), max_tokens)
    return (truncate_tokens(tokens_a, len_a, strategy, head_fraction),
            truncate_tokens(tokens_b, len_b, strategy, head_fraction))


def check_max_seq_length(max_seq_length: int,
                         max_position_embeddings: int = 512) -> None:
    """Refuse a --max_seq_length the model cannot take.

    Raises:
      UserError: longer than the model's position table, or too short to
        hold [CLS] and two [SEP].
    """
    if max_seq_length > max_position_embeddings:
        fail(f"--max_seq_length={max_seq_length} exceeds the model's "
             f"max_position_embeddings ({max_position_embeddings}); "
             f"use {max_position_embeddings} or less")
    if max_seq_length < 3:
        fail(f"--max_seq_length={max_seq_length} is too small; it needs room "
             f"for [CLS] and two [SEP], so use 3 or more")
