"""epsim's timeline of one agg silicon row's benchmark run: how its prefill steps interleave with
its decode (verify) cycles, what each costs, and what share of the TPOT they make (issue 39).

The row is planned (`plan_row`) and its benchmark run simulated as `epsim validate` runs it
(`epsim.validate.silicon.run.closed_round` at the record's predicted TTFT and TPOT, one
`Simulation`); the steps starting in the middle half of the run (past the first wave's burst,
before the last wave thins) are read from the run's step table (`Metrics.rows`). The measured
columns (validation data, never fitted) read the row's closed loop by Little's law: requests a
second = clients / (TTFT + (OSL - 1) x TPOT), the prompt tokens a second that rate sends, and the
running requests = clients less those waiting out the TTFT; then, if epsim's decode cycle at
that batch were right, what a prompt token would have cost, and if epsim's prefill were right,
what a decode cycle would have cost (a diagnostic reading of the measured figures only).
"""

from __future__ import annotations

import numpy as np

from epsim.report import summarize
from epsim.sim.metrics import STEP_COLUMNS
from epsim.validate.silicon import run as silicon_run
from epsim.validate.silicon.mapping import plan_row

COLUMN = {name: i for i, name in enumerate(STEP_COLUMNS)}
WINDOW = (0.25, 0.75)          # the share of the run's span whose steps are read


def timeline(row, predicted: dict, span: float = 1.0) -> dict:
    """The middle of one agg row's simulated benchmark run, by step kind.

    Args:
        row: the `SiliconRow` (agg).
        predicted: the record's `{"ttft_ms", "tpot_ms"}` for the row (sizes the run's window).
        span: the share of the run's window simulated (1: the whole run; less for a long row).
    Returns:
        `{"cycles", "prefills", "prefill_per_cycle", "cycle_ms", "prefill_ms", "prefill_tokens",
        "prefill_us_per_token", "prefill_draft_ms", "prefill_share", "running", "waiting",
        "tpot_ms", "ttft_ms"}`: steps in the window, mean step times (ms), prefill tokens a
        prefill step, its draft extend (ms), the prefill steps' share of the window's time, and
        the run's TTFT and TPOT (ms).
    """
    plan = plan_row(row, approximate=True)
    instance = plan.instances[0]
    data = silicon_run.closed_round(instance, predicted["ttft_ms"] * 1e-3,
                                    predicted["tpot_ms"] * 1e-3, row.osl)
    data["workload"]["duration_s"] *= span
    sim = silicon_run._simulation(data, instance)
    summary = summarize(sim.run())
    steps = np.asarray([r[:len(STEP_COLUMNS)] for r in sim.metrics.rows], dtype=np.float64)
    start, step_us = steps[:, COLUMN["start_us"]], steps[:, COLUMN["step_us"]]
    lo, hi = WINDOW[0] * start.max(), WINDOW[1] * start.max()
    window = (start >= lo) & (start < hi)
    prefill = window & (steps[:, COLUMN["is_prefill"]] > 0)
    cycle = window & ~prefill
    tokens = steps[prefill, COLUMN["prefill_tokens"]]
    return {
        "cycles": int(cycle.sum()), "prefills": int(prefill.sum()),
        "prefill_per_cycle": prefill.sum() / max(cycle.sum(), 1),
        "cycle_ms": step_us[cycle].mean() * 1e-3,
        "prefill_ms": step_us[prefill].mean() * 1e-3 if prefill.any() else 0.0,
        "prefill_tokens": tokens.mean() if prefill.any() else 0.0,
        "prefill_us_per_token": step_us[prefill].sum() / max(tokens.sum(), 1.0),
        "prefill_draft_ms": steps[prefill, COLUMN["draft_us"]].mean() * 1e-3 if prefill.any() else 0.0,
        "prefill_share": step_us[prefill].sum() / step_us[window].sum(),
        "running": steps[window, COLUMN["num_running"]].mean(),
        "waiting": steps[window, COLUMN["num_waiting"]].mean(),
        "tpot_ms": summary["tpot_ms"]["mean"], "ttft_ms": summary["ttft_ms"]["mean"],
    }


def measured_loop(row, accept: float, epsim: dict) -> dict:
    """The row's measured closed loop by Little's law (module doc), against `epsim`'s timeline.

    Args:
        accept: epsim's accept length (tokens a verify cycle; 1 without a draft).
    Returns:
        `{"requests_per_s", "prompt_tokens_per_s", "running", "cycles_per_s",
        "prefill_us_per_token_if_cycle", "cycle_ms_if_prefill"}` (the last two: what the
        measured loop implies for one side if epsim's other side were right).
    """
    mean_isl, mean_osl = 0.9 * row.isl, 0.9 * row.osl          # uniform in [0.8 L, L]
    cycle_s = (row.ttft_ms + (mean_osl - 1) * row.tpot_ms) * 1e-3
    rate = row.concurrency / cycle_s
    running = row.concurrency - rate * row.ttft_ms * 1e-3
    prompt_rate = rate * mean_isl
    cycles_per_s = rate * mean_osl / (accept * running)
    decode_s = cycles_per_s * epsim["cycle_ms"] * 1e-3
    prefill_s = prompt_rate * epsim["prefill_us_per_token"] * 1e-6
    return {"requests_per_s": rate, "prompt_tokens_per_s": prompt_rate, "running": running,
            "cycles_per_s": cycles_per_s,
            "prefill_us_per_token_if_cycle": (1.0 - decode_s) / prompt_rate * 1e6,
            "cycle_ms_if_prefill": (1.0 - prefill_s) / cycles_per_s * 1e3}


def timeline_table(rows: dict, record: dict, picks: list[tuple[str, float, float]]) -> list[str]:
    """Markdown rows of `timeline` and `measured_loop` for `picks` [(row id, span, accept)]."""
    lines = ["| row | clients | epsim TPOT / measured | cycles | prefills a cycle | cycle ms | "
             "prefill ms | its tokens | µs a token | its draft extend ms | prefill share | "
             "running (epsim / measured) | measured: µs a prompt token if epsim's cycle | "
             "measured: cycle ms if epsim's prefill |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for row_id, span, accept in picks:
        row = rows[row_id]
        t = timeline(row, record[row_id]["epsim"], span)
        m = measured_loop(row, accept, t)
        lines.append(
            f"| `{row_id[row_id.index('_agg_') + 1:]}` | {row.concurrency} | {t['tpot_ms']:.1f} / {row.tpot_ms:.1f} | "
            f"{t['cycles']} | {t['prefill_per_cycle']:.3f} | {t['cycle_ms']:.1f} | "
            f"{t['prefill_ms']:.1f} | {t['prefill_tokens']:.0f} | {t['prefill_us_per_token']:.1f} | "
            f"{t['prefill_draft_ms']:.2f} | {t['prefill_share']:.2f} | "
            f"{t['running']:.0f} / {m['running']:.0f} | {m['prefill_us_per_token_if_cycle']:.1f} | "
            f"{m['cycle_ms_if_prefill']:.1f} |")
    return lines
