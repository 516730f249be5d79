"""Scaling predictions: what the shipped EP-2 profile says `live.bench.sweep` will measure at EP 4
and 8.

The claim epsim is bought for is that a profile measured on a few GPUs predicts a larger
deployment (issue #9). This script writes that prediction down *before* the measurement: for
the bench's shapes, backends, dispatch dtypes, skews and tokens per rank, at EP 2 (the fitted
size, for reference), 4 and 8, the predicted dispatch, combine, experts and moe_layer times on
exactly the counts the bench will record (`epsim.validate.scaling`, which holds the logic; this
file is its command line, plot and git provenance).

    python benchmarks/scaling_predict.py [--plot]        # benchmarks/results/scaling_predictions.{jsonl,md}
    python benchmarks/scaling_predict.py --compare OUT/bench.jsonl [--predictions FILE]
    python benchmarks/scaling_predict.py --cpu --ep 2 4 --tokens 1,4,16 --out OUT/predictions.jsonl

`--cpu` predicts the bench's CPU shapes (gloo dry run of scripts/gpu_scaling.sh; the numbers
mean nothing, the pipeline is the point). The profile's components were fitted at EP 2 only
(`valid_range.ep_size == [2, 2]`): EP 4 and 8 extrapolate by design and each line says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from epsim.calibrate.grid import GPU_MODELS, GPU_TOKENS, HOTSET, UNIFORM
from epsim.errors import EpsimError, SpecError
from epsim.profile import default_profile_path
from epsim.validate.scaling import (comparison_table, compare, cpu_shapes, predict_grid,
                                    read_predictions, summary_markdown, zoo_shape)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "scaling_predictions.jsonl"
PLOT = ROOT / "docs" / "img" / "scaling_predictions.png"

# What scripts/gpu_scaling.sh measures: the bench grid's shapes and tokens, two of its skews
SKEWS = (UNIFORM, HOTSET)
CASES = (("torch", "bf16"), ("mooncake", "bf16"), ("mooncake", "fp8"))   # (backend, dispatch dtype)
EP_SIZES = (2, 4, 8)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> dict:
    """The epsim commit, `-dirty` when epsim/ or this script differ from it (then the
    profile's sha256 is what pins the prediction)."""
    head = _git("rev-parse", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "epsim", "benchmarks/scaling_predict.py")
    return {"epsim_commit": head + ("-dirty" if dirty else "")}


def plot(preds: list[dict], path: Path) -> Path:
    """Predicted moe_layer time over tokens per rank, one panel per shape and backend/dtype,
    a line per EP size (solid: uniform, dashed: hot set on rank 0)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layer = [p for p in preds if p["kind"] == "moe_layer"]
    models = list(dict.fromkeys(p["model"] for p in layer))
    cases = list(dict.fromkeys((p["backend"], p["dispatch_dtype"]) for p in layer))
    eps = sorted({p["ep_size"] for p in layer})
    colors = dict(zip(eps, ("tab:blue", "tab:orange", "tab:red", "tab:green")))
    fig, axes = plt.subplots(len(models), len(cases), figsize=(4.2 * len(cases), 3.4 * len(models)),
                             squeeze=False, sharex=True)
    for i, model in enumerate(models):
        for j, (backend, dtype) in enumerate(cases):
            ax = axes[i][j]
            for ep in eps:
                for skew, style in (("uniform", "-"), ("hotset", "--")):
                    pts = sorted((p["num_tokens_per_rank"], p["predicted_us"]) for p in layer
                                 if (p["model"], p["backend"], p["dispatch_dtype"], p["ep_size"])
                                 == (model, backend, dtype, ep) and p["skew"].startswith(skew))
                    if pts:
                        ax.plot(*zip(*pts), style, color=colors[ep], marker=".",
                                label=f"EP {ep} {skew}")
            ax.set(xscale="log", yscale="log", title=f"{model} {backend} {dtype}")
            ax.grid(True, which="both", alpha=0.3)
            if i == len(models) - 1:
                ax.set_xlabel("tokens per rank")
            if j == 0:
                ax.set_ylabel("predicted moe_layer µs")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Predicted from the EP-2 profile (EP 4 and 8 extrapolated; not yet measured)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write_predictions(preds: list[dict], out: Path) -> tuple[Path, Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(p, separators=(",", ":")) + "\n" for p in preds))
    md = out.with_suffix(".md")
    md.write_text(summary_markdown(preds))
    return out, md


def _int_list(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise SpecError(f"--tokens ({text!r}) must be a comma list of integers") from None
    if min(values) <= 0:
        raise SpecError(f"--tokens ({text!r}) must be positive counts")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="predictions JSONL (+ .md)")
    parser.add_argument("--profile", type=Path, default=None, help="default: the shipped profile")
    parser.add_argument("--ep", type=int, nargs="+", default=list(EP_SIZES))
    parser.add_argument("--models", nargs="+", default=None,
                        help="shapes (default: both Qwen3 shapes; --cpu: both CPU shapes)")
    parser.add_argument("--tokens", default=None, help="comma list (default 1,2,4,...,4096)")
    parser.add_argument("--seed", type=int, default=0, help="the bench's --seed")
    parser.add_argument("--cpu", action="store_true", help="the bench's CPU shapes (dry run)")
    parser.add_argument("--plot", action="store_true", help=f"also {PLOT.relative_to(ROOT)}")
    parser.add_argument("--compare", type=Path, nargs="+", default=None,
                        help="measured bench records to judge the predictions on")
    parser.add_argument("--predictions", type=Path, default=RESULTS, help="for --compare")
    parser.add_argument("--table-out", type=Path, default=None, help="--compare table as .md")
    args = parser.parse_args(argv)
    try:
        if args.compare:
            result = compare(args.compare, read_predictions(args.predictions))
            table = comparison_table(result)
            print(table, end="")
            if args.table_out:
                args.table_out.write_text(table)
            return 1 if result.counts_differ else 0
        tokens = _int_list(args.tokens) if args.tokens else list(GPU_TOKENS)
        if args.cpu:
            from epsim.calibrate.grid import CPU_SKEWS
            shapes, cases, skews = cpu_shapes(), [("torch", "")], list(CPU_SKEWS[::2])
        else:
            shapes, cases, skews = [zoo_shape(m) for m in GPU_MODELS], list(CASES), list(SKEWS)
        if args.models:
            known = {s.name: s for s in shapes}
            unknown = [m for m in args.models if m not in known]
            if unknown:
                raise SpecError(f"--models ({unknown}) must be among {list(known)}")
            shapes = [known[m] for m in args.models]
        profile_path = args.profile or default_profile_path()
        preds = predict_grid(profile_path, shapes, cases, skews, tokens, args.ep, args.seed,
                             commit())
        paths = write_predictions(preds, args.out)
        if args.plot:
            paths += (plot(preds, PLOT),)
    except EpsimError as exc:
        print(f"scaling_predict: error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(preds)} predictions -> " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
