"""py3langid's classifier over a whole batch at once, with numpy.

py3langid classifies one text at a time: a byte-by-byte walk of its tokenizer's automaton in
Python, then a small matrix product per text. Here the walk runs in lockstep over every text of a
batch (one numpy step per byte position, for all texts at once) and the naive-Bayes scores of the
whole batch come from one gather, one multiply and one segmented sum. The answers are the
package's own: where the batched sums leave two languages within float rounding of each other, the
text is classified again by the package itself, so that summation order never changes an answer.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from py3langid.langid import RAW_FLOOR, LanguageIdentifier, _get_identifier

# Two scores closer than this (relative) may be ordered differently by the package's summation
# order than by ours: such a text is decided by the package itself.
_TIE = 1e-4


class BatchIdentifier:
    """classify(texts) == [py3langid.classify(t)[0] for t in texts], faster for batches."""

    def __init__(self, identifier: LanguageIdentifier | None = None) -> None:
        ident = identifier if identifier is not None else _get_identifier()
        if ident._norm_probs or ident.min_confidence is not None:
            raise ValueError("BatchIdentifier reproduces the default (unnormalised) classifier only")
        self._ident = ident
        # The automaton with each state named by its row's offset, and each transition's feature
        # beside it: one step is then two gathers (next row, its feature) for every text at once.
        nextmove = np.asarray(ident.tk_nextmove, dtype=np.int64)
        rowbase = np.asarray(ident._rowbase, dtype=np.int64)
        output = np.asarray(ident.tk_output, dtype=np.int64)
        self._next_row = rowbase[nextmove].astype(np.int32)
        self._next_feature = output[nextmove].astype(np.int32)
        self._start_row = int(rowbase[0])
        # float32 once (the package keeps float16, which numpy converts on every product): 57 MB.
        self._table = np.asarray(ident.nb_ptc, dtype=np.float32)
        self._prior = np.asarray(ident.nb_pc, dtype=np.float32)
        self._features = int(self._table.shape[0])
        self._classes = list(ident.nb_classes)

    def classify(self, texts: Sequence[str | bytes]) -> list[str]:
        if not texts:
            return []
        encoded = [self._ident._encode(t) for t in texts]
        scores = self._scores(encoded)
        for i, j in self._ident._alias_pairs:  # as the package folds script aliases (srl -> sr)
            scores[:, i] = np.maximum(scores[:, i], scores[:, j])
            scores[:, j] = RAW_FLOOR
        best = scores.argmax(axis=1)
        top2 = np.partition(scores, -2, axis=1)[:, -2:]
        close = (top2[:, 1] - top2[:, 0]) <= _TIE * (np.abs(top2[:, 1]) + 1.0)
        labels = [self._classes[i] for i in best.tolist()]
        for k in np.flatnonzero(close).tolist():
            labels[k] = self._ident.classify(texts[k])[0]
        return labels

    def _scores(self, encoded: list[bytes]) -> np.ndarray:
        n = len(encoded)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        # Longest first, so the texts still being walked at step t are a prefix.
        order = np.argsort(-lengths, kind="stable")
        lengths = lengths[order]
        longest = int(lengths[0])
        scores = np.full((n, len(self._classes)), RAW_FLOOR, dtype=np.float32)
        if longest == 0:
            return scores
        joined = np.frombuffer(b"".join(encoded[i] for i in order.tolist()), dtype=np.uint8)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        # Byte t of every text in row t: each step reads one contiguous row.
        letters = np.zeros((longest, n), dtype=np.int32)
        letters[np.arange(joined.size) - np.repeat(starts, lengths), np.repeat(np.arange(n), lengths)] = joined
        walking = np.searchsorted(-lengths, -np.arange(longest), side="left").tolist()  # texts longer than t
        row = np.full(n, self._start_row, dtype=np.int32)
        at = np.empty(n, dtype=np.int32)
        # Each step's features, -1 where none (and past a text's end): three numpy calls a step,
        # into preallocated arrays, and the hits found once at the end.
        features = np.full((longest, n), -1, dtype=np.int32)
        add, next_row, next_feature = np.add, self._next_row.take, self._next_feature.take
        k_now, row_k, at_k = -1, row, at
        for t, k in enumerate(walking):
            if k != k_now:  # the walking texts change only where one ends: views made once each
                k_now, row_k, at_k = k, row[:k], at[:k]
            add(row_k, letters[t, :k], out=at_k)
            next_row(at_k, out=row_k)
            next_feature(at_k, out=features[t, :k])
        steps, rows = np.nonzero(features >= 0)
        if rows.size == 0:
            return scores
        keys = rows.astype(np.int64) * self._features + features[steps, rows]
        keys, counts = np.unique(keys, return_counts=True)
        row_of = keys // self._features
        contributions = np.log1p(counts.astype(np.float32))[:, None] * self._table[keys % self._features]
        first = np.flatnonzero(np.concatenate(([True], row_of[1:] != row_of[:-1])))
        sorted_rows = row_of[first]
        scores[order[sorted_rows]] = np.add.reduceat(contributions, first, axis=0) + self._prior
        return scores
