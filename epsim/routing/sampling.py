"""Sampling routed experts from popularity: token-level top-k choices and load matrices."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

# Below this many routed slots per expert, loads are drawn exactly (multinomial); above it a
# normal approximation with the same mean and covariance diagonal is used (3-7x cheaper: an
# exact [94, 128] draw costs 0.5-1.2 ms). benchmarks/results/exact_draws.md prices both kinds
# through the cost model in five shipped scenarios: from 8 slots per expert up, each step's MoE
# time agrees (mean within 0.1 %, p99 0.3 %, sd 15 %); below, they part (up to 11 % at one slot
# per expert), so exact draws stay there. At the former 32, exact draws made the plan sweep's
# points, which fill their batch from empty, 1.50x slower (same file).
EXACT_BELOW_SLOTS_PER_EXPERT = 8.0


def sample_topk(shares: np.ndarray, num_tokens: int, top_k: int, rng: np.random.Generator) -> np.ndarray:
    """Draw `top_k` distinct experts per token with inclusion probabilities `top_k * shares`.

    Systematic probability-proportional-to-size sampling over a fresh random expert order
    per token (Madow 1949): every expert's marginal inclusion probability is exact and the
    `top_k` picks of a token are distinct.

    Args:
        shares: [experts] float64, sums to 1, each <= 1/top_k.
    Returns:
        [tokens, top_k] int64 expert ids, each row sorted by draw order.
    """
    shares = np.asarray(shares, dtype=np.float64)
    num_experts = shares.shape[0]
    incl = shares * top_k                                                  # [experts]
    order = np.argsort(rng.random((num_tokens, num_experts)), axis=1)      # [tokens, experts]
    cum = np.cumsum(incl[order], axis=1)                                   # [tokens, experts]
    cum[:, -1] = top_k                                                     # exact end point
    points = rng.random((num_tokens, 1)) + np.arange(top_k)[None, :]       # [tokens, top_k]
    pos = (cum[:, :, None] <= points[:, None, :]).sum(axis=1)              # [tokens, top_k]
    pos = np.minimum(pos, num_experts - 1)
    return np.take_along_axis(order, pos, axis=1).astype(np.int64)


def sample_loads(shares: np.ndarray, num_tokens: int, top_k: int, rng: np.random.Generator,
                 spread: np.ndarray | None = None, normal=None, exact=None) -> np.ndarray:
    """Tokens routed to each expert when `num_tokens` tokens each pick `top_k` experts.

    Multinomial over the `n = num_tokens * top_k` slots: exact below
    `EXACT_BELOW_SLOTS_PER_EXPERT` slots per expert; above, the normal approximation with the
    multinomial's mean `n q` and covariance `n (diag(q) - q q^T)`, drawn as
    `y = sqrt(n q) z`, `x = n q + y - q sum(y)` with independent standard normals z (the
    subtraction gives each expert variance `n q (1 - q)` and every row the exact total).

    Args:
        shares: [layers, experts] float64, rows sum to 1.
        spread: optional [layers, experts] `sqrt(shares)`, precomputed by a caller that
            samples the same shares many times (the simulator's step loop).
        normal: `f(rng, shape)` giving standard normals; None: the generator's own
            (`sample_loads_block` passes `table_normal`). Leading dimensions of `shares` are
            sampled alike.
        exact: `f(num_slots, rng)` giving the exact branch's draws at `shares` (the same
            multinomial, shaped like `shares`) where the caller holds a faster sampler of
            them (`AliasTable`); None: `exact_loads`.
    Returns:
        [layers, experts] float64 loads (whole numbers when exact), rows summing to
        `num_tokens * top_k` up to rounding.
    """
    shares = np.asarray(shares, dtype=np.float64)
    num_slots = num_tokens * top_k
    if num_slots == 0:
        return np.zeros_like(shares)
    if num_slots / shares.shape[-1] < EXACT_BELOW_SLOTS_PER_EXPERT:
        return exact_loads(shares, num_slots, rng) if exact is None else exact(num_slots, rng)
    return normal_loads(shares, num_slots, rng, spread, normal)


def exact_loads(shares: np.ndarray, num_slots: int, rng: np.random.Generator) -> np.ndarray:
    """`sample_loads`' exact branch: [..., experts] float64 multinomial counts of `num_slots`
    slots over each row of `shares`."""
    return rng.multinomial(num_slots, shares).astype(np.float64)


# Below this many slots per expert, `AliasTable` draws slot by slot; from it up to
# `EXACT_BELOW_SLOTS_PER_EXPERT`, `rng.multinomial` is (benchmarks/results/alias_draws.md: the
# alias table is 4.3-4.8x faster at 0.25 slots per expert, 2.35x at 2, 1.1x at 6, slower at 7.9).
ALIAS_BELOW_SLOTS_PER_EXPERT = 4.0
KEEP_DRAW_TABLES = 16    # `AliasTable._draw_tables` kept for up to this many draws at once


class AliasTable:
    """Exact multinomial draws over fixed shares, slot by slot: Walker's alias method (Vose's
    construction), built once per popularity.

    `rng.multinomial` over [..., experts] draws one binomial per expert and row, each with its
    own set-up (a log and an exp): ~40 ns an expert however few the slots, 2-5 ms a pool's
    [4, 58, 256] draw, up to half the time of a silicon row that draws them. The alias table
    draws each of the n slots alone from one uniform (its integer part a column, its fraction
    the column's cut) and counts them: O(n) per row, the same multinomial (slots independent,
    each expert with probability its share) up to float64 rounding of the cuts. From
    `ALIAS_BELOW_SLOTS_PER_EXPERT` up, where n slots cost more than the experts, `loads` draws
    with `rng.multinomial`.

    Args:
        shares: [layers, experts] float64, rows sum to 1.
    """

    def __init__(self, shares: np.ndarray):
        shares = np.asarray(shares, dtype=np.float64)
        layers, experts = shares.shape
        cut = np.ones((layers, experts))
        alias = np.tile(np.arange(experts, dtype=np.int64), (layers, 1))
        for layer, row in enumerate(shares / shares.sum(axis=1, keepdims=True) * experts):
            scaled = row.tolist()
            small = [i for i, v in enumerate(scaled) if v < 1.0]
            large = [i for i, v in enumerate(scaled) if v >= 1.0]
            while small and large:
                s, g = small.pop(), large.pop()
                cut[layer, s], alias[layer, s] = scaled[s], g
                scaled[g] = (scaled[g] + scaled[s]) - 1.0      # Vose: the stabler order
                (small if scaled[g] < 1.0 else large).append(g)
            # what is left holds ~1 (rounding): its column keeps itself (cut 1)
        self.shape, self.shares = (layers, experts), shares
        self._cut = cut.ravel()                                    # [layers * experts]
        self._other = (alias + experts * np.arange(layers)[:, None]).ravel()
        for table in (self._cut, self._other):
            table.flags.writeable = False          # shared by `alias_table`'s callers
        self._by_draws: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def loads(self, num_draws: int, num_slots: int, rng: np.random.Generator) -> np.ndarray:
        """[num_draws, layers, experts] float64 independent multinomial counts of `num_slots`
        slots over each layer's shares."""
        if num_slots >= ALIAS_BELOW_SLOTS_PER_EXPERT * self.shape[1]:
            return exact_loads(np.broadcast_to(self.shares, (num_draws,) + self.shape), num_slots,
                               rng)
        return self.slot_loads(num_draws, num_slots, rng)

    def slot_loads(self, num_draws: int, num_slots: int, rng: np.random.Generator) -> np.ndarray:
        """`loads` drawn slot by slot at any `num_slots` (the alias method alone).

        Each slot's uniform u, times the experts, is its column (the integer part) and where in
        the column it fell (the fraction); it stays in its column below the column's cut, else
        goes to the column's alias. The draws' columns are numbered apart (`_draw_tables`), so
        one count over every slot's expert gives every draw's loads (integer counts)."""
        layers, experts = self.shape
        cut, pick, offsets = self._draw_tables(num_draws)
        u = rng.random((num_draws, layers, num_slots))
        u *= experts
        column = u.astype(np.int64)                        # floor: u >= 0
        if experts & (experts - 1):
            # u * experts may round up to experts (never where experts is a power of two: the
            # product is exact and below it)
            np.minimum(column, experts - 1, out=column)
        u -= column                                        # the fraction: where in the column
        column += offsets                                  # [draws * layers * experts]
        leave = u >= np.take(cut, column)                  # past the cut: to the alias
        # the expert as one gather, `pick[2 c + leave]` (a select by `np.where` over random
        # masks cost a quarter of the draw)
        column += column
        column += leave
        expert = np.take(pick, column)
        loads = np.bincount(expert.ravel(), minlength=cut.size).astype(np.float64)
        return loads.reshape((num_draws, layers, experts))

    def _draw_tables(self, num_draws: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`slot_loads`' tables for `num_draws` draws at once, a cell `draw * layers * experts
        + layer * experts + expert` (kept per `num_draws` up to `KEEP_DRAW_TABLES`):

        - cut: [draws * layers * experts] float64, the column's cut;
        - pick: [2 * draws * layers * experts] int64, the slot's cell by `2 * column + leave`:
          the column itself (even entries), its alias (odd entries);
        - offsets: [draws, layers, 1] int64, the first cell of each draw's layer.
        """
        tables = self._by_draws.get(num_draws)
        if tables is not None:
            return tables
        layers, experts = self.shape
        cells = layers * experts
        first = cells * np.arange(num_draws, dtype=np.int64)[:, None]           # [draws, 1]
        pick = np.empty(2 * num_draws * cells, dtype=np.int64)
        pick[0::2] = np.arange(num_draws * cells, dtype=np.int64)
        pick[1::2] = (self._other[None, :] + first).ravel()
        offsets = (experts * np.arange(layers, dtype=np.int64)[None, :] + first)[:, :, None]
        tables = (np.tile(self._cut, num_draws), pick, offsets)
        for table in tables:
            table.flags.writeable = False
        if num_draws <= KEEP_DRAW_TABLES:
            self._by_draws[num_draws] = tables
        return tables


# `alias_table`'s tables by their shares, this process's (a silicon worker builds one per
# simulation: a row's rounds and candidates, and the worker's other rows, share few popularities)
_ALIAS_TABLES: dict[tuple, AliasTable] = {}
ALIAS_TABLES_KEPT = 16


def alias_table(shares: np.ndarray) -> AliasTable:
    """`AliasTable(shares)`, built once per distinct `shares` (their shape and bytes) in this
    process: its construction is a Python loop over every layer's experts (~30 ms at
    [58, 256]; a twentieth of an ambiguous P/D row of short simulations), and the table depends
    on the shares alone, so a kept one draws the same bits. Its arrays are read-only.

    Args:
        shares: [layers, experts] float64, rows sum to 1.
    """
    shares = np.ascontiguousarray(shares, dtype=np.float64)
    key = (shares.shape, shares.tobytes())
    table = _ALIAS_TABLES.get(key)
    if table is None:
        if len(_ALIAS_TABLES) >= ALIAS_TABLES_KEPT:
            _ALIAS_TABLES.pop(next(iter(_ALIAS_TABLES)))          # the oldest
        kept = shares.copy()
        kept.flags.writeable = False
        table = _ALIAS_TABLES[key] = AliasTable(kept)
    return table


def normal_loads(shares: np.ndarray, num_slots: int, rng: np.random.Generator,
                 spread: np.ndarray | None = None, normal=None) -> np.ndarray:
    """`sample_loads`' normal approximation (its docstring) at any `num_slots` > 0:
    [..., experts] float64 loads, rows summing to `num_slots` up to rounding."""
    if spread is None:
        spread = np.sqrt(shares)
    z = rng.standard_normal(shares.shape) if normal is None else normal(rng, shares.shape)
    loads = _shifted(z, shares, spread, num_slots)
    if loads.min() < 0.0:
        # clipping a (rare) negative draw breaks the exact total: rescale to conserve slots
        np.maximum(loads, 0.0, out=loads)
        loads /= loads.sum(axis=-1, keepdims=True)
    loads *= num_slots
    return loads


def _shifted(z: np.ndarray, shares: np.ndarray, spread: np.ndarray, num_slots: int) -> np.ndarray:
    """q + (sqrt(q) z - q sum(sqrt(q) z)) / sqrt(n), built in place: the normal approximation's
    shares before clipping (`sample_loads`)."""
    loads = z * spread
    loads -= shares * loads.sum(axis=-1, keepdims=True)
    loads *= 1.0 / np.sqrt(num_slots)
    loads += shares
    return loads


def loads_from_topk(topk_idx: np.ndarray, num_experts: int) -> np.ndarray:
    """[tokens, top_k] expert ids -> [experts] int64 token counts (`-1` entries ignored)."""
    flat = np.asarray(topk_idx).reshape(-1)
    return np.bincount(flat[flat >= 0], minlength=num_experts).astype(np.int64)


# The block sampler's normals: 2**16 equiprobable levels of the inverse normal CDF (the midpoint
# quantile of each level), scaled to unit variance. One uint16 of raw generator output picks a
# level, ~4x cheaper than the ziggurat; tails beyond 4.3 sd (probability 1.5e-5) are cut, far
# below what the multinomial-normal approximation itself neglects.
NORMAL_LEVELS = 1 << 16


@lru_cache(maxsize=1)
def _normal_levels() -> np.ndarray:
    from scipy.special import ndtri     # only normal draws need scipy: +50 % on `import epsim.sim`
    z = ndtri((np.arange(NORMAL_LEVELS) + 0.5) / NORMAL_LEVELS)
    z /= np.sqrt(np.mean(z * z))                        # unit variance exactly (mean 0 by symmetry)
    out = z.astype(np.float32)
    out.flags.writeable = False
    return out


def table_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normals of `shape` (float32) from the 2**16-level quantile table."""
    return _levels_of(_table_raw(rng, int(np.prod(shape)))).reshape(shape)


def _table_raw(rng: np.random.Generator, num: int) -> np.ndarray:
    """[num] uint16 table levels: the generator's output `table_normal` reads."""
    return rng.bit_generator.random_raw((num + 3) // 4).view(np.uint16)[:num]


def _levels_of(raw: np.ndarray) -> np.ndarray:
    """The quantile table's normals (float32) at levels `raw`."""
    levels = _normal_levels()
    # the gather below reads the 256 KB table at random: once other work has pushed it out of
    # the cache, every read waits on memory. One sequential pass (any reduction) pulls it back
    # at streaming speed first (the same values)
    levels.view(np.uint64).max()
    return np.take(levels, raw)


def sample_loads_block(shares: np.ndarray, num_tokens: int, top_k: int, rng: np.random.Generator,
                       spread: np.ndarray | None = None, exact=None) -> np.ndarray:
    """`sample_loads` for many steps in one vectorised draw (the fast engine).

    Same distribution as `sample_loads`: exact multinomial below `EXACT_BELOW_SLOTS_PER_EXPERT`
    slots per expert, else the normal approximation, here with `table_normal` deviates.

    Args:
        shares: [steps, layers, experts] float64, each row sums to 1 (a step's popularity).
        spread: optional `sqrt(shares)`.
        exact: as `sample_loads`'.
    Returns:
        [steps, layers, experts] float64 loads, rows summing to `num_tokens * top_k`.
    """
    return sample_loads(shares, num_tokens, top_k, rng, spread, normal=table_normal, exact=exact)


class LoadRows:
    """`num` draws of `sample_loads_block` at one popularity, each formed when first asked for
    (`row`): the generator's output is taken at once, exactly as the block takes it, so the
    stream and every row's bits are the block's, and rows never asked for (a pool that ends
    early) cost only their raw output.

    A block rescales every draw once any entry of any draw would go negative (`sample_loads`),
    so rows are formed alone only where no entry can (`cannot_clip`); elsewhere, and for exact
    multinomial draws, `block` holds the whole block drawn at once.
    """

    def __init__(self, num: int, block: np.ndarray | None = None, raw: np.ndarray | None = None,
                 shares: np.ndarray | None = None, spread: np.ndarray | None = None,
                 num_slots: int = 0):
        """block: [num, layers, experts] drawn loads; or raw: [num * layers * experts] uint16
        table levels (`table_normal`'s) with the draws' shares and spread [layers, experts]."""
        self.num, self._block, self._raw = num, block, raw
        self._shares, self._spread, self._num_slots = shares, spread, num_slots

    def row(self, i: int) -> np.ndarray:
        """[layers, experts] float64 loads of draw `i` (< num)."""
        return self.rows(i, i + 1)[0]

    def rows(self, start: int, stop: int) -> np.ndarray:
        """[stop - start, layers, experts] float64 loads of draws `start` .. `stop - 1`, formed
        at once (the bits of forming them one by one: the same arithmetic per entry)."""
        if self._block is not None:
            return self._block[start:stop]
        size = self._shares.size
        z = _levels_of(self._raw[start * size:stop * size]).reshape(
            (stop - start,) + self._shares.shape)
        loads = _shifted(z, self._shares, self._spread, self._num_slots)
        loads *= self._num_slots
        return loads


def sample_load_rows(num: int, shares: np.ndarray, spread: np.ndarray, num_tokens: int,
                     top_k: int, rng: np.random.Generator, lazy: bool, exact=None) -> LoadRows:
    """`sample_loads_block` of `num` draws at `shares` ([layers, experts], `spread` their square
    roots; `exact` as `sample_loads`'), as `LoadRows`: formed on demand if `lazy` (the caller
    checked `cannot_clip` and keeps `shares` and `spread` unchanged), else drawn at once."""
    if lazy:
        return LoadRows(num, raw=_table_raw(rng, num * shares.size), shares=shares,
                        spread=spread, num_slots=num_tokens * top_k)
    shape = (num,) + shares.shape
    return LoadRows(num, block=sample_loads_block(np.broadcast_to(shares, shape), num_tokens,
                                                  top_k, rng, np.broadcast_to(spread, shape),
                                                  exact))


def cannot_clip(shares: np.ndarray, spread: np.ndarray, num_slots: int) -> bool:
    """No draw of `sample_loads_block` at `shares` ([layers, experts], `spread` their square
    roots) and `num_slots` can have a negative entry: every normal of the table lies within
    its extreme levels +-z_max, so an entry is at least q - (sqrt(q) + q sum(sqrt(q))) z_max /
    sqrt(n); kept clear of 0 by far more than rounding can move it."""
    if num_slots <= 0 or num_slots / shares.shape[-1] < EXACT_BELOW_SLOTS_PER_EXPERT:
        return False
    z_max = float(_normal_levels()[-1])
    low = shares - (spread + shares * spread.sum(axis=-1, keepdims=True)) * (
        z_max / np.sqrt(num_slots))
    return bool(low.min() > 1e-9 * shares.max())
