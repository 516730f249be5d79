"""The serving numbers of a run, defined once: offered, served and finished requests per second
over the measurement window, and what "saturated by design" means. `epsim simulate`'s summary
(CLI and `summary.json`), the plan's answers, the scenario scripts and the app all take their
words and numbers from here.

- offered: requests arriving in the window, per second (the load the instance is given);
- served: requests getting their first token in the window, per second (taken into service;
  keep-up compares it with offered, `epsim.report.keep_up`);
- finished: requests arriving in the window that also finished in it, per second. A window
  shorter than the outputs bounds it, so it is no capacity: an instance serving its whole load
  finishes few requests in a window shorter than a request's life.

Saturated by design: every rank starts with a full batch (`initial_running_per_rank` =
`max_running_requests`) and arrivals outpace completions, so batches stay full for the whole
run. Such a run does not keep up, on purpose: it answers with throughput at a full batch, not a
serving rate.
"""

from __future__ import annotations

from epsim.text import brief

SATURATED_BY_DESIGN = "saturated by design"
DEFINITIONS = {
    "offered_rps": "requests arriving in the measurement window, per second",
    "served_rps": "requests getting their first token in the window, per second (keep-up "
                  "compares it with offered)",
    "finished_rps": "requests arriving in the window that also finished in it, per second "
                    "(bounded by the window's length against the outputs', not a capacity)",
}


def full_start(scenario: dict) -> bool:
    """Whether every rank starts with a full batch (a scenario as `summary["scenario"]`)."""
    per_rank = scenario["workload"].get("initial_running_per_rank")
    return isinstance(per_rank, int) and per_rank >= scenario["deployment"]["max_running_requests"]


def saturated_text(served_rps: float, offered_rps: float) -> str:
    """The one way every output says it: `saturated by design, full batches (serves 122.1 of
    the 4061 req/s offered): a throughput answer, not a serving rate`."""
    return (f"{SATURATED_BY_DESIGN}, full batches (serves {brief(served_rps, 4)} of the "
            f"{brief(offered_rps, 4)} req/s offered): a throughput answer, not a serving rate")


def label_saturated(keep: dict, scenario: dict) -> dict:
    """`keep` (a keep-up verdict, `epsim.report.keep_up.keep_up`) with `saturated_by_design`
    set, and its verdict in those words when the run falls behind only because it was built to
    (`full_start`); `ok` is unchanged: such a run does not keep up."""
    saturated = bool(full_start(scenario) and not keep["ok"] and keep["offered_rps"] > 0)
    keep = {**keep, "saturated_by_design": saturated}
    if saturated:
        keep["verdict"] = saturated_text(keep["served_rps"], keep["offered_rps"])
    return keep


def serving(summary: dict) -> dict:
    """The `serving` block of `summary.json`: offered, served and finished requests per second
    and their definitions (`DEFINITIONS`)."""
    keep = summary["keep_up"]
    return {"offered_rps": keep["offered_rps"], "served_rps": keep["served_rps"],
            "finished_rps": summary["requests_per_s"], "definitions": dict(DEFINITIONS)}


def requests_line(summary: dict) -> str:
    """The CLI's `requests` line: offered, served and finished with the counts behind them, and
    why finished can lie far below served."""
    n, s = summary["num_requests"], summary["serving"]
    window_s = summary["sim_seconds"] - summary["warmup_s"]
    unfinished = n["measured"] - n["finished"]
    text = (f"{n['measured']} arrived in the {window_s:g} s window after the {summary['warmup_s']:g} s "
            f"warm-up (the latencies below are theirs): offered {brief(s['offered_rps'], 3)}/s, "
            f"served {brief(s['served_rps'], 3)}/s (first token in the window), finished "
            f"{brief(s['finished_rps'], 3)}/s ({n['finished']} of them")
    if unfinished:
        text += (f"; {unfinished} in service or waiting at the end: the window bounds finished, "
                 f"not capacity")
    return text + ")" + (f", {n['lost']} lost" if n.get("lost") else "")
