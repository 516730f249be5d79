"""The eager prefill forward's host time (`epsim.cost.forward_host`) on the silicon rows at 1-8
clients: what the count prices a forward at, what of it outlasts the device time, and epsim's
TTFT and TPOT without and with the term (`deployment.eager_prefill_host`).

    python benchmarks/prefill_forward_host.py [--write]
    python benchmarks/prefill_forward_host.py --high 24     # a sample of rows at 32+ clients

The rows are `silicon_ttft_gap.py`'s: every run at 1-8 clients epsim predicts as stated, a run
the sample holds twice counted once. Per row: the (prefill) instance's forward of one prompt of
the row's ISL (`epsim.sim.steady.SteadyStateModel.prefill_s`, its drawn length) as epsim prices
it (device, with the host terms its profile already has), the counted host time of that forward
and what of it outlasts the device; epsim's prediction (`epsim.validate.silicon.run.predict`, as
`epsim validate --silicon` makes it) without the term (before, what the shipped flags give) and
with it (after). The sample is validation data: the term's numbers are a count from SGLang's
source and one measured launch; nothing here sets a constant. `--high N` prints the same for N
DeepSeek rows at 32 clients or more (a fixed spread over system, mode and prompt), not recorded.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from recorded import recorded_main
from silicon_ttft_gap import FEW_CLIENTS, entries

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.cost.ledger import COLUMN  # noqa: E402
from epsim.sim.steady import SteadyStateModel  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import pass0, predict  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "prefill_forward_host.md"
HIGH_CLIENTS = 32


def _with_term(plan, on: bool):
    """The plan with every instance's `deployment.eager_prefill_host` set to `on`."""
    instances = []
    for inst in plan.instances:
        data = copy.deepcopy(inst.data)
        data["deployment"]["eager_prefill_host"] = on
        instances.append(replace(inst, data=data))
    return replace(plan, instances=tuple(instances))


def _forward_ms(plan, isl: int) -> tuple[float, float, float]:
    """(device, host, exposed) ms of the prefill instance's forward of one prompt of `isl`."""
    (inst,) = [i for i in _with_term(plan, True).instances if i.role != "decode"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steady = SteadyStateModel(scenario_from_dict(copy.deepcopy(pass0(inst)), where="row"))
    cm = steady.cost_model
    if cm.forward_host is None:
        return float("nan"), float("nan"), float("nan")
    with_host = steady.prefill_s(isl) * 1e3
    exposed = sum(float(v[COLUMN["forward_host"]]) / n for v, n in
                  zip(cm.ledger.sums.values(), cm.ledger.steps.values())) * 1e-3
    return with_host - exposed, cm.forward_host.host_us * 1e-3, exposed


def table(rows_of: list[dict]) -> str:
    rows = {r.id: r for r in read_rows(default_csv_path())}
    lines = ["| system | precision | layout | ISL/OSL | clients | measured TTFT ms | before | "
             "after | forward device / host / exposed ms | measured TPOT ms | before | after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    err = {"ttft_before": [], "ttft_after": [], "tpot_before": [], "tpot_after": []}
    gaps_before, gaps_after = [], []
    for e in rows_of:
        row = rows[e["id"]]
        plan = plan_row(row)
        before, after = predict(_with_term(plan, False)), predict(_with_term(plan, True))
        if "predicted" not in (before["status"], after["status"]):
            continue
        device, host, exposed = _forward_ms(plan, row.isl)
        for name, entry in (("before", before), ("after", after)):
            err[f"ttft_{name}"].append(abs(entry["ttft_ms"] / row.ttft_ms - 1))
            err[f"tpot_{name}"].append(abs(entry["tpot_ms"] / row.tpot_ms - 1))
        gaps_before.append(row.ttft_ms - before["ttft_ms"])
        gaps_after.append(row.ttft_ms - after["ttft_ms"])
        lines.append(f"| {row.system} | {e['precision']} | {e['layout_as_run']} | {row.isl}/"
                     f"{row.osl} | {row.concurrency} | {row.ttft_ms:.0f} | "
                     f"{before['ttft_ms']:.0f} | {after['ttft_ms']:.0f} | {device:.0f} / "
                     f"{host:.0f} / {exposed:.0f} | {row.tpot_ms:.2f} | {before['tpot_ms']:.2f} | "
                     f"{after['tpot_ms']:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    n = len(gaps_before)
    if n:
        mape = {k: 100 * statistics.mean(v) for k, v in err.items()}
        lines += ["", f"Over {n} rows: TTFT MAPE {mape['ttft_before']:.1f} % before, "
                  f"{mape['ttft_after']:.1f} % after; TPOT MAPE {mape['tpot_before']:.1f} % before, "
                  f"{mape['tpot_after']:.1f} % after; the TTFT gap (measured - predicted) median "
                  f"{statistics.median(gaps_before):.0f} ms before, "
                  f"{statistics.median(gaps_after):.0f} ms after."]
    return "\n".join(lines)


def few_rows() -> list[dict]:
    picked = [e for e in entries() if e["concurrency"] <= FEW_CLIENTS
              and e["status"] == "predicted"]
    return sorted(picked, key=lambda e: (e["system"], e["mode"], e["precision"], e["isl"],
                                         e["osl"], e["concurrency"], e["id"]))


def high_rows(n: int) -> list[dict]:
    """`n` DeepSeek rows at HIGH_CLIENTS clients or more, spread over (system, mode, ISL): the
    groups in turn, each group's rows by clients."""
    groups: dict[tuple, list[dict]] = {}
    for e in entries():
        if (e["concurrency"] >= HIGH_CLIENTS and e["status"] == "predicted"
                and e["model"] == "DeepSeek-V3"):
            groups.setdefault((e["system"], e["mode"], e["isl"]), []).append(e)
    for rows in groups.values():
        rows.sort(key=lambda e: (e["concurrency"], e["id"]))
    out, depth = [], 0
    while len(out) < n and any(depth < len(g) for g in groups.values()):
        out += [g[depth] for _, g in sorted(groups.items()) if depth < len(g)]
        depth += 1
    return out[:n]


def main(argv: list[str] | None = None) -> int:
    high = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    high.add_argument("--high", type=int, default=None,
                      help=f"print N rows at {HIGH_CLIENTS}+ clients instead (not recorded)")
    known, rest = high.parse_known_args(argv)
    if known.high is not None:
        if known.high <= 0:
            high.error(f"--high ({known.high}) must be > 0")
        print(table(high_rows(known.high)))
        return 0
    return recorded_main(rest, __doc__, RESULTS, "The eager prefill forward's host time",
                         "python benchmarks/prefill_forward_host.py --write",
                         lambda: table(few_rows()))


if __name__ == "__main__":
    sys.exit(main())
