"""epsim's own run of two one-node InferenceX deployments, request by request: where in a
benchmark run the simulator puts its TTFT, for the measured mean to be read against.

    python benchmarks/agg_first_wave.py

Simulates the 2026-03-25 1k/1k runs of two deployments at 4-64 clients as the silicon loop does
(`epsim.validate.silicon.run`: pass 0, then one benchmark run of 10 N requests from an idle
server) and splits epsim's TTFTs into the run's first wave (its first N requests) and the rest
(about a minute a row on one core; printed, not recorded). The rows are
`silicon_ttft_gap.entries`' (the whole-set record beside the silicon sample): validation data,
read as a diagnosis; nothing here sets a constant.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.report.summary import summarize  # noqa: E402
from epsim.sim import simulate  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import (  # noqa: E402
    RUN_REQUESTS_PER_CLIENT,
    RUN_SPAN_TRIES,
    closed_round,
    pass0,
)
from silicon_ttft_gap import entries  # noqa: E402

# the deployments (system, precision, layout as run) measured on 2026-03-25 at 1k/1k
FIRST_WAVE = (("h200_sxm", "fp8", "tp8 dp1 moe_tp8 ep1"), ("b200_sxm", "fp4", "tp4 dp1 moe_tp1 ep4"))


def _run_ttfts_ms(row) -> np.ndarray:
    """epsim's TTFT of each request of one InferenceX agg row's benchmark run, in arrival order
    (`couple`'s agg round: pass 0's TPOT, then `closed_round` from t=0, its span doubled until
    every request has its first token)."""
    (instance,) = plan_row(row).instances
    tpot_ms = summarize(simulate(scenario_from_dict(copy.deepcopy(pass0(instance)),
                                                    where="silicon row")))["tpot_ms"]["mean"]
    span = 1.0
    for _ in range(RUN_SPAN_TRIES):
        data = closed_round(instance, 0.0, tpot_ms * 1e-3, row.osl, 0.0, span)
        result = simulate(scenario_from_dict(copy.deepcopy(data), where="silicon row"))
        done = np.isfinite(result.first_token_s)
        if done.sum() >= data["workload"]["arrivals"]["num_requests"]:
            break
        span *= 2
    order = np.argsort(result.arrival_s[done], kind="stable")
    return ((result.first_token_s - result.arrival_s)[done] * 1e3)[order]


def first_wave() -> str:
    """FIRST_WAVE's 1k/1k runs of 2026-03-25 at 4-64 clients: measured mean TTFT; epsim's mean,
    first wave, rest and P99; and the first wave's mean the measured mean implies if the rest of
    the run were as epsim prices it (a 1/K of the run is its first wave)."""
    k = RUN_REQUESTS_PER_CLIENT["agg"]
    rows = {row.id: row for row in read_rows(default_csv_path())}
    lines = ["| system | layout | clients | measured mean ms | epsim mean ms | epsim first wave / "
             "rest ms | epsim P99 ms | first wave implied if the rest is epsim's, s |",
             "|---|---|---|---|---|---|---|---|"]
    picked = sorted((e for e in entries()
                     if (e["system"], e["precision"], e["layout_as_run"]) in FIRST_WAVE
                     and e["mode"] == "agg" and (e["isl"], e["osl"]) == (1024, 1024)
                     and e["day"] == "2026-03-25" and 4 <= e["concurrency"] <= 64),
                    key=lambda e: (FIRST_WAVE.index((e["system"], e["precision"],
                                                     e["layout_as_run"])), e["concurrency"]))
    for e in picked:
        t, n = _run_ttfts_ms(rows[e["id"]]), e["concurrency"]
        rest = float(t[n:].mean())
        implied_s = (e["measured_ttft_ms"] - (1 - 1 / k) * rest) * k / 1e3
        lines.append(f"| {e['system']} | {e['layout_as_run']} | {n} | {e['measured_ttft_ms']:.0f}"
                     f" | {t.mean():.0f} | {t[:n].mean():.0f} / {rest:.0f} | "
                     f"{np.percentile(t, 99):.0f} | {implied_s:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


if __name__ == "__main__":
    print(first_wave())
