"""Decode attention priced ahead: the steps a steady decode batch will run, in one call.

A decode batch whose requests all decode, none joining or leaving, keeps its counts per rank
from step to step while each rank's contexts grow by its decode tokens (one token per request
per step): step i after a step of contexts `c` reads `c + i * decode_tokens`. The slowest
rank's attention of those steps is elementwise in the contexts, so it can be priced for many
steps at once (`CostModel._decode_attention`, split-KV launches included:
`epsim.cost.flash.decode_work`) and served as the steps come: each row the bits of pricing
that step alone (tests/epsim/cost/test_attention_ahead.py). A step whose contexts are not on
the table (the batch changed) prices a new table; how far ahead follows how many steps the
last table served, so a batch that changes every step prices each step alone, as before; a new
shape's first table likewise follows what the last new shape's served (`first_ahead`): a
closed loop whose shapes change every few steps (a request joins or leaves) would otherwise
price `FIRST_AHEAD` steps for each and serve one or two of them.

Decode steps the engine does not leap (`epsim.sim.leap`: a leap needs at least two steps
before the next completion or admission, and nothing watching the steps) are priced here; the
closed loops of `epsim validate --silicon` spent most of their time on this term when they
stepped one decode step at a time.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from epsim.cost.attention import BatchCounts

MAX_AHEAD = 256          # steps priced at once, at most
FIRST_AHEAD = 16         # steps priced at once by a new batch shape's first table
MAX_SHAPES = 4           # batch shapes remembered (a step may price two: TBO's half and whole)


class _Table:
    """Steps of one batch shape priced ahead: `start` [dp] contexts of the first, `stride`
    [dp] decode tokens, `values` [n] the slowest rank's attention (µs)."""

    def __init__(self, start: np.ndarray, stride: np.ndarray, values: np.ndarray):
        self.start, self.stride, self.values = start, stride, values
        self.used = 0                    # rows served so far
        self.lead = int(np.argmax(stride > 0))   # a rank whose contexts grow: finds the row

    def row(self, context: np.ndarray) -> int | None:
        """The row of a step of contexts `context` ([dp]), or None: not on the table."""
        delta = float(context[self.lead] - self.start[self.lead])
        step = delta / float(self.stride[self.lead])
        i = int(step)
        if i != step or not 0 <= i < self.values.shape[0]:
            return None
        if not np.array_equal(context, self.start + i * self.stride):
            return None
        return i


class AttentionAhead:
    """`price(batch)`: the slowest rank's decode attention of a step (µs), from a table priced
    ahead where the batch's steady steps are on one (module doc).

    Args:
        steps: `steps(batch, contexts)` [k] the attention of k steps of `batch` whose
            `decode_context` are `contexts` [k, dp], each the bits of pricing it alone.
    """

    def __init__(self, steps: Callable[[BatchCounts, np.ndarray], np.ndarray]):
        self._steps = steps
        self._tables: dict[bytes, _Table] = {}
        self._newest: _Table | None = None        # the last new shape's first table
        self.num_tables = 0

    def first_ahead(self) -> int:
        """Steps a new shape's first table prices: `FIRST_AHEAD`, or twice what the last new
        shape's first table served where that was less (shapes that change every few steps:
        the rows past them are priced for nothing; every row the bits of pricing it alone,
        so only the work changes)."""
        if self._newest is None:
            return FIRST_AHEAD
        return max(1, min(FIRST_AHEAD, 2 * self._newest.used))

    def price(self, batch: BatchCounts) -> float:
        context, stride = batch.decode_context, batch.decode_tokens
        if not stride.any():                       # no contexts grow: nothing to price ahead
            return float(self._steps(batch, context[None])[0])
        key = batch.tokens.tobytes() + stride.tobytes()
        table = self._tables.get(key)
        if table is not None:
            i = table.row(context)
            if i is not None:
                table.used = max(table.used, i + 1)
                return float(table.values[i])
        # as far ahead as the shape's last table served, twice
        ahead = self.first_ahead() if table is None else min(MAX_AHEAD, 2 * table.used)
        contexts = context + np.arange(ahead, dtype=np.float64)[:, None] * stride    # [k, dp]
        values = self._steps(batch, contexts)
        if len(self._tables) >= MAX_SHAPES and key not in self._tables:
            self._tables.clear()
        new = _Table(np.array(context, dtype=np.float64), stride.copy(), values)
        if table is None:
            self._newest = new
        table = self._tables[key] = new
        table.used = 1
        self.num_tables += 1
        return float(values[0])
