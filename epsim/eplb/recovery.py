"""Elastic-EP recovery as SGLang with Mooncake EP runs it, one term per step, each with its
source: the code path it models (file:line at a version) and where its value comes from.

Code read: SGLang 0.5.9 (PyPI wheel of 2026-02-23, the release before the blog of 2026-03-17;
every line below is the same in 0.5.10 of 2026-04-05, and `timeout_us` is unchanged up to
0.5.23) for the failure, SGLang 0.5.12 (2026-05-16, the first release with the rejoin of PR
#15771) for the rejoin, Mooncake 3a36980 (kvcache-ai/Mooncake, 2026-03-17; the EP lines are the
same from c5829aad1, 2025-09-26, to 3b5a594, 2026-08-22). Paths below are under
`python/sglang/srt/` and `mooncake-ep/` / `mooncake-pg/` / `mooncake-wheel/mooncake/`.

What happens when a rank dies (SGLang 0.5.9 + Mooncake 3a36980):

  detection   Two masks, two detectors. The process groups (`--elastic-ep-backend mooncake`)
              carry their own masks (`distributed/parallel_state.py` 261-292); Mooncake PG's
              worker thread marks a peer broken when a transfer to it fails or, 100 us into
              a pending one, a ping to it fails (`mooncake_worker_thread.cpp` 117-140 and
              199-224, `kPingTimeoutMicroseconds_ = 100`, `mooncake_worker.cuh` 88). That
              happens within the next step's DP-attention batch sync (an all-gather on the
              CPU group): the dead rank's row is read as idle (`managers/
              scheduler_dp_attn_mixin.py` 86-93) and the DP controller stops routing to it
              (`managers/scheduler.py` 2417-2428, `data_parallel_controller.py` 196, 518). It
              does not reach the MoE dispatch. The tensor the dispatch and combine kernels
              poll is `ElasticEPState.active_ranks` (`elastic_ep/elastic_ep.py` 12-27,
              60-74; `layers/moe/token_dispatcher/mooncake.py` 212, 252), which nothing on the
              host writes: on the IBGDA path the only writer is the kernel itself. A
              survivor's receive loop spins on the dead rank's signal until
              `timeout_ticks = clock_rate_khz * timeout_us / 1000` SM cycles have passed
              (`mooncake_ep_buffer.cpp` 276-278 dispatch, 387-389 combine; `clock_rate_khz`
              = `cudaDevAttrClockRate`, line 67, the maximum SM clock), then clears
              `active_ranks[src]` (`mooncake_ep_kernel.cu` 417-425 dispatch, 670-678 combine).
              SGLang passes `timeout_us = 10_000_000` (`mooncake.py` 144; -1, no timeout, only
              on each dispatcher's first call, 143/220/258/263, before graph capture), a
              constant: no flag or environment variable sets it, and none of the blog's launch
              flags touches it. `clock64()` counts SM cycles, so the wait is 10 s at the
              maximum clock and longer below it (`SM_CLOCK_OVER_REPORTED`).
              Once per failure, not per layer: every later wait on that rank breaks at once
              on the cleared flag (`kernel.cu` 424, 675), and the ranks that die together are
              waited out concurrently. Only when IBGDA is unavailable (the fallback,
              `mooncake_ep_buffer.py` 241-264, 330-349) does the dispatch copy the process
              group's mask into `active_ranks`, and detection is the PG's ping
              (`DETECTION_US["fallback"]`, a lower bound: the ping's own failure is not
              measured here). The blog describes the first ("GPU Direct RDMA ... timeout-based
              fault detection").
  reload      Experts no survivor holds: their bytes from host memory
              (`--enable-elastic-expert-backup`, PR #17374) at `reload_gbps`, slowest survivor.
  placement   `ModelRunner.forward` sees `active_ranks` differ from its last snapshot after the
              forward and runs the EPLB rebalance ("EPLB due to rank faults",
              `model_executor/model_runner.py` 2408-2421): the recorder's all-reduce, the
              algorithm over the survivors (`elasticity_aware` runs the global policy over
              the active ranks' slots and leaves the dead ranks' slots as unreferenced
              expert-0 placeholders, `eplb/eplb_algorithms/elasticity_aware.py` 37-46, 73-86),
              the dispatch map, per-layer plans and weight moves from survivors
              (`epsim.eplb.host_terms.sglang_rebalance`).
  rerun       The same forward runs again on the new placement (`model_runner.py` 2422-2428):
              the batch whose dispatch timed out is retried, not dropped. One decode step,
              priced where the step is known (the simulator's last step, the plan's steady
              step).
  recapture   none: the captured graph reads `active_ranks` from device memory, and the
              rebalance rewrites the expert-location tensors in place.
  lost        The dead rank's own requests: its scheduler is gone and nothing in SGLang
              resends them (the DP controller only stops routing to the rank); a client that
              times out may resend them to the survivors, prefilling again
              (`deployment.lost_request_retry_s`).

The rejoin (SGLang 0.5.12, PR #15771): a rank relaunched with `--elastic-ep-rejoin` loads its
weights and captures its graphs off the serving path. The survivors check once per forward
(`model_runner.py` 3369 -> 1690-1729) and go on serving until its peer state is ready; then,
between two forwards, `try_recover_ranks` (`elastic_ep/elastic_ep.py` 147-174) recovers it in
every process group (polling each at `_PEER_STATE_POLL_INTERVAL_SEC = 0.01`, line 99) and
reconnects the EP buffer, the expert-location metadata is broadcast, the masks reset, and the
EPLB manager's interval restarts (`eplb_manager.reset_generator`, `eplb/eplb_manager.py` 44-45).
No rebalance runs at the rejoin: the rank's slots keep the placeholders, unreferenced, until
the next periodic rebalance places experts on them; its DP scheduler takes requests again at
once. The resynchronisation's time (group recovery, EP reconnect, metadata broadcast) has no
measurement here and is left unpriced (`RecoveryTerms.unpriced`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# layers/moe/token_dispatcher/mooncake.py 144 (0.5.9 to 0.5.23): the default of
# deployment.moe_dispatch_timeout_s
SGLANG_MOONCAKE_TIMEOUT_US = 10_000_000.0
# the SM clock while the dispatch kernel spins over cudaDevAttrClockRate (the maximum SM clock):
# a spin on a few warps per SM draws far below the power limit, so the SM holds its maximum, as
# our H200 records show after light runs (benchmarks/results/h200_layer/gpu.csv and
# h200_attention_holdout/run*/gpu.csv: 1980 MHz SM, the H200's maximum, at 124-229 W of 700)
SM_CLOCK_OVER_REPORTED = 1.0
MOONCAKE_PING_TIMEOUT_US = 100.0            # mooncake-pg/include/mooncake_worker.cuh 88
# How long the survivors take to clear a dead rank from the mask the MoE kernels read, per
# Mooncake EP path (module doc): the kernel's own timeout on IBGDA; the process group's ping
# on the fallback, a lower bound (the failed ping's own time is not measured here)
DETECTION_US = {"ibgda": SGLANG_MOONCAKE_TIMEOUT_US, "fallback": MOONCAKE_PING_TIMEOUT_US}
REJOIN_POLL_US = 10_000.0                   # 0.5.12 elastic_ep/elastic_ep.py 99


def detection_us(timeout_us: float = SGLANG_MOONCAKE_TIMEOUT_US,
                 sm_clock_over_reported: float = SM_CLOCK_OVER_REPORTED) -> float:
    """Wall time of the IBGDA kernels' timeout: `timeout_us` converted to cycles at the reported
    clock, counted down at the SM's actual clock (module doc)."""
    return timeout_us / sm_clock_over_reported


@dataclass(frozen=True)
class RecoveryTerms:
    """One failure's (or rejoin's) serving pause, term by term (µs, with sources).

    Attributes:
        unpriced: steps the code path takes that no term prices (no measurement here), each
            with why; the interruption leaves them out.
    """

    kind: str
    terms: dict[str, tuple[float, str]] = field(default_factory=dict)
    unpriced: dict[str, str] = field(default_factory=dict)

    @property
    def interruption_us(self) -> float:
        return float(sum(us for us, _ in self.terms.values()))

    def as_dict(self) -> dict:
        return {"kind": self.kind, "interruption_us": self.interruption_us,
                "terms": {k: {"us": us, "source": s} for k, (us, s) in self.terms.items()},
                "unpriced": dict(self.unpriced)}


def failure_terms(rebalance_us: float, reload_us: float = 0.0,
                  detection: float | None = None, rerun_us: float | None = None) -> RecoveryTerms:
    """A failure's pause: detection (default `detection_us()`), expert reloads (experts no
    survivor held), the EPLB rebalance over the survivors (`rebalance_us`, 0 without EPLB) and
    the rerun of the timed-out forward (`rerun_us`: one decode step; None where no step is
    priced, the term then unpriced and said so)."""
    terms = {
        "detection": (detection_us() if detection is None else detection,
                      "Mooncake EP kernel timeout (mooncake.py 144: 10 s) counted in SM cycles, "
                      "once per failure (mooncake_ep_kernel.cu 417-425, 670-678)"),
        "reload": (reload_us, "lost experts' bytes / reload_gbps (slowest survivor)"),
        "placement": (rebalance_us, "EPLB rebalance over the survivors (model_runner.py 2408-2421)"),
        "recapture": (0.0, "none: active_ranks is read inside the captured graph")}
    unpriced = {}
    if rerun_us is not None:
        terms["rerun"] = (rerun_us, "the timed-out forward run again (model_runner.py 2422-2428)")
    else:
        unpriced["rerun"] = "one decode step of a batch not known here"
    return RecoveryTerms("failure", terms, unpriced)


def rejoin_terms() -> RecoveryTerms:
    """A repaired rank's rejoin (SGLang 0.5.12, module doc): no rebalance; the survivors pause
    only for the resynchronisation, which is not measured here."""
    return RecoveryTerms(
        "rejoin",
        {"placement": (0.0, "none: the masks reset and the EPLB interval restarts "
                            "(model_runner.py 1713-1721 in 0.5.12); the next periodic "
                            "rebalance places experts on the rank")},
        {"resync": "recover_ranks in every process group, the EP buffer's reconnect and the "
                   "expert-location broadcast (elastic_ep.py 147-174 in 0.5.12): not measured",
         "poll": f"at most one forward plus {REJOIN_POLL_US / 1e3:.0f}-ms peer-state polls before "
                 "the rank is taken back (model_runner.py 3369): a delay, not a pause"})
