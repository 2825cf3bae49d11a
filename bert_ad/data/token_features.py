"""Tagged sentences -> windows of pieces for token classification, and back.

Each sentence becomes pieces and each word (input token) reads one of them
(bert_ad/data/token_pieces.py): with WordPiece every word is split on its own
(`tokenizer.tokenize(word)`) and reads its first piece; with a unigram piece
list the sentence is segmented as a whole and each word reads the first piece
covering one of its characters, so several words may read one piece (`中国`
for `中`, `国`). A word's tag is predicted from the piece it reads; the other
pieces are left out of the loss and of the prediction. A word with no pieces
(a lone whitespace or control character) becomes [UNK], so every input word
gets exactly one tag. Chinese text with one character per word works as is.

A sentence longer than max_seq_length - 2 pieces is cut into overlapping
windows exactly as Google's run_squad cuts a document: windows of up to
max_seq_length - 2 pieces ([CLS] and [SEP] around them), each starting
`doc_stride` pieces after the previous one, the last one ending at the
sentence's end. A word belongs to every window holding the piece it reads and
is predicted by the one where that piece has the most context (run_squad's
`_check_is_max_context`: the largest min(left, right) context, plus 0.01 x the
window length; the first window wins a tie).

One window is one example of `TokenizedExamples` (bert_ad.data.batching), with
these columns (all int32, input_ids first: its length is the example's):

  input_ids      [pieces + 2]  [CLS] pieces [SEP]
  segment_ids    [pieces + 2]  zeros
  tag_ids        [pieces + 2]  a word's tag id on the piece it reads (the first
                               word's when words share a piece), 0 elsewhere
  tag_mask       [pieces + 2]  1 on every piece a word reads, 0 elsewhere
  word_positions [words]       index in input_ids of the piece each word reads
                               (non-decreasing; repeated for words sharing a piece)
  word_tag_ids   [words]       tag id of each word
  word_offsets   [words]       0 for the first word reading its piece, 1 for the
                               next one reading the same piece, ... (always 0
                               with WordPiece)
  word_mask      [words]       ones: after padding, marks the real words

`words` counts the words whose piece is in the window, in sentence order (a
window may hold more words than pieces): a softmax head gathers the sequence
output at word_positions, and a CRF runs over those [words] positions, not
over the pieces. The name is `tag_ids`, not `label_ids`, because make_batch
fills `label_ids` with the per-example labels. Windows holding no piece a word
reads (possible only inside a word longer than a window) are dropped.

`words_from_windows` turns per-window predictions back into exactly one
value per input word, in input order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.feature_cache import Codec, DamagedCache, decode_examples, encode_examples
from bert_ad.data.token_pieces import sentence_pieces
from bert_ad.data.tokenization import CLS, SEP
from bert_ad.errors import UserError

# The columns of one window, in order (see the module docstring).
COLUMNS = ("input_ids", "segment_ids", "tag_ids", "tag_mask",
           "word_positions", "word_tag_ids", "word_offsets", "word_mask")


@dataclass
class Window:
    """Where one window (example) comes from.

    Attributes:
      sentence: index of its sentence.
      first_word: index in the sentence of its first word (the first word
        whose first piece is in the window).
      max_context: [words] bool, True for the words this window predicts.
    """

    sentence: int
    first_word: int
    max_context: np.ndarray

    @property
    def num_words(self) -> int:
        return len(self.max_context)


@dataclass
class TokenFeatures:
    """The windows of a list of sentences.

    Attributes:
      examples: one example per window (columns as in the module docstring).
      windows: where each example comes from.
      sentence_lengths: words per sentence.
    """

    examples: TokenizedExamples
    windows: List[Window]
    sentence_lengths: List[int]


# --- the feature cache's view of TokenFeatures (bert_ad/data/feature_cache.py) ---------

_WINDOW = "window:"


def _encode_token_features(features: TokenFeatures) -> dict:
    arrays = encode_examples(features.examples)
    arrays[_WINDOW + "sentence"] = np.array([w.sentence for w in features.windows], np.int64)
    arrays[_WINDOW + "first_word"] = np.array([w.first_word for w in features.windows],
                                              np.int64)
    arrays[_WINDOW + "max_context"] = [np.asarray(w.max_context, bool)
                                       for w in features.windows]
    arrays["sentence_lengths"] = np.array(features.sentence_lengths, np.int64)
    return arrays


def _decode_token_features(arrays) -> TokenFeatures:
    windows = [Window(int(sentence), int(first_word), np.asarray(context, bool))
               for sentence, first_word, context in zip(
                   arrays[_WINDOW + "sentence"], arrays[_WINDOW + "first_word"],
                   arrays[_WINDOW + "max_context"])]
    examples = decode_examples({name: value for name, value in arrays.items()
                                if not name.startswith(_WINDOW)})
    if len(windows) != len(examples):
        raise DamagedCache(f"{len(windows)} windows for {len(examples)} rows")
    return TokenFeatures(examples, windows,
                         [int(n) for n in arrays["sentence_lengths"]])


TOKEN_FEATURES = Codec(_encode_token_features, _decode_token_features,
                       lambda features: len(features.examples))


def check_window_settings(max_seq_length: int, doc_stride: int) -> None:
    if max_seq_length < 3:
        raise UserError(f"--max_seq_length must be at least 3 ([CLS], one piece, "
                        f"[SEP]) for token classification, got {max_seq_length}")
    if doc_stride < 1:
        raise UserError(f"--doc_stride must be at least 1, got {doc_stride}")


def default_doc_stride(max_seq_length: int) -> int:
    """--doc_stride=0's stride: half a window (max_seq_length minus [CLS] and [SEP])."""
    return max(1, (max_seq_length - 2) // 2)


def window_spans(num_pieces: int, max_pieces: int, doc_stride: int) -> List[Tuple[int, int]]:
    """(start, length) of each window over `num_pieces` pieces (run_squad's
    doc_spans): windows of up to `max_pieces`, `doc_stride` apart, the last
    one reaching the end."""
    spans = []
    start = 0
    while start < num_pieces:
        length = min(num_pieces - start, max_pieces)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans


def max_context_span(spans: Sequence[Tuple[int, int]], position: int) -> int:
    """Index of the span where piece `position` has the most context
    (run_squad's _check_is_max_context); the first one wins a tie."""
    best_score, best_index = None, -1
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index


def convert_sentences(sentences: Sequence[Sequence[str]],
                      tags: Optional[Sequence[Sequence[str]]],
                      tokenizer, label_list: Sequence[str], max_seq_length: int,
                      doc_stride: int, unseen_tag: Optional[str] = None) -> TokenFeatures:
    """Windows of every sentence, in sentence order.

    Args:
      sentences: the words of each sentence (each at least one word).
      tags: one tag per word for each sentence, or None (prediction: tag ids 0).
      tokenizer: with tokenize(text) and convert_tokens_to_ids(tokens).
      label_list: the tags; a tag's id is its index.
      max_seq_length: pieces per window including [CLS] and [SEP].
      doc_stride: pieces between the starts of consecutive windows.
      unseen_tag: a tag of the list that stands for a tag outside it (a dev
        file's gold tag training never saw); None: such a tag is an error.

    Returns:
      TokenFeatures (see the module docstring).
    """
    check_window_settings(max_seq_length, doc_stride)
    label_index = {label: i for i, label in enumerate(label_list)}
    cls_sep = tokenizer.convert_tokens_to_ids([CLS, SEP])
    columns: Dict[str, list] = {name: [] for name in COLUMNS}
    windows: List[Window] = []
    cache: Dict[str, List[str]] = {}
    for sentence_index, words in enumerate(sentences):
        if not len(words):
            raise ValueError(f"sentence {sentence_index} has no words")
        if tags is not None and len(tags[sentence_index]) != len(words):
            raise ValueError(f"sentence {sentence_index}: {len(tags[sentence_index])} "
                             f"tags for {len(words)} words")
        word_tags = _tag_ids(tags[sentence_index] if tags is not None else None,
                             len(words), label_index, unseen_tag)
        segmented = sentence_pieces(words, tokenizer, cache)
        flat = segmented.pieces
        piece_ids = np.array(tokenizer.convert_tokens_to_ids(flat), np.int32)
        # first_piece[w]: index in `flat` of the piece word w reads (non-decreasing).
        first_piece = segmented.first_piece
        word_offsets = segmented.offsets
        spans = window_spans(len(flat), max_seq_length - 2, doc_stride)
        best_span = np.array([max_context_span(spans, int(p)) for p in first_piece])
        for span_index, (start, length) in enumerate(spans):
            in_window = np.nonzero((first_piece >= start)
                                   & (first_piece < start + length))[0]
            if not len(in_window):
                continue
            positions = (first_piece[in_window] - start + 1).astype(np.int32)
            size = length + 2
            ids = np.concatenate([[cls_sep[0]], piece_ids[start:start + length],
                                  [cls_sep[1]]]).astype(np.int32)
            piece_tags = np.zeros(size, np.int32)
            read, first_reader = np.unique(positions, return_index=True)
            piece_tags[read] = word_tags[in_window][first_reader]
            piece_mask = np.zeros(size, np.int32)
            piece_mask[positions] = 1
            for name, values in (("input_ids", ids),
                                 ("segment_ids", np.zeros(size, np.int32)),
                                 ("tag_ids", piece_tags), ("tag_mask", piece_mask),
                                 ("word_positions", positions),
                                 ("word_tag_ids", word_tags[in_window]),
                                 ("word_offsets", word_offsets[in_window]),
                                 ("word_mask", np.ones(len(in_window), np.int32))):
                columns[name].append(values)
            windows.append(Window(sentence_index, int(in_window[0]),
                                  best_span[in_window] == span_index))
    return TokenFeatures(TokenizedExamples(columns), windows,
                         [len(words) for words in sentences])


def _tag_ids(tags: Optional[Sequence[str]], num_words: int,
             label_index: Dict[str, int], unseen_tag: Optional[str] = None) -> np.ndarray:
    if tags is None:
        return np.zeros(num_words, np.int32)
    ids = np.zeros(num_words, np.int32)
    for position, tag in enumerate(tags):
        if tag not in label_index and unseen_tag is not None:
            tag = unseen_tag
        if tag not in label_index:
            raise UserError(f"tag {tag!r} is not in the label list "
                            f"({', '.join(label_index)}); add it to --labels")
        ids[position] = label_index[tag]
    return ids


def words_from_windows(features: TokenFeatures, window_values: Sequence) -> List[np.ndarray]:
    """One value per input word, each from its max-context window.

    Args:
      features: what `convert_sentences` returned.
      window_values: for each window (example) in order, an array whose first
        axis runs over the window's words: predicted tag ids [words], or
        probabilities [words, num_tags]. Longer arrays (padded batch rows)
        are cut to the window's words.

    Returns:
      For each sentence, an array with one row per word, in input order.
    """
    if len(window_values) != len(features.windows):
        raise ValueError(f"{len(window_values)} window predictions for "
                         f"{len(features.windows)} windows")
    results: List[Optional[np.ndarray]] = [None] * len(features.sentence_lengths)
    filled = [np.zeros(n, bool) for n in features.sentence_lengths]
    for window, values in zip(features.windows, window_values):
        values = np.asarray(values)[:window.num_words]
        if len(values) < window.num_words:
            raise ValueError(f"window of sentence {window.sentence}: {len(values)} "
                             f"values for {window.num_words} words")
        sentence = window.sentence
        if results[sentence] is None:
            results[sentence] = np.zeros((features.sentence_lengths[sentence],)
                                         + values.shape[1:], values.dtype)
        words = window.first_word + np.nonzero(window.max_context)[0]
        results[sentence][words] = values[window.max_context]
        filled[sentence][words] = True
    for sentence, done in enumerate(filled):
        if not done.all():  # cannot happen: every word's first piece is in a window
            raise AssertionError(f"sentence {sentence}: words {np.nonzero(~done)[0]} "
                                 f"got no prediction")
    return results
