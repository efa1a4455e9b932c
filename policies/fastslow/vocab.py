"""Word-level vocabulary of instructions, built from a dataset's task strings.

Words are lower-cased runs of letters and digits. Index 0 pads, index 1 is every word
the vocabulary has not seen (UNK). Saved in the checkpoint as its word list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

PAD = "<pad>"
UNK = "<unk>"
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """'Put the RED cube!' -> ['put', 'the', 'red', 'cube']."""
    return _WORD.findall(text.lower())


class Vocabulary:
    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = list(tokens)
        if self.tokens[:2] != [PAD, UNK]:
            raise ValueError(f"a vocabulary starts with {PAD!r}, {UNK!r}; got {self.tokens[:2]}")
        self.index = {w: i for i, w in enumerate(self.tokens)}

    @classmethod
    def build(cls, texts: Iterable[str]) -> Vocabulary:
        """All words of `texts`, sorted, after PAD and UNK."""
        seen = sorted({w for t in texts for w in words(t)})
        return cls([PAD, UNK, *seen])

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, max_words: int) -> np.ndarray:
        """(max_words,) int64 token ids, padded with 0, unknown words -> 1."""
        ids = [self.index.get(w, 1) for w in words(text)][:max_words]
        out = np.zeros(max_words, dtype=np.int64)
        out[: len(ids)] = ids
        return out

    def encode_many(self, texts: Iterable[str], max_words: int) -> np.ndarray:
        return np.stack([self.encode(t, max_words) for t in texts])
