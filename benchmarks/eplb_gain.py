"""EPLB algorithms compared on a documented set of skewed expert loads.

For each skew (Zipf alpha range and hot sets, log-normal per-layer variation, hot experts
shuffled per layer) and seed, two statistics windows are drawn from `epsim.routing.SkewModel`:
W0 at t=0 and W1 one second later (popularity drift between them, plus the sampling noise
of a finite window). Every algorithm places on W0, then rebalances on W1 (given its own W0
placement as `previous`). Reported per algorithm: balancedness (mean GPU load / max GPU load)
on W1 and on a later window W2 (what serving sees until the next rebalance), slots changed
by the W0 -> W1 rebalance, bytes moved and the modelled stop-the-world stall.

    python benchmarks/eplb_gain.py                 # writes benchmarks/results/eplb_gain.{json,csv}
    python benchmarks/eplb_gain.py --plots         # also docs/img/eplb_*.png
    python benchmarks/eplb_gain.py --timing        # algorithm wall time per layer x slot
    python benchmarks/eplb_gain.py --quick --out benchmarks/results/quick   # the reduced size

Every number is deterministic (seeded draws, the models) except `algorithm_wall_s`, the host
wall time of the algorithm call on the machine that ran it; the JSON records the command that
made it. `tests/benchmarks/test_recorded_results.py` reruns `--quick` and compares.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from epsim.eplb import (Placement, compute_placement, rebalance_cost, rebalance_params,
                        sticky_placement)
from epsim.routing import skew_from_dict
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"

SKEWS = [
    {"kind": "zipf", "alpha": 0.4}, {"kind": "zipf", "alpha": 0.6}, {"kind": "zipf", "alpha": 0.8},
    {"kind": "zipf", "alpha": 1.0}, {"kind": "zipf", "alpha": 1.2},
    {"kind": "hotset", "num_hot": 16, "hot_frac": 0.4}, {"kind": "hotset", "num_hot": 8, "hot_frac": 0.5},
]
LAYER_VARIATION = 0.3           # log-normal sigma of popularity per [layer, expert]
DRIFT_RATE_PER_S = 0.05         # popularity swaps per expert per second between W0 and W1
WINDOW_TOKENS = 1000 * 32 * 64  # 1000 decode steps of 64 tokens on each of 32 ranks
ALGORITHMS = ("deepseek", "deepseek_global", "sticky")
QUICK_SKEWS = ({"kind": "zipf", "alpha": 1.0}, {"kind": "hotset", "num_hot": 8, "hot_frac": 0.5})
HOST_TIME_FIELDS = ("algorithm_wall_s",)     # host wall time: not reproducible across machines

# DeepSeek-V3 on four 8xH200 nodes, 32 redundant slots (9 per GPU), as SGLang deploys it
CONFIG = {"model": "DeepSeek-V3", "num_gpus": 32, "num_nodes": 4, "num_redundant": 32}


def skew_name(skew: dict) -> str:
    return (f"zipf:{skew['alpha']}" if skew["kind"] == "zipf"
            else f"hotset:{skew['num_hot']}:{skew['hot_frac']}")


def windows(skew: dict, seed: int, model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W0 at t=0 s, W1 at t=1 s, W2 at t=2 s: [layers, experts] token counts each."""
    spec = {**skew, "layer_variation": LAYER_VARIATION, "drift_rate_per_s": DRIFT_RATE_PER_S}
    model_skew = skew_from_dict(spec, model.num_moe_layers, model.num_experts, model.top_k, seed=seed)
    rng = np.random.default_rng([seed, 7])
    return tuple(model_skew.loads(WINDOW_TOKENS, rng, t_s=float(t)) for t in range(3))


def run_case(skew: dict, seed: int, model, params: dict) -> list[dict]:
    w0, w1, w2 = windows(skew, seed, model)
    num_logical = model.num_experts
    num_replicas = num_logical + CONFIG["num_redundant"]
    shape = (num_replicas, model.num_expert_groups, CONFIG["num_nodes"], CONFIG["num_gpus"])
    contiguous = Placement.contiguous(model.num_moe_layers, num_logical, CONFIG["num_gpus"], CONFIG["num_nodes"])
    rows = []
    for algorithm in ALGORITHMS:
        p0 = compute_placement(algorithm, w0, *shape)
        start = time.perf_counter()
        p1 = compute_placement(algorithm, w1, *shape, previous=p0)
        wall_s = time.perf_counter() - start
        cost = rebalance_cost(p0, p1, model.expert_bytes, params, algorithm=algorithm)
        fresh = p1 if algorithm != "sticky" else compute_placement(algorithm, w1, *shape)
        rows.append({
            "skew": skew_name(skew), "seed": seed, "algorithm": algorithm,
            "balancedness_before": float(contiguous.balancedness(w1).mean()),
            "balancedness_w1": float(p1.balancedness(w1).mean()),
            "balancedness_w1_worst_layer": float(p1.balancedness(w1).min()),
            "balancedness_w1_fresh": float(fresh.balancedness(w1).mean()),
            "balancedness_w2": float(p1.balancedness(w2).mean()),
            "changed_slots": cost.changed_slots,
            "changed_frac": cost.changed_slots / p1.physical_to_logical.size,
            "moved_gb": cost.moved_bytes / 1e9, "rdma_gb": cost.rdma_bytes / 1e9,
            "stall_ms": cost.stall_us / 1e3, "transfer_ms": float(cost.chunk_us.sum()) / 1e3,
            "algorithm_ms": cost.algorithm_us / 1e3, "algorithm_wall_s": wall_s,
        })
    return rows


def tolerance_sweep(model, seed: int = 0) -> list[dict]:
    """sticky's moves/balance trade-off on zipf:1.0 against DeepSeek's two policies."""
    w0, w1, _ = windows({"kind": "zipf", "alpha": 1.0}, seed, model)
    num_replicas = model.num_experts + CONFIG["num_redundant"]
    shape = (num_replicas, model.num_expert_groups, CONFIG["num_nodes"], CONFIG["num_gpus"])
    out = []
    for algorithm in ("deepseek", "deepseek_global"):
        p0, p1 = compute_placement(algorithm, w0, *shape), compute_placement(algorithm, w1, *shape)
        out.append({"algorithm": algorithm, "tolerance_frac": None,
                    "balancedness_w1": float(p1.balancedness(w1).mean()),
                    "changed_frac": float(p1.changed_slots(p0).sum() / p1.physical_to_logical.size)})
    p0 = sticky_placement(w0, *shape)
    for tol in (None, 0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05):
        p1 = sticky_placement(w1, *shape, previous=p0, tolerance_frac=tol)
        out.append({"algorithm": "sticky", "tolerance_frac": tol,
                    "balancedness_w1": float(p1.balancedness(w1).mean()),
                    "changed_frac": float(p1.changed_slots(p0).sum() / p1.physical_to_logical.size)})
    return out


def timing(model, repeats: int = 7) -> dict[str, float]:
    """Fastest of `repeats` wall times per (layer x slot) in µs, rebalancing with a previous
    placement (the minimum: other processes on a shared machine only ever add time)."""
    w0, w1, _ = windows({"kind": "zipf", "alpha": 1.0}, 0, model)
    num_replicas = model.num_experts + CONFIG["num_redundant"]
    shape = (num_replicas, model.num_expert_groups, CONFIG["num_nodes"], CONFIG["num_gpus"])
    out = {}
    for algorithm in ("deepseek", "deepseek_hierarchical", "deepseek_global", "sticky"):
        p0 = compute_placement(algorithm, w0, *shape)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            compute_placement(algorithm, w1, *shape, previous=p0)
            times.append(time.perf_counter() - start)
        out[algorithm] = float(np.min(times)) * 1e6 / (model.num_moe_layers * num_replicas)
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """Mean over seeds per (skew, algorithm)."""
    keys = sorted({(r["skew"], r["algorithm"]) for r in rows}, key=lambda k: (
        [skew_name(s) for s in SKEWS].index(k[0]), ALGORITHMS.index(k[1])))
    out = []
    for skew, algorithm in keys:
        group = [r for r in rows if r["skew"] == skew and r["algorithm"] == algorithm]
        numeric = [k for k, v in group[0].items() if isinstance(v, float)]
        out.append({"skew": skew, "algorithm": algorithm, "num_seeds": len(group),
                    **{k: float(np.mean([r[k] for r in group])) for k in numeric + ["changed_slots"]}})
    return out


def plot(summary: list[dict], sweep: list[dict]) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    IMG.mkdir(parents=True, exist_ok=True)
    skews = [skew_name(s) for s in SKEWS]
    x = np.arange(len(skews))
    colors = {"deepseek": "tab:red", "deepseek_global": "tab:orange", "sticky": "tab:blue"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.27
    before = [next(r for r in summary if r["skew"] == s)["balancedness_before"] for s in skews]
    ax1.plot(x, before, "k.--", label="no EPLB (contiguous)")
    for i, algorithm in enumerate(ALGORITHMS):
        rows = [next(r for r in summary if r["skew"] == s and r["algorithm"] == algorithm) for s in skews]
        ax1.plot(x, [r["balancedness_w1"] for r in rows], "o-", color=colors[algorithm], label=algorithm)
        if algorithm == "sticky":
            ax1.plot(x, [r["balancedness_w1_fresh"] for r in rows], "^:", color=colors[algorithm],
                     label="sticky without previous (refined)")
        ax2.bar(x + (i - 1) * width, [r["moved_gb"] for r in rows], width, color=colors[algorithm],
                label=algorithm)
    ax1.set_xticks(x, skews, rotation=30)
    ax1.set_ylabel("balancedness on W1 (mean / max GPU load)")
    inset = ax1.inset_axes([0.35, 0.46, 0.62, 0.25])   # the top of the scale, where they differ
    for algorithm in ("deepseek_global", "sticky"):
        rows = [next(r for r in summary if r["skew"] == s and r["algorithm"] == algorithm) for s in skews]
        inset.plot(x, [r["balancedness_w1"] for r in rows], "o-", ms=3, color=colors[algorithm])
        if algorithm == "sticky":
            inset.plot(x, [r["balancedness_w1_fresh"] for r in rows], "^:", ms=3, color=colors[algorithm])
    inset.set_ylim(0.92, 1.001)
    inset.set_xticks([])
    inset.tick_params(labelsize=7)
    inset.grid(alpha=0.3)
    ax1.set_ylim(0, 1.02)
    ax1.legend(loc="lower left", fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.set_xticks(x, skews, rotation=30)
    ax2.set_ylabel("expert weights moved per rebalance (GB)")
    ax2.set_ylim(0, 1.3 * max(r["moved_gb"] for r in summary))
    ax2.legend(fontsize=8, ncol=3, loc="upper center")
    ax2.grid(alpha=0.3, axis="y")
    fig.suptitle("DeepSeek-V3, 32 GPUs (4 nodes), 32 redundant slots: rebalance W0 -> W1")
    fig.tight_layout()
    paths = [IMG / "eplb_gain.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4.2))
    sticky = [r for r in sweep if r["algorithm"] == "sticky" and r["tolerance_frac"] is not None]
    ax.plot([r["changed_frac"] * 100 for r in sticky], [r["balancedness_w1"] for r in sticky], "o-",
            color=colors["sticky"], label="sticky, tolerance_frac 0 .. 0.05")
    for r in sweep:
        if r["algorithm"] != "sticky":
            ax.plot(r["changed_frac"] * 100, r["balancedness_w1"], "s", color=colors[r["algorithm"]],
                    label=r["algorithm"])
        elif r["tolerance_frac"] is None:
            ax.plot(r["changed_frac"] * 100, r["balancedness_w1"], "*", ms=12, color=colors["sticky"],
                    label="sticky default (match deepseek_global)")
    ax.set_xlabel("slots changed per rebalance (%)")
    ax.set_ylabel("balancedness on W1")
    ax.set_title("moves vs balance, zipf:1.0, DeepSeek-V3 on 32 GPUs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(IMG / "eplb_tradeoff.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=None, help="seeds per skew (default 3; --quick 1)")
    parser.add_argument("--plots", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="the reduced size: 1 seed, skews zipf:1.0 and hotset:8:0.5")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for eplb_gain.{json,csv}")
    args = parser.parse_args()
    if args.quick and args.plots:
        parser.error("--plots draws the full run (docs/img); leave out --quick")
    seeds = args.seeds or (1 if args.quick else 3)
    skews = QUICK_SKEWS if args.quick else SKEWS
    model = get_model(CONFIG["model"])
    params = rebalance_params(None, ClusterSpec(gpu="H200", num_nodes=CONFIG["num_nodes"]))
    if args.timing:
        print(json.dumps({"us_per_layer_slot": timing(model), "machine": platform.processor()
                          or platform.machine()}, indent=1))
        return
    rows = [row for skew in skews for seed in range(seeds) for row in run_case(skew, seed, model, params)]
    summary = summarize(rows)
    sweep = tolerance_sweep(model)
    args.out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "benchmarks/eplb_gain.py", *sys.argv[1:]])
    meta = {"command": command, "config": CONFIG, "layer_variation": LAYER_VARIATION,
            "drift_rate_per_s": DRIFT_RATE_PER_S, "window_tokens": WINDOW_TOKENS,
            "expert_bytes": model.expert_bytes, "seeds": seeds, "params": params,
            "host_time_fields": list(HOST_TIME_FIELDS)}
    (args.out / "eplb_gain.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "tolerance_sweep": sweep, "rows": rows}, indent=1) + "\n")
    with (args.out / "eplb_gain.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    print(f"{'skew':<16}{'algorithm':<17}{'bal_before':>10}{'bal_W1':>8}{'worst':>8}{'fresh':>8}{'bal_W2':>8}"
          f"{'changed%':>9}{'moved_GB':>9}{'stall_ms':>9}{'(algo':>7}{'+ move)':>8}")
    for r in summary:
        print(f"{r['skew']:<16}{r['algorithm']:<17}{r['balancedness_before']:>10.3f}"
              f"{r['balancedness_w1']:>8.4f}{r['balancedness_w1_worst_layer']:>8.4f}"
              f"{r['balancedness_w1_fresh']:>8.4f}"
              f"{r['balancedness_w2']:>8.4f}{100 * r['changed_frac']:>9.1f}{r['moved_gb']:>9.1f}"
              f"{r['stall_ms']:>9.1f}{r['algorithm_ms']:>7.0f}{r['transfer_ms']:>8.0f}")
    print("tolerance sweep (zipf:1.0):")
    for r in sweep:
        print(f"  {r['algorithm']:<17} tol={r['tolerance_frac']!s:<6} bal={r['balancedness_w1']:.4f} "
              f"changed={100 * r['changed_frac']:.1f}%")
    if args.plots:
        for path in plot(summary, sweep):
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
