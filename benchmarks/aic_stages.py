"""What the decode-stage benchmarks share (`qwen_h200_decode_stages.py`,
`deepseek_b200_decode_stages.py`): aiconfigurator-core's op tables of one system, a GEMM between
the table's widths, and one decode step of a silicon row as epsim's mapping prices it.

Op tables are calibration data; the silicon rows are read only for the deployment their mapping
builds (`plan_row`), never for their measured latencies here.
"""

from __future__ import annotations

import copy

import numpy as np

from epsim.calibrate.aic_tables import package_root
from epsim.cost.attention import BatchCounts
from epsim.sim.engine import Simulation
from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon.mapping import plan_row
from lmsys_decode_stages import measured


def frames(system: str, tables: dict[str, str]) -> dict:
    """{name: the parquet table at `data/<system>/<path>`} of the installed aiconfigurator-core."""
    import pandas as pd
    return {k: pd.read_parquet(package_root() / "data" / system / v) for k, v in tables.items()}


def gemm_us(frame, m: int, n: int, k: int, dtype: str) -> float:
    """AIC's GEMM at (m, n, k) and `dtype` (µs), linear in n between the table's bracketing
    widths (NaN where the table has no width at or beyond n)."""
    widths = np.array(sorted(frame[(frame.gemm_dtype == dtype) & (frame.k == k)].n.unique()))
    if not len(widths) or n < widths.min() or n > widths.max():
        return float("nan")
    lo, hi = widths[widths <= n].max(), widths[widths >= n].min()
    at = {w: measured(frame, gemm_dtype=dtype, m=m, n=int(w), k=k) for w in {lo, hi}}
    return at[lo] if lo == hi else at[lo] + (at[hi] - at[lo]) * (n - lo) / (hi - lo)


def between(frame, column: str, value: float, **where) -> float:
    """AIC's latency (µs) at `column` = `value`, linear between the table's bracketing values of
    `column` among the rows matching `where` (NaN outside them)."""
    keep = np.ones(len(frame), dtype=bool)
    for name, v in where.items():
        keep &= (frame[name] == v).to_numpy()
    points = np.array(sorted(frame[keep][column].unique()), dtype=np.float64)
    if not len(points) or value < points.min() or value > points.max():
        return float("nan")
    lo, hi = points[points <= value].max(), points[points >= value].min()
    at = {p: measured(frame, **where, **{column: type(frame[column].iloc[0])(p)}) for p in {lo, hi}}
    return at[lo] if lo == hi else at[lo] + (at[hi] - at[lo]) * (value - lo) / (hi - lo)


def uniform_loads(num_layers: int, num_experts: int, top_k: int, tokens: int,
                  seed: int = 0) -> np.ndarray:
    """[layers, experts] pairs of `tokens` tokens each routed to `top_k` distinct experts
    uniformly at random (a random-token benchmark's routing, no skew)."""
    rng = np.random.default_rng(seed)
    loads = np.zeros((num_layers, num_experts))
    for layer in range(num_layers):
        for _ in range(tokens):
            loads[layer, rng.choice(num_experts, top_k, replace=False)] += 1
    return loads


def row_simulation(row) -> Simulation:
    """The simulation epsim's silicon mapping builds for the row's (first) instance; for a row
    several deployments fit (`candidates`), the first candidate without a speculative draft
    (the decode step itself, not its MTP cycle)."""
    plan = plan_row(row)
    if not plan.instances:
        plan = next(c for c in plan_row(row, approximate=True).candidates
                    if "speculative_algorithm" not in c.instances[0].data["deployment"])
    return Simulation(scenario_from_dict(copy.deepcopy(plan.instances[0].data),
                                         where="silicon row"))


def decode_step(sim: Simulation, requests: int, keys: int, seed: int = 0):
    """One decode step of `requests` requests of `keys` keys each on one attention group, routed
    by `uniform_loads` (epsim's `StepCost`)."""
    m = sim.cost_model.model
    loads = uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, requests, seed)
    return sim.cost_model.step(BatchCounts.uniform_decode(1, requests, keys), loads,
                               sim.placement.tables)
