"""Word boundaries for Chinese whole-word masking, without a segmenter.

`create_pretraining_data.py --chinese_whole_word` masks all characters of a
word together and reads the words from spaces in the text. People's Daily
comes segmented; user text (reviews, titles, ads) does not, and no Chinese
segmenter ships as a dependency. So we cut such text by forward maximum
matching against the words of a segmented corpus: at each CJK character take
the longest lexicon word that starts there (a single character otherwise).
That is cruder than a trained segmenter (Chinese BERT-wwm used LTP) but it
finds the frequent words, which is what grouping masks needs: a masked 手 of
手机 is otherwise guessed from 机.
"""

from __future__ import annotations

import collections
from typing import Iterable, List, Set

from bert_ad.data.basic_tokenization import is_chinese_char


def build_lexicon(words: Iterable[str], min_count: int = 2, max_length: int = 4) -> Set[str]:
    """The multi-character all-CJK words seen at least `min_count` times.

    Args:
      words: the words of a segmented corpus, in any order, repeats included.
      min_count: rarer words are left out (one-off names and segmentation
        slips would otherwise glue characters together elsewhere).
      max_length: longer words are left out (mostly names of organisations,
        whose parts are words of their own).

    Returns:
      The lexicon for `forward_max_match`.
    """
    counts = collections.Counter(
        word for word in words
        if 2 <= len(word) <= max_length and all(is_chinese_char(ord(c)) for c in word))
    return {word for word, count in counts.items() if count >= min_count}


def forward_max_match(text: str, lexicon: Set[str], max_length: int = 4) -> List[str]:
    """`text` cut into words: lexicon words (longest first) and single CJK characters.

    A run of other characters (Latin letters, digits, punctuation) between CJK
    ones stays one word, split at whitespace; the WordPiece tokenizer cuts it
    further. Whitespace itself is dropped.

    >>> forward_max_match("这个手机很好用abc 12", {"手机", "好用"})
    ['这', '个', '手机', '很', '好用', 'abc', '12']
    """
    words: List[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif is_chinese_char(ord(char)):
            length = 1
            for candidate in range(min(max_length, len(text) - i), 1, -1):
                if text[i:i + candidate] in lexicon:
                    length = candidate
                    break
            words.append(text[i:i + length])
            i += length
        else:
            start = i
            while i < len(text) and not text[i].isspace() and not is_chinese_char(ord(text[i])):
                i += 1
            words.append(text[start:i])
    return words
