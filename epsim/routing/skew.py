"""SkewModel: per-layer expert popularity over time, from a skew spec.

One object serves both consumers: the simulator draws `[layers, experts]` loads per step,
the live bench draws `[tokens, top_k]` expert choices. Same spec and seed, same popularity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import TypeAdapter, ValidationError

from epsim.errors import SpecError
from epsim.routing.popularity import cap_shares, hotset_shares, uniform_shares, zipf_shares
from epsim.routing.sampling import (AliasTable, LoadRows, alias_table, cannot_clip,
                                    sample_load_rows, sample_loads, sample_loads_block,
                                    sample_topk)
from epsim.routing.trace import moe_layers, read_trace
from epsim.spec.errors import format_error
from epsim.spec.numbers import check_numbers
from epsim.spec.workload import SkewSpec, WorkloadSpec


class SkewModel:
    """Expert popularity `[layers, experts]` (shares of routed slots) as a function of time.

    Construction draws, from `seed`: per-layer noise (`layer_variation`), which experts are
    hot in each layer (`shuffle_per_layer`), and the drift process. Drift swaps the popularity
    of two experts of a layer at `drift_rate_per_s` per expert: the popularity *distribution*
    stays fixed while *which* experts are popular wanders, so a placement computed earlier
    grows stale at that rate.
    """

    def __init__(self, spec, num_layers: int, num_experts: int, top_k: int, seed: int = 0,
                 base_dir: str | Path = "."):
        self.spec = spec
        self.num_layers, self.num_experts, self.top_k = num_layers, num_experts, top_k
        rng = np.random.default_rng([seed, 0x5E3])
        self._trace: np.ndarray | None = None
        kind = spec.kind
        if kind == "trace":
            shares = trace_shares(Path(base_dir) / spec.path, spec.path, num_layers,
                                  num_experts, top_k)
            # one recorded pass (SGLang's --init-expert-location loads) is a fixed popularity:
            # drawn as the static skews are (pooled draws, alias tables), not pass by pass
            self._trace = shares if shares.shape[0] > 1 else None
            base = shares.mean(axis=0)
        else:
            if kind == "uniform":
                shares = uniform_shares(num_experts)
            elif kind == "zipf":
                shares = zipf_shares(num_experts, spec.alpha)
            elif kind == "hotset":
                shares = hotset_shares(num_experts, spec.num_hot, spec.hot_frac)
            else:  # pragma: no cover - the spec's discriminator admits no other kind
                raise SpecError(f"workload.skew.kind ({kind!r}) is not supported")
            base = np.tile(shares, (num_layers, 1))
            if spec.layer_variation > 0:
                base = base * rng.lognormal(0.0, spec.layer_variation, base.shape)
                base /= base.sum(axis=1, keepdims=True)
            if spec.shuffle_per_layer:
                base = np.take_along_axis(base, rng.permuted(
                    np.tile(np.arange(num_experts), (num_layers, 1)), axis=1), axis=1)
            base = cap_shares(base, top_k)
        self._base = base                                  # [layers, experts]
        # slots -> `cannot_clip`: drift permutes a layer's shares, which leaves the bound as is
        self._no_clip: dict[int, bool] = {}
        self._alias: AliasTable | None = None            # exact draws' table of `_base`, lazily
        self._drift_rng_seed = (seed, 0xD21F7)
        self._reset_drift()

    # -- drift -----------------------------------------------------------------------------
    def _reset_drift(self) -> None:
        self._drift_t_s = 0.0
        self._drift_rng = np.random.default_rng(list(self._drift_rng_seed))
        # popularity [0], its square root [1] (for the normal approximation in `loads`) and
        # where in `_base` each entry came from [2] (exact draws are drawn over `_base`),
        # permuted in place by the drift; callers get read-only views
        origin = np.broadcast_to(np.arange(self.num_experts, dtype=np.float64), self._base.shape)
        self._state = np.stack([self._base, np.sqrt(self._base), origin])  # [3, layers, experts]
        self._drifted = False
        self._pop_view = self._state[0].view()
        self._pop_view.flags.writeable = False

    def _advance(self, t_s: float) -> None:
        rate = getattr(self.spec, "drift_rate_per_s", 0.0)
        if rate <= 0 or t_s <= self._drift_t_s:
            if t_s < self._drift_t_s:
                self._reset_drift()
                self._advance(t_s)
            return
        # swaps in (t0, t]: each involves two experts, so E*rate/2 swaps per layer per second;
        # independent Poisson counts per layer = one Poisson total spread uniformly over layers
        dt = t_s - self._drift_t_s
        num_swaps = self._drift_rng.poisson(rate * self.num_experts / 2.0 * dt * self.num_layers)
        if num_swaps:
            # expert a anywhere (flat [layer, expert] index), expert b in the same layer
            flat_a = self._drift_rng.integers(0, self.num_layers * self.num_experts, num_swaps)
            flat_b = flat_a - flat_a % self.num_experts + self._drift_rng.integers(
                0, self.num_experts, num_swaps)
            _apply_swaps(self._state.reshape(3, -1), flat_a, flat_b)
            self._drifted = True
        self._drift_t_s = t_s

    # -- public ----------------------------------------------------------------------------
    @property
    def per_step(self) -> bool:
        """Popularity changes every forward pass (a trace of several passes): every step draws
        its loads anew."""
        return self._trace is not None

    def popularity(self, t_s: float = 0.0, step: int = 0) -> np.ndarray:
        """Shares of routed slots at simulated time `t_s` (trace: at forward pass `step`).

        Returns:
            [layers, experts] float64, rows sum to 1, entries <= 1/top_k.
        """
        if self._trace is not None:
            return self._trace[step % self._trace.shape[0]]
        self._advance(t_s)
        return self._pop_view

    def mean_popularity(self) -> np.ndarray:
        """[layers, experts] expected shares before any drift (a trace: its mean over passes)."""
        if self._trace is not None:
            return self._trace.mean(axis=0)
        return self.popularity(0.0).copy()

    def loads(self, num_tokens: int, rng: np.random.Generator, t_s: float = 0.0,
              step: int = 0) -> np.ndarray:
        """[layers, experts] float64 routed-token counts for a batch of `num_tokens` tokens."""
        shares = self.popularity(t_s, step)
        if self._trace is not None:
            return sample_loads(shares, num_tokens, self.top_k, rng)
        return sample_loads(shares, num_tokens, self.top_k, rng, spread=self._state[1],
                            exact=lambda slots, rng: self._exact_loads(1, slots, rng)[0])

    def loads_block(self, num_draws: int, num_tokens: int, rng: np.random.Generator,
                    t_s: float = 0.0, step: int = 0) -> np.ndarray:
        """[draws, layers, experts] `num_draws` independent loads of a batch of `num_tokens`
        tokens at simulated time `t_s` (trace: forward passes `step`, `step + 1`, ...), drawn
        at once (`sample_loads_block`; the fast engine)."""
        if self._trace is not None:
            steps = (step + np.arange(num_draws)) % self._trace.shape[0]
            return sample_loads_block(self._trace[steps], num_tokens, self.top_k, rng)
        self._advance(t_s)
        shape = (num_draws,) + self._base.shape
        return sample_loads_block(np.broadcast_to(self._state[0], shape), num_tokens, self.top_k,
                                  rng, spread=np.broadcast_to(self._state[1], shape),
                                  exact=lambda slots, rng: self._exact_loads(num_draws, slots, rng))

    def load_rows(self, num_draws: int, num_tokens: int, rng: np.random.Generator,
                  t_s: float = 0.0, step: int = 0) -> LoadRows:
        """`loads_block` with each draw formed when first read (`LoadRows`: the same random
        stream and the same bits; the fast engine's fresh loads for observers, which a pool
        that ends early never reads)."""
        if self._trace is not None:
            return LoadRows(num_draws, block=self.loads_block(num_draws, num_tokens, rng, t_s, step))
        self._advance(t_s)
        shares, spread = self._state[:2]
        num_slots = num_tokens * self.top_k
        lazy = self._no_clip.get(num_slots)
        if lazy is None:
            if len(self._no_clip) >= 256:
                self._no_clip.clear()
            lazy = self._no_clip[num_slots] = cannot_clip(shares, spread, num_slots)
        if lazy and getattr(self.spec, "drift_rate_per_s", 0.0) > 0:
            shares, spread = shares.copy(), spread.copy()     # drift swaps the state in place
        return sample_load_rows(num_draws, shares, spread, num_tokens, self.top_k, rng, lazy,
                                exact=lambda slots, rng: self._exact_loads(num_draws, slots, rng))

    def _exact_loads(self, num_draws: int, num_slots: int, rng: np.random.Generator) -> np.ndarray:
        """[draws, layers, experts] exact (multinomial) loads at the current popularity: drawn
        over `_base` with its alias table, then moved where the drift has taken each entry."""
        if self._alias is None:
            self._alias = alias_table(self._base)          # this process's, per popularity
        loads = self._alias.loads(num_draws, num_slots, rng)
        if not self._drifted:
            return loads
        origin = self._state[2].astype(np.int64)
        return np.take_along_axis(loads, np.broadcast_to(origin, loads.shape), axis=-1)

    def topk(self, num_tokens: int, rng: np.random.Generator, layer: int = 0, t_s: float = 0.0,
             step: int = 0) -> np.ndarray:
        """[tokens, top_k] int64 expert choices of `num_tokens` tokens in `layer`."""
        return sample_topk(self.popularity(t_s, step)[layer], num_tokens, self.top_k, rng)

    def descriptor(self) -> dict:
        """The skew as a plain dict (for measurement records and reports)."""
        return self.spec.model_dump()


# `trace_shares`' answers by file (its path, modification time and size) and model shape,
# this process's: a silicon worker's every simulation of a row reads the same recorded pass
_TRACE_SHARES: dict[tuple, np.ndarray] = {}
TRACE_SHARES_KEPT = 8


def trace_shares(path: Path, shown: str, num_layers: int, num_experts: int,
                 top_k: int) -> np.ndarray:
    """A trace's shares of routed slots per pass, capped at 1/top_k (`cap_shares`), over the
    model's MoE layers: a trace of fewer layers repeats cyclically. A file's are computed once
    per process while it is unchanged (read-only; a folder's, an SGLang dump, are read anew).

    Args:
        path: the trace file or folder (`read_trace`); shown: as the scenario names it.
    Returns:
        [passes, layers, experts] float64, rows sum to 1.
    Raises:
        SpecError: the trace's expert count is not the model's.
    """
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, num_layers, num_experts,
               top_k) if path.is_file() else None
    except OSError:
        key = None                                    # `read_trace` says what is wrong
    if key is not None and key in _TRACE_SHARES:
        return _TRACE_SHARES[key]
    trace = moe_layers(read_trace(path), num_layers)
    if trace.shape[1:] != (num_layers, num_experts):
        # a trace of fewer layers repeats cyclically; the expert count must match
        if trace.shape[2] != num_experts:
            raise SpecError(f"workload.skew.path ({shown!r}) has {trace.shape[2]} "
                            f"experts; the model has {num_experts}")
        reps = -(-num_layers // trace.shape[1])
        trace = np.tile(trace, (1, reps, 1))[:, :num_layers]
    totals = trace.sum(axis=2, keepdims=True)
    shares = cap_shares(np.where(totals > 0, trace / np.maximum(totals, 1e-300),
                                 1.0 / num_experts), top_k)
    shares.flags.writeable = False
    if key is not None:
        if len(_TRACE_SHARES) >= TRACE_SHARES_KEPT:
            _TRACE_SHARES.pop(next(iter(_TRACE_SHARES)))         # the oldest
        _TRACE_SHARES[key] = shares
    return shares


def _apply_swaps(rows: np.ndarray, flat_a: np.ndarray, flat_b: np.ndarray) -> None:
    """Swap entries `flat_a[i]` and `flat_b[i]` of every row of `rows` ([rows, n], in place),
    one swap after the other in order `i`.

    A swap that shares no entry with any other commutes with all of them, so those move at
    once; only swaps that share an entry compose in order, and they are few (a drift step
    draws hundreds of swaps over tens of thousands of entries). Their composition is found
    on entry indices (a permutation), then applied to every row in one gather: the same
    values end in the same places as swapping them one by one. Shared entries are counted
    with one `bincount` over the row (cheaper than sorting them, `np.unique`).
    """
    both = np.concatenate([flat_a, flat_b])
    counts = np.bincount(both, minlength=rows.shape[1])    # swaps touching each entry
    if counts.max(initial=0) < 2:                 # disjoint: order does not matter
        rows[:, flat_a], rows[:, flat_b] = rows[:, flat_b], rows[:, flat_a]
        return
    shared = counts[both] > 1                     # [2 * swaps] the entry is in another swap
    chained = shared[:flat_a.shape[0]] | shared[flat_a.shape[0]:]  # [swaps] share an entry
    free_a, free_b = flat_a[~chained], flat_b[~chained]
    rows[:, free_a], rows[:, free_b] = rows[:, free_b], rows[:, free_a]
    source: dict[int, int] = {}                   # entry -> entry whose value ends there
    for a, b in zip(flat_a[chained].tolist(), flat_b[chained].tolist()):
        source[a], source[b] = source.get(b, b), source.get(a, a)
    to = np.fromiter(source.keys(), dtype=np.int64, count=len(source))
    rows[:, to] = rows[:, np.fromiter(source.values(), dtype=np.int64, count=len(source))]


def skew_from_dict(data: dict | str, num_layers: int, num_experts: int, top_k: int,
                   seed: int = 0, base_dir: str | Path = ".") -> SkewModel:
    """Build a SkewModel from a descriptor dict (`{"kind": "zipf", "alpha": 1.2}`) or a
    short string (`uniform`, `zipf:1.2`, `hotset:8:0.5`)."""
    if isinstance(data, str):
        data = parse_skew(data)
    bad = check_numbers(data)
    if bad is not None:
        raise SpecError(f"skew: skew.{bad[0]} {bad[1]}")
    try:
        spec = TypeAdapter(SkewSpec).validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        err = {**err, "loc": ("skew",) + tuple(err["loc"])}
        raise SpecError(format_error(err, WorkloadSpec, "skew")) from None
    return SkewModel(spec, num_layers, num_experts, top_k, seed=seed, base_dir=base_dir)


def parse_skew(text: str) -> dict:
    """`uniform` | `zipf:ALPHA` | `hotset:NUM_HOT:HOT_FRAC` | `trace:PATH` -> descriptor dict."""
    kind, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    try:
        if kind == "uniform" and not args:
            return {"kind": "uniform"}
        if kind == "zipf" and len(args) == 1:
            return {"kind": "zipf", "alpha": float(args[0])}
        if kind == "hotset" and len(args) == 2:
            return {"kind": "hotset", "num_hot": int(args[0]), "hot_frac": float(args[1])}
        if kind == "trace" and rest:
            return {"kind": "trace", "path": rest}
    except ValueError:
        pass
    raise SpecError(f"skew ({text!r}) must be one of uniform, zipf:ALPHA, "
                    f"hotset:NUM_HOT:HOT_FRAC, trace:PATH")
