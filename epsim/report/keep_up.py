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

Settled: whether the window saw the steady state at all. A request that arrives either waits
(the backlog) or runs (the batch); in a steady state neither accumulates. A run that starts
empty fills its running batch over about a request's lifetime (longer near capacity, where each
extra request in the batch slows the step enough to keep another one in flight), which can
outlast a short run: no request waits, so the run keeps up, but its batch, step time and TPOT
are still growing toward a steady state it never reaches. `running_growth_rps` is the
least-squares slope of the running requests over the window's second half; beyond
`MAX_RUNNING_GROWTH_FRAC` of the offered rate either way (the batch still absorbs, or gives
back, that share of the arrivals), and beyond what arrival noise gives a steady batch
(`NOISE_SIGMAS` standard deviations of the slope of a queue fed and drained at the offered
rate: over a half-window of T s its count wanders like a random walk of variance 2 lam per
second, whose least-squares slope has variance 1.2 * 2 lam / T), the verdict says the window
is not steady (`settled` False) and what to do. It does not change `ok`: such a run's
latencies are a lower bound on the steady ones (a filling batch) or an upper bound (a draining
one).

A closed loop (`concurrency` arrivals) offers what it is served: each client sends its next
request when its last one ends, so its backlog is bounded by its clients and cannot grow. It
keeps up by construction (`ok` unless a TTFT target fails); the verdict gives the rate its
clients drive and how many of them waited for a slot.
"""

from __future__ import annotations

import math

from epsim.text import brief

import numpy as np

MIN_SERVED_FRAC = 0.97
MAX_GROWTH_FRAC = 0.03
MAX_RUNNING_GROWTH_FRAC = 0.10
NOISE_SIGMAS = 3.0
RULE = (f"served >= {MIN_SERVED_FRAC:.0%} of offered and backlog growing < "
        f"{MAX_GROWTH_FRAC:.0%} of offered over the window's second half")
SETTLED_RULE = (f"running requests growing or shrinking < {MAX_RUNNING_GROWTH_FRAC:.0%} of offered "
                f"(or < {NOISE_SIGMAS:g} sigma of arrival noise) over the window's second half")


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


def running_growth_rps(step_start_s: np.ndarray, num_running: np.ndarray, start_s: float,
                       end_s: float) -> float | None:
    """Least-squares slope (requests/s) of the running requests over [mid, end] of the window;
    None with fewer than 3 steps there.

    Args:
        step_start_s, num_running: [steps] each step's start (s) and requests running after it.
    """
    mid = (start_s + end_s) / 2.0
    t = np.asarray(step_start_s, dtype=np.float64)
    late = (t >= mid) & (t <= end_s)
    if late.sum() < 3 or np.ptp(t[late]) <= 0:
        return None
    return float(np.polyfit(t[late], np.asarray(num_running, dtype=np.float64)[late], 1)[0])


def keep_up(arrival_s: np.ndarray, first_token_s: np.ndarray, is_initial: np.ndarray,
            lost: np.ndarray, start_s: float, end_s: float, ttft_p99_ms: float | None = None,
            ttft_target_ms: float | None = None, step_start_s: np.ndarray | None = None,
            num_running: np.ndarray | None = None, clients: int | None = None) -> dict:
    """The keep-up verdict of one run's window.

    Args:
        arrival_s, first_token_s, is_initial, lost: [requests] as in `SimResult`.
        start_s, end_s: the measurement window (s).
        ttft_target_ms: TTFT p99 bound that is part of the verdict (None: no TTFT condition).
        step_start_s, num_running: [steps] the step table's start (s) and running requests,
            for `settled` (None: not judged, `settled` True).
        clients: a closed loop's clients (None: open-loop arrivals); see the module doc.
    Returns:
        `offered_rps`, `served_rps`, `served_frac`, `backlog_growth_rps`, `ttft_target_ms`,
        `ok` (bool), `running_growth_rps` (None: not judged), `settled` (bool), `verdict`
        (one line), `rule`, `settled_rule`.
    """
    window_s = end_s - start_s
    counted = ~is_initial & ~(lost & ~np.isfinite(first_token_s))   # lost unserved: reported apart
    arrival, first = arrival_s[counted], first_token_s[counted]
    offered = int(((arrival >= start_s) & (arrival < end_s)).sum())
    served = int(((first >= start_s) & (first <= end_s)).sum())
    growth = backlog_growth_rps(arrival, first, start_s, end_s)
    offered_rps, served_rps = offered / window_s, served / window_s
    running = (None if step_start_s is None or num_running is None or clients is not None
               else running_growth_rps(step_start_s, num_running, start_s, end_s))
    settled = running is None or not offered or abs(running) <= max(
        MAX_RUNNING_GROWTH_FRAC * offered_rps,
        NOISE_SIGMAS * math.sqrt(1.2 * 2.0 * offered_rps / (0.5 * window_s)))
    out = {"offered_rps": offered_rps, "served_rps": served_rps,
           "served_frac": served / offered if offered else None,
           "backlog_growth_rps": growth, "ttft_target_ms": ttft_target_ms,
           "running_growth_rps": running, "settled": settled, "rule": RULE,
           "settled_rule": SETTLED_RULE}
    reasons = []
    open_loop = clients is None              # a closed loop's load follows its service (module doc)
    if open_loop and offered and served < MIN_SERVED_FRAC * offered:
        reasons.append(f"serves {brief(served_rps, 3)} of {brief(offered_rps, 3)} req/s")
    if open_loop and offered and growth > MAX_GROWTH_FRAC * offered_rps:
        reasons.append(f"waiting requests grow {brief(growth, 3)}/s")
    if ttft_target_ms is not None and not (ttft_p99_ms is not None and ttft_p99_ms <= ttft_target_ms):
        shown = "-" if ttft_p99_ms is None else f"{brief(ttft_p99_ms, 4)} ms"
        reasons.append(f"TTFT p99 {shown} > {ttft_target_ms:g} ms")
    out["ok"] = not reasons
    if clients is not None:
        out["verdict"] = (f"closed loop of {clients} clients: they send {brief(offered_rps, 3)} "
                          f"req/s, served as they are sent"
                          + (f"; {'; '.join(reasons)}" if reasons else ""))
    elif not offered:
        out["verdict"] = "no request arrived in the measurement window: keep-up not judged"
    elif reasons:
        out["verdict"] = f"{'; '.join(reasons)}: overloaded"
    else:
        out["verdict"] = (f"serves {brief(served_rps, 3)} of {brief(offered_rps, 3)} req/s: keeps up "
                          f"(margin {margin_text(out)})")
    if not settled:
        out["verdict"] += "; " + unsettled_text(running, offered_rps)
    return out


def unsettled_text(running_growth_rps: float, offered_rps: float) -> str:
    """What a window whose running requests grew by `running_growth_rps` means."""
    how = "grows" if running_growth_rps > 0 else "shrinks"
    return (f"running batch still {how} ({brief(abs(running_growth_rps), 3)} req/s, "
            f"{abs(running_growth_rps) / offered_rps:.0%} of offered, over the window's second half): "
            f"not steady, latencies are {'below' if running_growth_rps > 0 else 'above'} the steady "
            "state's (simulate longer, or start near the steady batch: "
            "workload.initial_running_per_rank: steady, or epsim plan --warm-start)")


def margin_text(verdict: dict) -> str:
    """How far a verdict is from the rule: `served 99.9 % (>= 97 %), backlog +0.01/s (< 1.8/s)`."""
    frac = verdict.get("served_frac")
    served = "-" if frac is None else f"{frac * 100:.1f} %"
    limit = MAX_GROWTH_FRAC * verdict.get("offered_rps", 0.0)
    return (f"served {served} (>= {MIN_SERVED_FRAC:.0%}), backlog "
            f"{verdict.get('backlog_growth_rps', 0.0):+.2g}/s (< {limit:.2g}/s)")
