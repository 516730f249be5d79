"""Latencies as the serving benchmarks count them: `sglang.bench_serving` and aiperf.

sglang.bench_serving (python/sglang/bench_serving.py, `calculate_metrics`), per successful
request with a streamed response:

- TTFT = first non-empty chunk - send;  E2E = last chunk - send;
- TPOT = (E2E - TTFT) / (output_len - 1), for requests with output_len > 1 (one value per
  request, then averaged: a long request weighs as much as a short one);
- ITL = every gap between chunks after the first; with `--backend sglang` a chunk that brings
  k new tokens (speculative decoding) adds k entries of gap / k;
- mean, median, std and p99 (ITL also p95 and max) with numpy's `np.percentile` (linear
  interpolation); `concurrency` = sum of E2E / benchmark duration.

aiperf names the same per-request quantities differently: its `time_to_first_token` is TTFT,
its `inter_token_latency` = (request_latency - TTFT) / (output_sequence_length - 1) is
bench_serving's TPOT, its `inter_chunk_latency` the raw gaps between chunks (bench_serving's ITL
before the division by k), its `request_latency` E2E.

A simulation measures a window (`warmup_s` to the end), not a whole benchmark: the requests
counted are those sent in the window that finished by the end (`completed`); ITL counts every
token emitted in the window, of every request (steps keep the gaps they closed, not whose they
were), each a step's gap divided by the tokens the request got in it. Throughputs are the
window's tokens per second. `epsim.report.summary` keeps its own window statistics beside these
(`tpot_ms` there counts unfinished requests too).
"""

from __future__ import annotations

import numpy as np

from epsim.sim.metrics import SimResult


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """`np.percentile(np.repeat(values, weights), q)` (linear interpolation) without forming
    the repeated array.

    Args:
        values: [n] float64; weights: [n] int64 >= 0, how many samples each value stands for.
    """
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    keep = weights > 0
    values, upper = values[keep], np.cumsum(weights[keep])     # sample i lies at rank < upper
    pos = q / 100.0 * (upper[-1] - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    at = lambda i: values[int(np.searchsorted(upper, i, side="right"))]   # noqa: E731
    return float(at(lo) + (at(hi) - at(lo)) * (pos - lo))


def _stats(values_ms: np.ndarray, name: str, extra: tuple[str, ...] = ()) -> dict[str, float | None]:
    """bench_serving's `mean_/median_/std_/p99_<name>_ms` (and `extra`: "p95", "max")."""
    keys = ["mean", "median", "std", "p99", *extra]
    if values_ms.size == 0:
        return {f"{k}_{name}_ms": None for k in keys}
    out = {f"mean_{name}_ms": float(np.mean(values_ms)),
           f"median_{name}_ms": float(np.median(values_ms)),
           f"std_{name}_ms": float(np.std(values_ms)),
           f"p99_{name}_ms": float(np.percentile(values_ms, 99))}
    if "p95" in extra:
        out[f"p95_{name}_ms"] = float(np.percentile(values_ms, 95))
    if "max" in extra:
        out[f"max_{name}_ms"] = float(np.max(values_ms))
    return out


def itl_samples(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(gap per token in ms [n], how many tokens each stands for [n]) of the steps that start in
    the window: a step whose requests each got one token gives its mean gap for each of them; a
    speculative step (`itl_by_tokens` rows) gives gap / k for each of k tokens."""
    steps = result.steps
    measured = steps["start_us"] >= result.warmup_s * 1e6
    gap_ms = steps["itl_mean_us"][measured] * 1e-3
    by_tokens = result.itl_by_tokens
    if by_tokens is None:
        return gap_ms, steps["itl_count"][measured].astype(np.int64)
    counts = by_tokens[measured]                                   # [steps, k] requests
    k = np.arange(1, counts.shape[1] + 1)
    values = (gap_ms[:, None] / k[None, :]).ravel()
    return values, (counts * k[None, :]).ravel().astype(np.int64)


def bench_serving(result: SimResult) -> dict:
    """sglang.bench_serving's result fields of a run's window (module doc)."""
    warm, window_s = result.warmup_s, result.duration_s - result.warmup_s
    lost = result.lost if result.lost is not None else np.zeros_like(result.is_initial)
    done = (~result.is_initial & (result.arrival_s >= warm) & np.isfinite(result.finish_s) & ~lost)
    ttft_s = result.first_token_s[done] - result.arrival_s[done]
    e2e_s = result.finish_s[done] - result.arrival_s[done]
    out = result.output_len[done]
    many = out > 1
    tpot_s = (e2e_s[many] - ttft_s[many]) / (out[many] - 1)
    steps = result.steps
    measured = steps["start_us"] >= warm * 1e6
    output = float(steps["output_tokens"][measured].sum())
    prompt = float(steps["prefill_tokens"][measured].sum())
    summary = {"completed": int(done.sum()),
               "request_throughput": float(done.sum()) / window_s,
               "input_throughput": prompt / window_s, "output_throughput": output / window_s,
               "total_throughput": (prompt + output) / window_s,
               "concurrency": float(e2e_s.sum()) / window_s,
               **_stats(ttft_s * 1e3, "ttft"), **_stats(tpot_s * 1e3, "tpot")}
    values, weights = itl_samples(result)
    if weights.sum() > 0:
        total = weights.sum()
        mean = float((values * weights).sum() / total)
        summary.update({"mean_itl_ms": mean,
                        "median_itl_ms": weighted_percentile(values, weights, 50),
                        "std_itl_ms": float(np.sqrt((weights * (values - mean) ** 2).sum() / total)),
                        "p95_itl_ms": weighted_percentile(values, weights, 95),
                        "p99_itl_ms": weighted_percentile(values, weights, 99),
                        "max_itl_ms": float(values[weights > 0].max())})
    else:
        summary.update(_stats(np.zeros(0), "itl", ("p95", "max")))
    summary.update(_stats(e2e_s * 1e3, "e2e_latency"))
    if result.accept_length is not None:
        summary["accept_length"] = result.accept_length
    if result.accept_source is not None:
        summary["accept_source"] = result.accept_source    # the chain's rate and its citation
    return summary


def bench_line(bench: dict) -> str:
    """The CLI's line of `bench_serving` (ms), as bench_serving prints its headline numbers."""
    def ms(key: str) -> str:
        value = bench.get(key)
        return "-" if value is None else f"{value:.2f}"
    accept = (f"; accept length {bench['accept_length']:.2f}"
              if bench.get("accept_length") is not None else "")
    return (f"bench_serving  {bench['completed']} completed; TTFT mean {ms('mean_ttft_ms')} median "
            f"{ms('median_ttft_ms')} p99 {ms('p99_ttft_ms')}; TPOT mean {ms('mean_tpot_ms')} median "
            f"{ms('median_tpot_ms')} p99 {ms('p99_tpot_ms')}; ITL mean {ms('mean_itl_ms')} median "
            f"{ms('median_itl_ms')} p99 {ms('p99_itl_ms')} (ms); concurrency "
            f"{bench['concurrency']:.1f}{accept}")


def kv_line(kv: dict) -> str:
    """The CLI's line of `kv_cache`: one GPU's memory, the pool and when it bound."""
    if kv["can_bind"]:
        binds = (f"held requests back in {kv['held_frac']:.0%} of the window's steps, at most "
                 f"{kv['peak_used_frac']:.0%} full"
                 + (f"; {kv['overflow_steps']} steps outgrew it (SGLang would retract)"
                    if kv["overflow_steps"] else ""))
    else:
        binds = "never binds (it holds max_running_requests at the longest context)"
    return (f"KV cache   {kv['max_total_num_tokens']:,} tokens per rank ({kv['kv_pool_gib']:.1f} GiB "
            f"of {kv['hbm_gib']:.1f}: weights {kv['weights_gib']:.1f} GiB, mem_fraction_static "
            f"{kv['mem_fraction_static']:g}); {binds}")
