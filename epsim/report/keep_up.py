"""Does the instance keep up with its offered load? The first question before any latency.

Over the measurement window (`warmup_s` to the end):

- offered = requests arriving in the window per second (requests lost to a failure before
  their first token leave the count: they are reported as lost, not as unserved);
- served = requests getting their first token in the window per second (a request is in
  service from its first token; what it still needs is then bounded by its output length);
- backlog(t) = arrived - got a first token by t; its growth over the window's second half is
  a least-squares slope (requests/s). A queue in steady state wanders around a level; one that
  grows means the instance serves less than it is offered.

An instance keeps up when served >= `MIN_SERVED_FRAC` of offered and the backlog grows by less
than `MAX_GROWTH_FRAC` of the offered rate (and, when a TTFT target is given, TTFT p99 meets
it; `epsim.plan` adds that from its constraints). `summarize` puts the verdict in `keep_up`.
"""

from __future__ import annotations

from epsim.commands.output import brief

import numpy as np

MIN_SERVED_FRAC = 0.97
MAX_GROWTH_FRAC = 0.03
RULE = (f"served >= {MIN_SERVED_FRAC:.0%} of offered and backlog growing < "
        f"{MAX_GROWTH_FRAC:.0%} of offered over the window's second half")


def backlog_growth_rps(arrival_s: np.ndarray, first_token_s: np.ndarray, start_s: float,
                       end_s: float, num_samples: int = 64) -> float:
    """Least-squares slope (requests/s) of arrived-minus-started over [mid, end] of the window.

    Args:
        arrival_s, first_token_s: [requests] s (NaN first token: still waiting).
    """
    mid = (start_s + end_s) / 2.0
    if not end_s > mid:
        return 0.0
    t = np.linspace(mid, end_s, num_samples)
    arrived = np.searchsorted(np.sort(arrival_s), t, side="right")
    first = np.sort(first_token_s[np.isfinite(first_token_s)])
    backlog = arrived - np.searchsorted(first, t, side="right")
    return float(np.polyfit(t, backlog.astype(np.float64), 1)[0])


def keep_up(arrival_s: np.ndarray, first_token_s: np.ndarray, is_initial: np.ndarray,
            lost: np.ndarray, start_s: float, end_s: float, ttft_p99_ms: float | None = None,
            ttft_target_ms: float | None = None) -> dict:
    """The keep-up verdict of one run's window.

    Args:
        arrival_s, first_token_s, is_initial, lost: [requests] as in `SimResult`.
        start_s, end_s: the measurement window (s).
        ttft_target_ms: TTFT p99 bound that is part of the verdict (None: no TTFT condition).
    Returns:
        `offered_rps`, `served_rps`, `served_frac`, `backlog_growth_rps`, `ttft_target_ms`,
        `ok` (bool), `verdict` (one line), `rule`.
    """
    window_s = end_s - start_s
    counted = ~is_initial & ~(lost & ~np.isfinite(first_token_s))   # lost unserved: reported apart
    arrival, first = arrival_s[counted], first_token_s[counted]
    offered = int(((arrival >= start_s) & (arrival < end_s)).sum())
    served = int(((first >= start_s) & (first <= end_s)).sum())
    growth = backlog_growth_rps(arrival, first, start_s, end_s)
    offered_rps, served_rps = offered / window_s, served / window_s
    out = {"offered_rps": offered_rps, "served_rps": served_rps,
           "served_frac": served / offered if offered else None,
           "backlog_growth_rps": growth, "ttft_target_ms": ttft_target_ms, "rule": RULE}
    reasons = []
    if offered and served < MIN_SERVED_FRAC * offered:
        reasons.append(f"serves {brief(served_rps, 3)} of {brief(offered_rps, 3)} req/s")
    if offered and growth > MAX_GROWTH_FRAC * offered_rps:
        reasons.append(f"waiting requests grow {brief(growth, 3)}/s")
    if ttft_target_ms is not None and not (ttft_p99_ms is not None and ttft_p99_ms <= ttft_target_ms):
        shown = "-" if ttft_p99_ms is None else f"{brief(ttft_p99_ms, 4)} ms"
        reasons.append(f"TTFT p99 {shown} > {ttft_target_ms:g} ms")
    out["ok"] = not reasons
    if not offered:
        out["verdict"] = "no request arrived in the measurement window: keep-up not judged"
    elif reasons:
        out["verdict"] = f"{'; '.join(reasons)}: overloaded"
    else:
        out["verdict"] = (f"serves {brief(served_rps, 3)} of {brief(offered_rps, 3)} req/s: keeps up "
                          f"(margin {margin_text(out)})")
    return out


def margin_text(verdict: dict) -> str:
    """How far a verdict is from the rule: `served 99.9 % (>= 97 %), backlog +0.01/s (< 1.8/s)`."""
    frac = verdict.get("served_frac")
    served = "-" if frac is None else f"{frac * 100:.1f} %"
    limit = MAX_GROWTH_FRAC * verdict.get("offered_rps", 0.0)
    return (f"served {served} (>= {MIN_SERVED_FRAC:.0%}), backlog "
            f"{verdict.get('backlog_growth_rps', 0.0):+.2g}/s (< {limit:.2g}/s)")
