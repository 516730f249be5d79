"""How the engine prices a step: draw its `[layers, experts]` loads, then `CostModel.step`.

Two interchangeable engines (`ENGINES`), chosen per run (`simulate(..., engine=...)`):

- `reference`: one draw (`SkewModel.loads`) and one `CostModel.step` per step — the original
  engine, kept as the yardstick the fast one is tested against (tests/epsim/sim/test_fast.py).
- `fast` (default): a pool of M independent draws of the MoE layers (loads `[M, layers,
  experts]` in one vectorised draw with quantile-table normals, `SkewModel.loads_block`,
  priced in one `CostModel.moe` call) serves the steps of one batch shape — tokens per rank,
  phase, CUDA graph or not, placement version — each step taking one draw at random; each step
  still adds its own attention, dense layers and overhead from its own batch. A pool serves at
  most `USES_PER_DRAW` steps per draw, and is redrawn when the shape or placement changes or,
  under popularity drift, once `DRIFT_STALE_FRAC` of the experts may have swapped since it was
  drawn (the drift window). M covers the steps a pool is expected to serve (1 when shapes
  change every step, as in the reference). Each step's MoE cost is thus a correct draw of its
  distribution (marginals exact), but steps that share a pool are not independent, and the
  popularity they see lags by at most the drift window. Step observers that sum loads (EPLB's
  statistics window, `add_observer(..., fresh_loads=True)`) get a fresh draw of each step's
  loads (drawn `FRESH_BLOCK` steps at a time, within the pool's drift window, each formed when
  first read: `SkewModel.load_rows`), so sums over steps keep the reference's noise; passive
  observers change nothing.
  Under `Simulation(coarse_pools=True)` (the silicon scoreboard's closed loops) a pool also
  serves a step of a nearby shape: the same phase, CUDA graph and placement, its EP ranks'
  dispatched tokens within `COARSE_TOKENS_FRAC` of the pool's, in all and on the busiest rank
  (a batch of hundreds of requests changes shape at nearly every step, a request ending on one
  rank, another joining on the next; each new shape then drew and priced its own MoE layers,
  most of a run's time). Such a step's MoE layers are priced at a batch up to that share larger
  or smaller, with the pool's draws: TPOT and TTFT move a little (each silicon row's change
  against exact pools: benchmarks/results/silicon_speed.md). Not where observers read fresh
  loads (EPLB's statistics window sums them at the pool's own tokens).
  Same seed, same result; a different random stream from the reference engine, so the two
  agree statistically, not bit for bit (tolerances: tests/epsim/sim/test_fast.py).
"""

from __future__ import annotations

import os

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.cost.graph_padding import pad_rows, padded_loads
from epsim.cost.model import CostModel
from epsim.cost.moe import MoECost
from epsim.cost.step import StepCost
from epsim.cost.tables import PlacementTables
from epsim.cost.traffic import traffic_at
from epsim.routing.sampling import LoadRows
from epsim.routing.skew import SkewModel

ENGINES = ("fast", "reference")
DEFAULT_ENGINE = "fast"
ENGINE_VARIABLE = "EPSIM_ENGINE"     # overrides the default (benchmarks run sweeps on both)
MAX_DRAWS = 4            # draws per pool (M)
USES_PER_DRAW = 8        # steps a pool serves per draw it holds, at most
DRIFT_STALE_FRAC = 0.05  # redraw once this share of experts may have swapped (drift)
COARSE_TOKENS_FRAC = 0.02    # a pool serves batches whose dispatched tokens, in all and on the
                             # busiest rank, are within this share of its own (module doc)
FRESH_BLOCK = 8          # observers' fresh loads drawn this many steps at a time


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine ({engine!r}) must be one of {list(ENGINES)}")
    return engine


class ReferenceStepper:
    """One draw and one full `CostModel.step` per step.

    Args:
        sim: the run it prices (`epsim.sim.engine.Simulation`; untyped here, since the engine
            imports this module): its skew model, routing generator, cost model and placement.
    """

    def __init__(self, sim):
        self.sim = sim

    def price(self, batch: BatchCounts, now_s: float, step: int) -> tuple[np.ndarray, StepCost]:
        """This step's loads `[layers, experts]` and cost."""
        sim = self.sim
        loads = sim.skew.loads(batch.routed_tokens, sim.routing_rng,
                               t_s=now_s, step=step)
        pad = pad_rows(sim.cost_model, batch)
        if pad:          # the CUDA graph's padded rows the MoE runs (epsim.cost.graph_padding)
            loads = padded_loads(loads, sim.skew.loads(1, sim.routing_rng, t_s=now_s, step=step),
                                 pad)
        return loads, sim.cost_model.step(batch, loads, sim.placement.tables)


def moe_draws(cost_model: CostModel, skew: SkewModel, rng: np.random.Generator,
              tables: PlacementTables, batch: BatchCounts, num_draws: int, t_s: float = 0.0,
              step: int = 0) -> tuple[np.ndarray, list[MoECost]]:
    """`num_draws` independent draws of a batch's MoE layers, drawn and priced at once.

    Returns:
        (loads [draws, layers, experts], one `MoECost` per draw with `[layers]` arrays), each
        draw ready for `cost_model.step(batch, None, tables, moe=...)`.
    """
    loads = skew.loads_block(num_draws, batch.routed_tokens, rng, t_s, step)
    pad = pad_rows(cost_model, batch)
    if pad:              # the CUDA graph's padded rows the MoE runs (epsim.cost.graph_padding)
        loads = padded_loads(loads, skew.loads_block(num_draws, 1, rng, t_s, step), pad)
    return loads, price_draws(cost_model, tables, batch, loads)


def price_draws(cost_model: CostModel, tables: PlacementTables, batch: BatchCounts,
                loads: np.ndarray) -> list[MoECost]:
    """One `MoECost` per draw of `loads` ([draws, layers, experts]) at `batch`'s shape, all
    priced in one `CostModel.moe` call (`moe_draws`)."""
    tokens, fraction = cost_model.ep_tokens(batch), cost_model.micro_batch_fraction
    graph = cost_model.uses_graph(batch)
    if loads.shape[0] == 1:      # most pools of an unsaturated run: no draws axis to split
        return [cost_model.moe(loads[0], tokens, tables, batch.phase, fraction, graph)]
    m = cost_model.moe(loads, tokens, tables, batch.phase, fraction, graph)
    return [MoECost(m.dispatch_us[i], m.experts_us[i], m.combine_us[i], traffic_at(m.traffic, i),
                    m.mode, m.sync_us, _row(m.network_us, i), _row(m.block_ops_us, i),
                    dispatch_wire_us=_row(m.dispatch_wire_us, i),
                    combine_wire_us=_row(m.combine_wire_us, i))
            for i in range(loads.shape[0])]


def nearby(tokens: np.ndarray, total: float, most: float) -> bool:
    """Whether EP ranks' dispatched `tokens` ([ranks]) are within `COARSE_TOKENS_FRAC` of a
    pool's, whose ranks dispatched `total` in all and `most` on the busiest (coarse pools)."""
    return (abs(float(tokens.sum()) - total) <= COARSE_TOKENS_FRAC * total
            and abs(float(tokens.max(initial=0.0)) - most) <= COARSE_TOKENS_FRAC * most)


def _row(x, i: int):
    """Draw `i` of a `[draws, ...]` array; a float shared by every draw as it is."""
    return x[i] if np.ndim(x) else x


class _Pool:
    """Draws of one batch shape: loads `[M, layers, experts]` and M MoE costs. A row returns
    the same objects each time it serves, so per-step statistics of them can be remembered
    (`MetricsRecorder.record`)."""

    def __init__(self, key: tuple, t_s: float, max_uses: int, num_tokens: int, loads: np.ndarray,
                 rows: list[MoECost]):
        self.key, self.t_s, self.max_uses, self.loads, self.rows = key, t_s, max_uses, loads, rows
        self.num_tokens = num_tokens
        tokens = np.frombuffer(key[0], dtype=np.float64)    # `pool_key`'s EP ranks' tokens
        self.total, self.most = float(tokens.sum()), float(tokens.max(initial=0.0))
        self.used = 0
        self.fresh: LoadRows | None = None      # n fresh [layers, experts] loads for observers
        self.fresh_used = 0


class PoolStepper:
    """The fast engine's pricing: steps reuse a few draws of their batch shape (module doc).

    Args:
        sim: the run it prices (as `ReferenceStepper`'s), read at each step: also its seed,
            scenario, `wants_fresh_loads` and `last_step`.
    """

    def __init__(self, sim):
        self.sim = sim
        spec = sim.scenario.workload.skew
        rate = getattr(spec, "drift_rate_per_s", 0.0)
        # a trace of several passes changes popularity every forward pass: every step draws anew
        self.fresh_every_step = sim.skew.per_step
        self.drift_window_s = DRIFT_STALE_FRAC / rate if rate > 0 else np.inf
        self.rng = np.random.Generator(np.random.SFC64([sim.seed, 0x9007]))
        self._pool: _Pool | None = None
        self._last_lifetime = MAX_DRAWS * USES_PER_DRAW
        self.num_draws = 0
        self.num_pools = 0

    def price(self, batch: BatchCounts, now_s: float, step: int) -> tuple[np.ndarray, StepCost]:
        sim = self.sim
        cost_model, placement = sim.cost_model, sim.placement
        pool = self.pool_for(batch, now_s, step)
        row = self.draw_rows(pool, 1)[0]
        loads = self.take(pool, row, now_s, step)
        return loads, cost_model.step(batch, None, placement.tables, moe=pool.rows[row])

    def take(self, pool: _Pool, row: int, now_s: float, step: int) -> np.ndarray:
        """One use of `pool`'s draw `row` by the step at `now_s`: the loads `[layers, experts]`
        its observers see."""
        if not self.fresh_for(pool):
            pool.used += 1
            return pool.loads[row]
        return self.fresh_loads(pool, [now_s], step)[0][0]

    def fresh_for(self, pool: _Pool) -> bool:
        """Whether the observers of steps `pool` serves see fresh loads (`fresh_loads`)."""
        return self.sim.wants_fresh_loads and pool.max_uses > 1

    def fresh_loads(self, pool: _Pool, starts_s: list[float], step: int) -> list[np.ndarray]:
        """The next `len(starts_s)` uses of `pool` (`fresh_for`), by steps `step`, `step + 1`,
        ... starting at `starts_s`: the fresh loads their observers see, as `take` would give
        them one by one, in blocks `[steps, layers, experts]` (in order; not copied into one).

        Observers (EPLB's statistics window) sum loads over many steps: a reused draw would
        make those sums noisier than independent steps, so they get fresh ones, drawn
        FRESH_BLOCK at a time (at the popularity of the first step of the block)."""
        sim, out, done, num = self.sim, [], 0, len(starts_s)
        while done < num:
            if pool.fresh is None or pool.fresh_used == pool.fresh.num:
                size = min(FRESH_BLOCK, pool.max_uses - pool.used)
                pool.fresh = sim.skew.load_rows(size, pool.num_tokens, sim.routing_rng,
                                                starts_s[done], step + done)
                pool.fresh_used = 0
            take = min(num - done, pool.fresh.num - pool.fresh_used)
            out.append(pool.fresh.rows(pool.fresh_used, pool.fresh_used + take))
            pool.fresh_used += take
            pool.used += take
            done += take
        return out

    def current_pool(self, batch: BatchCounts, now_s: float, key: tuple | None = None) -> _Pool | None:
        """The current pool if it serves a step of `batch` at `now_s` (None: a new one would;
        `key`: `pool_key(batch)` where the caller has it)."""
        pool = self._pool
        if pool is None or pool.used >= pool.max_uses or now_s - pool.t_s >= self.drift_window_s:
            return None
        key = self.pool_key(batch) if key is None else key
        if pool.key == key:
            return pool
        if not self.sim.coarse_pools or key[1:] != pool.key[1:] or self.sim.wants_fresh_loads:
            return None
        return pool if nearby(self.sim.cost_model.ep_tokens(batch), pool.total, pool.most) \
            else None

    def pool_for(self, batch: BatchCounts, now_s: float, step: int,
                 last_step_s: float | None = None) -> _Pool:
        """The pool that serves a step of `batch` at `now_s`: the current one, else a new one
        (another batch shape or placement, no uses left, or past the drift window).
        `last_step_s`: the time of the step before (None: `sim.last_step`'s; a leap that
        has yet to tell the engine its steps says it)."""
        key = self.pool_key(batch)
        pool = self.current_pool(batch, now_s, key)
        if pool is None:
            if self._pool is not None:
                self._last_lifetime = self._pool.used
            if last_step_s is None:
                last = self.sim.last_step
                last_step_s = (last.end_us - last.start_us) * 1e-6 if last is not None else 0.0
            pool = self._pool = self._new_pool(key, batch, now_s, step, last_step_s)
        return pool

    def pool_key(self, batch: BatchCounts) -> tuple:
        """The batch shape a pool serves: tokens per rank, phase, CUDA graph, placement version."""
        cost_model = self.sim.cost_model
        return (np.asarray(cost_model.ep_tokens(batch), dtype=np.float64).tobytes(), batch.phase,
                cost_model.uses_graph(batch), self.sim.placement.version)

    def draw_rows(self, pool: _Pool, num: int) -> list[int]:
        """The rows of `pool` the next `num` steps take, one draw at random each (one random
        number per step, step by step: the stream does not depend on how many are drawn at once)."""
        if len(pool.rows) == 1:
            return [0] * num
        # one call for the `num` draws: numpy's bounded integers take the same generator
        # outputs drawn as one array as drawn one at a time (tests/epsim/sim/test_stepper.py)
        return self.rng.integers(len(pool.rows), size=num).tolist()

    def _new_pool(self, key: tuple, batch: BatchCounts, now_s: float, step: int,
                  step_s: float) -> _Pool:
        """M draws where M covers the steps this pool is expected to serve, `USES_PER_DRAW`
        steps per draw: up to the drift window (at `step_s` per step), and no more than twice
        what the last pool served (a shape that keeps changing gets one draw per step, as the
        reference)."""
        sim = self.sim
        if self.fresh_every_step:
            expected = 1
        else:
            by_drift = self.drift_window_s / step_s if step_s > 0 else np.inf
            expected = max(1, int(min(MAX_DRAWS * USES_PER_DRAW, by_drift,
                                      2 * self._last_lifetime)))
        num_draws = min(MAX_DRAWS, -(-expected // USES_PER_DRAW))
        loads, rows = moe_draws(sim.cost_model, sim.skew, sim.routing_rng, sim.placement.tables,
                                batch, num_draws, now_s, step)
        self.num_draws += num_draws
        self.num_pools += 1
        max_uses = 1 if self.fresh_every_step else num_draws * USES_PER_DRAW
        return _Pool(key, now_s, max_uses, batch.routed_tokens, loads, rows)


def default_engine() -> str:
    """`$EPSIM_ENGINE` if set, else "fast" (read at each call, so worker processes follow it)."""
    return check_engine(os.environ.get(ENGINE_VARIABLE, DEFAULT_ENGINE))


def make_stepper(engine: str | None, sim):
    """The stepper of `engine` ("fast" | "reference"; None: `default_engine()`)."""
    engine = default_engine() if engine is None else check_engine(engine)
    return PoolStepper(sim) if engine == "fast" else ReferenceStepper(sim)
