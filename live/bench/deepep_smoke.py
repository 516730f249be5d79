"""Run a DeepEP build on the GPUs at hand: what it contains, and the `deepep` backend for real.

`python -m live.bench.deepep_smoke --out DIR` (after `scripts/build_deepep.sh --build`, with the
wheel on `PYTHONPATH`) reports the build (`deep_ep._build_info`), whether SM90 features are
compiled, and runs the live block with the `deepep` backend next to the single-device block on
the same weights and tokens (`live.bench.checks.equality_worker`): outputs must agree within bf16
tolerance and every token must come back with exactly top-k pairs. With one GPU only the low-latency
kernels can run (DeepEP's intranode normal kernels are compiled for 2, 4 and 8 ranks); with two
or more, both modes. Results go to `DIR/deepep_smoke.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from live.bench.checks import EqualityCase, equality_cases_worker, tolerance
from live.config import MoeConfig
from live.dist import run_ranks

# DeepEP's normal (intranode) kernels are instantiated for these rank counts only
NORMAL_MODE_RANKS = (2, 4, 8)


def build_info() -> dict:
    """What the installed DeepEP is: the build script's record, plus SM90 support."""
    import deep_ep

    try:
        from deep_ep._build_info import BUILD_INFO
        info = dict(BUILD_INFO)
    except ImportError:          # not built by scripts/build_deepep.sh
        info = {}
    info["module"] = str(Path(deep_ep.__file__).parent)
    info["sm90_compiled"] = bool(deep_ep.Buffer.is_sm90_compiled())
    return info


def cases(num_gpus: int, tokens_per_rank: int) -> list[EqualityCase]:
    """Qwen3-30B-A3B's block shape (hidden 2048, 128 experts, top-8), one layer, bf16."""
    config = MoeConfig(hidden_size=2048, moe_intermediate_size=768, num_experts=128, top_k=8)
    tokens = (tokens_per_rank,) * num_gpus
    modes = ["low_latency"] + (["normal"] if num_gpus in NORMAL_MODE_RANKS else [])
    out = []
    for mode in modes:
        for skew in (None, {"kind": "zipf", "alpha": 1.0}):
            label = f"deepep {mode} EP{num_gpus} {'router' if skew is None else 'zipf 1.0'}"
            out.append(EqualityCase(config=config, backend="deepep", tokens_per_rank=tokens,
                                    skew=skew, dtype="bfloat16", device="cuda",
                                    deepep_mode=mode, label=label))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m live.bench.deepep_smoke", allow_abbrev=False,
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for deepep_smoke.json")
    parser.add_argument("--tokens-per-rank", type=int, default=128,
                        help="tokens each rank holds (default 128)")
    args = parser.parse_args(argv)
    num_gpus = torch.cuda.device_count()
    if num_gpus < 1:
        print("deepep_smoke: error: no CUDA GPU visible; DeepEP runs on GPUs only", file=sys.stderr)
        return 2
    report = {"build": build_info(), "num_gpus": num_gpus,
              "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": []}
    print(json.dumps(report["build"]))
    todo = cases(num_gpus, args.tokens_per_rank)
    per_rank = run_ranks(equality_cases_worker, num_gpus, "nccl", args=(todo,), timeout_s=300)
    ok = True
    for i, case in enumerate(todo):
        results = [rank_results[i] for rank_results in per_rank]
        err = max(r["max_abs_err"] for r in results)
        bound = tolerance(case.dtype, max(r["ref_max_abs"] for r in results))
        conserved = all(r["conserve_min"] == r["conserve_max"] == case.config.top_k
                        for r in results)
        passed = err <= bound and conserved
        ok &= passed
        row = {"label": case.label, "mode": case.deepep_mode, "max_abs_err": err,
               "tolerance": bound, "conserved": conserved, "pass": passed,
               "pairs": [r["conserve_pairs"] for r in results]}
        report["cases"].append(row)
        print(f"{case.label}: max|EP - single| {err:.4g} (tolerance {bound:.3g}), "
              f"top-k conserved {conserved}: {'PASS' if passed else 'FAIL'}")
    if num_gpus not in NORMAL_MODE_RANKS:
        print(f"normal mode not run: DeepEP's intranode kernels need {NORMAL_MODE_RANKS} ranks, "
              f"this machine has {num_gpus} GPU(s)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "deepep_smoke.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
