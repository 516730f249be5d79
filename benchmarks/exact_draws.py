"""Where exact expert-load draws are needed: each step's MoE time with exact (multinomial) and
normal-approximation loads, through the cost model, in five shipped scenarios; and what the
threshold between them (`epsim.routing.sampling.EXACT_BELOW_SLOTS_PER_EXPERT`) costs a short
sweep point.

Agreement: at each load level (slots per expert, `LEVELS`), `DRAWS` draws of each kind at the
scenario's starting popularity and placement are priced by `CostModel.moe` at an even decode
batch of that many tokens (2048 context), one MoE time per draw (dispatch + experts + combine
over the layers, device time). The threshold the table supports is the lowest level from which
up every scenario agrees (`TOLERANCE_PCT`: mean, p99 and sd); the shipped constant must be it
(tests/benchmarks/test_recorded_results.py).

Speed: the plan sweep's points (benchmarks/plan_sweep.py: qwen235b_h200_decode, 6 simulated s
from empty) at three EP sizes and three arrival rates, fast engine, simulated with the former
threshold (32 slots per expert) and with the shipped one, taking turns (fastest of `REPEATS`).

    python benchmarks/exact_draws.py --write          # record benchmarks/results/exact_draws.md
    python benchmarks/exact_draws.py --quick --write  # benchmarks/results/quick/ (no timings)
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings
from pathlib import Path

import numpy as np

from epsim.routing import sampling

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "exact_draws.md"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "quick" / "exact_draws.md"
SCENARIOS = ("qwen235b_h200_decode", "deepseek_v3_decode", "qwen30b_ep_backend", "default",
             "eplb_redundancy_32gpu")
LEVELS = (1, 2, 4, 8, 16, 24, 31)         # slots per expert: 31 is just below the former threshold
DRAWS = 1000
QUICK = (("qwen30b_ep_backend", "default"), (2, 8, 16), 200)
# normal against exact, in %: the mean (its standard error at DRAWS is ~0.02 %), the p99 (a
# tail estimate, several times noisier) and the sd (~3 % noise at DRAWS)
TOLERANCE_PCT = {"mean": 0.1, "p99": 0.3, "sd": 15.0}
FORMER_THRESHOLD = 32.0                   # slots per expert, before this benchmark
SWEEP_POINTS = tuple((ep, rate) for ep in (8, 32, 128) for rate in (50, 200, 400))
SWEEP_OVERRIDES = ("workload.duration_s=6", "workload.warmup_s=2")
REPEATS = 3


def moe_times(name: str, per_expert: int, draws: int) -> dict[str, np.ndarray]:
    """[draws] MoE ms per step with exact and with normal loads at `per_expert` slots per
    expert in scenario `name` (its skew at t = 0, its starting placement)."""
    from epsim.cost.attention import BatchCounts
    from epsim.sim import Simulation
    from epsim.spec import load_scenario
    sim = Simulation(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), engine="reference")
    cost, skew, tables = sim.cost_model, sim.skew, sim.placement.tables
    dp = sim.scenario.dp_size
    num_tokens = max(per_expert * skew.num_experts // skew.top_k, 1)
    tokens = np.full(dp, float(num_tokens // dp))
    tokens[:num_tokens % dp] += 1.0                               # [dp] the batch, evenly
    zeros = np.zeros(dp)
    batch = BatchCounts(tokens, tokens * 2048.0, zeros, zeros, zeros, tokens, "decode")
    shares, slots = skew.popularity(0.0), num_tokens * skew.top_k
    ep_tokens, graph = cost.ep_tokens(batch), cost.uses_graph(batch)
    out = {}
    for kind, draw in (("exact", lambda rng: sampling.exact_loads(shares, slots, rng)),
                       ("normal", lambda rng: sampling.normal_loads(shares, slots, rng))):
        rng = np.random.default_rng([per_expert, 0xD4A])
        times = []
        for _ in range(draws):
            m = cost.moe(draw(rng), ep_tokens, tables, "decode", cost.micro_batch_fraction, graph)
            times.append(sum(m.sums[:3]) * 1e-3)              # dispatch, experts, combine
        out[kind] = np.array(times)
    return out


def agreement_rows(scenarios, levels, draws) -> list[dict]:
    rows = []
    for name in scenarios:
        for level in levels:
            t = moe_times(name, level, draws)
            e, n = t["exact"], t["normal"]
            rows.append({"scenario": name, "level": level,
                         "mean": (e.mean(), n.mean()), "sd": (e.std(), n.std()),
                         "p99": (np.percentile(e, 99), np.percentile(n, 99))})
    return rows


def deviation_pct(pair: tuple[float, float]) -> float:
    return (pair[1] / pair[0] - 1.0) * 100.0


def supported_threshold(rows: list[dict], tolerance_pct: dict = TOLERANCE_PCT) -> int | None:
    """The lowest level from which up every row agrees within `tolerance_pct` (mean, p99, sd);
    None if even the highest does not."""
    levels = sorted({r["level"] for r in rows})
    ok = {lv: all(abs(deviation_pct(r[k])) <= tol for r in rows if r["level"] == lv
                  for k, tol in tolerance_pct.items()) for lv in levels}
    best = None
    for lv in reversed(levels):
        if not ok[lv]:
            break
        best = lv
    return best


def agreement_table(rows: list[dict]) -> list[str]:
    lines = ["| scenario | slots per expert | MoE ms mean, exact / normal | mean diff | "
             "sd ms, exact / normal | sd diff | p99 diff |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| `{r['scenario']}` | {r['level']} | {r['mean'][0]:.3f} / {r['mean'][1]:.3f} "
                     f"| {deviation_pct(r['mean']):+.2f} % | {r['sd'][0]:.4f} / {r['sd'][1]:.4f} "
                     f"| {deviation_pct(r['sd']):+.0f} % | {deviation_pct(r['p99']):+.2f} % |")
    return lines


def draw_cost_rows(levels) -> list[str]:
    """Host µs of one [94, 128] draw of each kind (Qwen3-235B-A22B's MoE layers)."""
    rng = np.random.default_rng(0)
    shares = rng.dirichlet(np.ones(128), size=94)
    lines = ["| slots per expert | exact draw µs | normal draw µs |", "|---:|---:|---:|"]
    for level in levels:
        slots = level * 128
        cost = []
        for draw in (lambda: sampling.exact_loads(shares, slots, rng),
                     lambda: sampling.normal_loads(shares, slots, rng)):
            best = np.inf
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(20):
                    draw()
                best = min(best, (time.perf_counter() - start) / 20)
            cost.append(best * 1e6)
        lines.append(f"| {level} | {cost[0]:.0f} | {cost[1]:.0f} |")
    return lines


def sweep_point_rows() -> tuple[list[str], float]:
    """The plan sweep's points at the former and the shipped threshold, fastest of `REPEATS`
    each, taking turns; and the ratio of their summed wall times."""
    from epsim.sim import simulate
    from epsim.spec import load_scenario
    shipped = sampling.EXACT_BELOW_SLOTS_PER_EXPERT
    lines = ["| EP | req/s | steps | wall ms, threshold 32 | wall ms, threshold "
             f"{shipped:g} | speed-up |", "|---:|---:|---:|---:|---:|---:|"]
    totals = [0.0, 0.0]
    for ep, rate in SWEEP_POINTS:
        scenario = load_scenario(ROOT / "scenarios" / "qwen235b_h200_decode.yaml",
                                 [f"deployment.ep_size={ep}", f"workload.arrivals.rate_per_s={rate}",
                                  *SWEEP_OVERRIDES])
        best, steps = [np.inf, np.inf], 0
        try:
            for _ in range(REPEATS):
                for i, threshold in enumerate((FORMER_THRESHOLD, shipped)):
                    sampling.EXACT_BELOW_SLOTS_PER_EXPERT = threshold   # read at each draw
                    start = time.perf_counter()
                    result = simulate(scenario, engine="fast")
                    best[i] = min(best[i], time.perf_counter() - start)
                    steps = result.steps["step_us"].shape[0]
        finally:
            sampling.EXACT_BELOW_SLOTS_PER_EXPERT = shipped
        totals = [totals[0] + best[0], totals[1] + best[1]]
        lines.append(f"| {ep} | {rate} | {steps} | {best[0] * 1e3:.0f} | {best[1] * 1e3:.0f} | "
                     f"{best[0] / best[1]:.2f}x |")
    return lines, totals[0] / totals[1]


def report(quick: bool) -> str:
    scenarios, levels, draws = QUICK if quick else (SCENARIOS, LEVELS, DRAWS)
    rows = agreement_rows(scenarios, levels, draws)
    threshold = supported_threshold(rows)
    shipped = sampling.EXACT_BELOW_SLOTS_PER_EXPERT
    command = "python benchmarks/exact_draws.py" + (" --quick" if quick else "") + " --write"
    out = ["# Exact or normal expert-load draws (benchmarks/exact_draws.py)", "",
           f"Recorded with `{command}` (numpy {np.__version__}, Python "
           f"{platform.python_version()}); same seed, same table.", "",
           "## Each step's MoE time with either kind of draw", "",
           f"{draws} draws of each kind per row, priced by the cost model (device time, the "
           "scenario's profile) at an even decode batch of `slots per expert x experts / top_k` "
           "tokens; diffs are normal against exact.", "", *agreement_table(rows), "",
           "Lowest level from which up every row agrees (normal against exact: mean within "
           f"{TOLERANCE_PCT['mean']} %, p99 within {TOLERANCE_PCT['p99']} %, sd within "
           f"{TOLERANCE_PCT['sd']:g} %): **{threshold}** slots per expert; shipped threshold "
           f"(`EXACT_BELOW_SLOTS_PER_EXPERT`): **{shipped:g}**."]
    if not quick:
        cost = draw_cost_rows(levels)
        sweep, speedup = sweep_point_rows()
        out += ["", "## What a draw costs (host time, one [94, 128] draw, fastest of 5 x 20)", "",
                *cost, "",
                "## The plan sweep's points, former threshold (32) against the shipped one", "",
                "Fast engine, 6 simulated s from an empty batch (`benchmarks/plan_sweep.py`'s "
                f"points), fastest of {REPEATS} each, the two taking turns, host wall time.", "",
                *sweep, "", f"All nine points: **{speedup:.2f}x** faster with the shipped "
                "threshold."]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="two scenarios, three levels, 200 draws, no timings")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = report(args.quick)
    print(text, end="")
    if args.write:
        path = QUICK_RESULTS if args.quick else RESULTS
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
