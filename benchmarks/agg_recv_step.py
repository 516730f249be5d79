"""What steps epsim's agg TTFT up at 16 clients on the warmed B200 SGLang 0.5.9 rows at 1k
prompts: each term of the simulation turned off in turn, on the rows' own runs.

    python benchmarks/agg_recv_step.py [--write]

epsim's predicted TTFT of these rows jumps from 8 to 16 clients (FP4 TP8/EP8 1k/1k: 127 -> 284
ms in the whole-set record) and rises little from 16 to 32. Two inputs of the simulation change
at 16 clients besides the load, both from the rows' launch script
(`benchmarks/single_node/dsr1_fp{4,8}_b200.sh`, `if [[ $CONC -ge 16 ]]`) and the harness:
`--scheduler-recv-interval` 10 -> 30 (`epsim.sim.recv`), and the paged allocator's compile key
(`epsim.sim.first_use_alloc`: its `max_num_extend_tokens` constexpr is the warm-up's largest
batch, 2N prompts sent N at a time, so 8k at 8 clients and 16k from 16 on; a new key then
compiles 0.12 or 0.26 s). Each row is predicted as `epsim validate --silicon` predicts it
(`epsim.validate.silicon.run.couple`, main's code) as mapped, then with the first-use compile
term off, with the receive interval at 10 (rows at 16+ clients), and with no receive skipper
(interval 1): the difference is that term's share of the mean TTFT. A last column is a what-if,
not a model: the eager prefill's host at PR #12160's 1,354 us a MoE layer
(`benchmarks/forward_host_whatif.py`), the floor's unsettled candidate, to show the shape such a
per-forward term takes over the clients. The split of the mapped run
into its first wave (the first N requests) and the rest is epsim's own run, request by request
(`agg_first_wave`'s way). Measured TTFT beside it: validation data, read as a diagnosis; nothing
here sets a constant. About 10 s a row and variant on one core.
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import numpy as np
from forward_host_whatif import _per_layer
from recorded import recorded_main
from silicon_ttft_gap import entries

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import epsim.cost.model as cost_model  # noqa: E402
from epsim.cost.forward_host import forward_host  # noqa: E402
from epsim.report.summary import summarize  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import (  # noqa: E402
    RUN_SPAN_TRIES,
    _simulation,
    closed_round,
    couple,
    pass0,
)

RESULTS = ROOT / "benchmarks" / "results" / "agg_recv_step.md"
CLIENTS = (4, 8, 16, 32)
HOST_LAYER = "host_layer_us"     # not a deployment key: `forward_host_whatif`'s per-layer host
# the variants: name -> deployment keys replaced (None: removed), and the least clients it runs at
VARIANTS = {
    "as mapped": ({}, 0),
    "no compile term": ({"first_use_compile": None}, 0),
    "recv 10": ({"scheduler_recv_interval": 10}, 16),
    "recv 1": ({"scheduler_recv_interval": 1}, 0),
    # a what-if, not a model: the eager prefill's host at PR #12160's per-layer figure
    # (`benchmarks/forward_host_whatif.py`; docs/silicon.md "The eager host: per launch or per layer?")
    "host 1,354 us a layer": ({HOST_LAYER: 1354.0}, 0),
}


def picked() -> list[dict]:
    """The warmed B200 SGLang 0.5.9 agg runs at 1k prompts and 4-32 clients, each once (the
    whole-set record's `entries`), by precision, layout, OSL and clients."""
    rows = [e for e in entries() if e["system"] == "b200_sxm" and e["mode"] == "agg"
            and e["version"] == "0.5.9" and e["isl"] == 1024 and e["concurrency"] in CLIENTS
            and e["mtp"] == "off"]
    return sorted(rows, key=lambda e: (e["precision"], e["layout_as_run"], e["osl"],
                                       e["concurrency"], e["measured_ttft_ms"]))


def _instance(row, changes: dict):
    (instance,) = plan_row(row).instances
    deployment = instance.data["deployment"]
    for key, value in changes.items():
        if value is None:
            deployment.pop(key, None)
        else:
            deployment[key] = value
    return instance


def predicted_ms(row, changes: dict) -> float:
    """The row's predicted mean TTFT (ms) with `changes` to its mapped deployment (`HOST_LAYER`:
    the eager prefill's host a MoE layer, `forward_host_whatif`'s way)."""
    changes = dict(changes)
    layer_us = changes.pop(HOST_LAYER, None)
    instance = _instance(row, changes)
    if layer_us is None:
        return couple([instance], row.osl)["ttft_ms"]
    cost_model.forward_host = _per_layer(layer_us)
    try:
        return couple([instance], row.osl)["ttft_ms"]
    finally:
        cost_model.forward_host = forward_host


def split_ms(row) -> tuple[float, float, float]:
    """epsim's own benchmark run of the mapped row: mean TTFT of all, of the first wave (the
    first N requests by arrival) and of the rest (ms)."""
    instance = _instance(row, {})
    tpot_ms = summarize(_simulation(pass0(instance), instance).run())["tpot_ms"]["mean"]
    span = 1.0
    for _ in range(RUN_SPAN_TRIES):
        data = closed_round(instance, 0.0, tpot_ms * 1e-3, row.osl, 0.0, span)
        result = _simulation(copy.deepcopy(data), instance).run()
        done = np.isfinite(result.first_token_s)
        if done.sum() >= data["workload"]["arrivals"]["num_requests"]:
            break
        span *= 2
    order = np.argsort(result.arrival_s[done], kind="stable")
    ttft = ((result.first_token_s - result.arrival_s)[done] * 1e3)[order]
    n = instance.clients
    return float(ttft.mean()), float(ttft[:n].mean()), float(ttft[n:].mean())


def table() -> str:
    """One line a run: measured and predicted TTFT, each term's share, the first wave / rest."""
    rows = {row.id: row for row in read_rows(default_csv_path())}
    names = list(VARIANTS)
    lines = ["| precision | layout as run | OSL | clients | recv interval | measured ms | "
             + " | ".join(f"{n} ms" for n in names) + " | epsim's own run: all / first wave / rest ms |",
             "|---|---|---|---|---|---|" + "---|" * len(names) + "---|"]
    for e in picked():
        row = rows[e["id"]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            interval = _instance(row, {}).data["deployment"].get("scheduler_recv_interval") or 1
            cells = [f"{predicted_ms(row, changes):.0f}" if e["concurrency"] >= least else "-"
                     for changes, least in VARIANTS.values()]
            every, wave, rest = split_ms(row)
        lines.append(f"| {e['precision']} | {e['layout_as_run']} | {e['osl']} | {e['concurrency']} | "
                     f"{interval} | {e['measured_ttft_ms']:.0f} | " + " | ".join(cells)
                     + f" | {every:.0f} / {wave:.0f} / {rest:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "What steps the agg TTFT up at 16 clients",
                         "python benchmarks/agg_recv_step.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
