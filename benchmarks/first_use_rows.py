"""First-use compiles inside the measured run: epsim's TTFT with and without the term on the
silicon rows it applies to at 1-8 clients (DeepSeek-R1 FP8 on H200, SGLang, InferenceX agg).

    python benchmarks/first_use_rows.py [--write]
    python benchmarks/first_use_rows.py --compile-s 1.22     # priced at another compile time

Per row: the measured mean TTFT; epsim's prediction (`epsim.validate.silicon.run.predict`, as
`epsim validate --silicon` makes it) without `deployment.first_use_compile` (before) and with
it (after, `epsim.validate.silicon.first_use`: the compile time measured by
`benchmarks/first_use_compile_aot.py`, our record); and, from one simulated benchmark run of the
row as the silicon loop runs it (`closed_round` after pass 0), the kernels compiled inside the
run, the seconds the steps waited for them, and the run's P99 TTFT (InferenceX's issue 870
reports P99 TTFT 1,975 ms against a mean of 331 ms at 8 clients for this deployment, 1k/1k,
SGLang 0.5.7: a published figure, read here, never fitted). The silicon sample is validation
data: nothing here sets a constant; the term's only number is the measured compile time.
"""

from __future__ import annotations

import copy
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.report.summary import summarize  # noqa: E402
from epsim.sim import Simulation, simulate  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.first_use import first_use_compile  # noqa: E402
from epsim.validate.silicon.mapping import inferencex_harness, plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import RUN_SPAN_TRIES, closed_round, pass0, predict  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "first_use_rows.md"
FEW_CLIENTS = 8


def _with_compile_s(plan, compile_s: float | None):
    """The plan with every instance's first-use term priced at `compile_s` seconds a kernel, or
    taken off (None)."""
    instances = []
    for inst in plan.instances:
        data = copy.deepcopy(inst.data)
        if compile_s is None:
            data["deployment"].pop("first_use_compile", None)
        elif "first_use_compile" in data["deployment"]:
            data["deployment"]["first_use_compile"]["compile_s"] = compile_s
        instances.append(replace(inst, data=data))
    return replace(plan, instances=tuple(instances))


def _one_run(plan, osl: int) -> tuple[int, float, float]:
    """(kernels compiled, seconds waited, P99 TTFT ms) of one simulated benchmark run."""
    (instance,) = plan.instances
    tpot_ms = summarize(simulate(scenario_from_dict(copy.deepcopy(pass0(instance)),
                                                    where="silicon row")))["tpot_ms"]["mean"]
    span = 1.0
    for _ in range(RUN_SPAN_TRIES):
        data = closed_round(instance, 0.0, tpot_ms * 1e-3, osl, 0.0, span)
        sim = Simulation(scenario_from_dict(copy.deepcopy(data), where="silicon row"))
        result = sim.run()
        done = np.isfinite(result.first_token_s)
        if done.sum() >= data["workload"]["arrivals"]["num_requests"]:
            break
        span *= 2
    ttft_ms = (result.first_token_s - result.arrival_s)[done] * 1e3
    fu = sim.first_use
    return fu.num_compiles, fu.stalled_us * 1e-6, float(np.percentile(ttft_ms, 99))


def table(compile_s: float | None = None) -> str:
    """The rows' table; `compile_s`: price the term at that many seconds a kernel instead of the
    shipped `COMPILE_S` (e.g. the GPU host's 8-rank figure, 1.22 s: gpu_h100_records.jsonl)."""
    rows = [r for r in read_rows(default_csv_path())
            if inferencex_harness(r) and r.concurrency is not None and r.concurrency <= FEW_CLIENTS
            and (term := first_use_compile(r)) is not None
            and "kernel" not in term]          # the Triton fused MoE's (the FMHA build: first_use_fmha_rows)
    rows.sort(key=lambda r: (r.isl, r.osl, r.concurrency, r.id))
    lines = ["| row | ISL/OSL | clients | measured ms | before ms | after ms | kernels compiled "
             "in the run | waited s | P99 after ms |", "|---|---|---|---|---|---|---|---|---|"]
    errs_before, errs_after = [], []
    for row in rows:
        plan = plan_row(row)
        if compile_s is not None:
            plan = _with_compile_s(plan, compile_s)
        after = predict(plan)
        before = predict(_with_compile_s(plan, None))
        if after["status"] != "predicted" or before["status"] != "predicted":
            lines.append(f"| {row.id} | {row.isl}/{row.osl} | {row.concurrency} | "
                         f"{row.ttft_ms:.0f} | {before['status']} | {after['status']} | | | |")
            continue
        compiled, waited_s, p99 = _one_run(plan, row.osl)
        errs_before.append(abs(before["ttft_ms"] / row.ttft_ms - 1))
        errs_after.append(abs(after["ttft_ms"] / row.ttft_ms - 1))
        lines.append(f"| {row.id} | {row.isl}/{row.osl} | {row.concurrency} | {row.ttft_ms:.0f} | "
                     f"{before['ttft_ms']:.0f} | {after['ttft_ms']:.0f} | {compiled} | "
                     f"{waited_s:.1f} | {p99:.0f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    if errs_before:
        lines += ["", f"TTFT MAPE over {len(errs_before)} rows: before "
                  f"{100 * statistics.mean(errs_before):.1f} %, after "
                  f"{100 * statistics.mean(errs_after):.1f} %."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    check = lambda v: "" if v > 0 else f"--compile-s ({v}) must be > 0"
    return recorded_main(argv, __doc__, RESULTS, "First-use compiles in the measured run",
                         "python benchmarks/first_use_rows.py --write", table,
                         ("--compile-s", "price each kernel's compile at this many seconds "
                          "(printed only)", check))


if __name__ == "__main__":
    sys.exit(main())
