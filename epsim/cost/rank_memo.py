"""Per-rank terms remembered by the rank's own counts, not by the whole batch's.

A decode batch of hundreds of requests per rank changes shape at nearly every step: a request
ends on one rank, the next one joins another. Terms remembered per batch shape (the
projections, a step's token terms) then miss at every step, although each rank's counts take
only a few values. Two ways to hit anyway, both the same bits as pricing the batch alone:

- `RankMemo`: a term elementwise over ranks (`[dp]` from `[dp]` counts, each rank's value a
  function of its own counts alone) remembered per rank value: a batch's vector is looked up
  rank by rank, the ranks not seen before priced together in one call on their counts.
- `order_free_key`: a term that is a maximum over ranks of elementwise terms does not depend on
  which rank holds which counts, so its memo key can list the ranks' counts in sorted order.

Both need the term to be elementwise over ranks, which numpy's arithmetic keeps bit for bit
(the same IEEE operations on each element, whatever the array's length):
tests/epsim/cost/test_rank_memo.py holds them to the batch-wide call on real scenarios.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

MAX_VALUES = 1 << 16      # remembered per-rank values, at most (then forgotten all at once)


class RankMemo:
    """`memo(*counts)` -> `[dp]` `fn(*counts)`, each rank's value remembered by its counts.

    Args:
        fn: `fn(*counts)` -> `[n]` float64 from `n`-long count arrays, elementwise (rank i's
            value depends on `counts[j][i]` alone).
    """

    def __init__(self, fn: Callable[..., np.ndarray]):
        self._fn = fn
        self._values: dict[tuple[float, ...], float] = {}
        self.num_priced = 0         # ranks priced by `fn` (the rest were looked up)

    def __call__(self, *counts: np.ndarray) -> np.ndarray:
        keys = list(zip(*(c.tolist() for c in counts)))
        values = self._values
        out = [values.get(k) for k in keys]
        if None in out:
            missing = sorted({k for k, v in zip(keys, out) if v is None})
            priced = np.asarray(self._fn(*(np.array(col, dtype=np.float64)
                                           for col in zip(*missing))), dtype=np.float64)
            new = dict(zip(missing, priced.tolist()))
            out = [new[k] if v is None else v for k, v in zip(keys, out)]
            if len(values) + len(new) > MAX_VALUES:
                values.clear()
            values.update(new)
            self.num_priced += len(missing)
        return np.array(out, dtype=np.float64)


def order_free_key(*counts: np.ndarray) -> bytes:
    """A key of `[dp]` counts that forgets which rank holds which (ranks sorted by their
    counts, the first array first): for memos of terms that are maxima over ranks of
    elementwise terms."""
    order = np.lexsort(counts[::-1])
    return b"".join(c[order].tobytes() for c in counts)
