"""Elastic-EP recovery as SGLang with Mooncake EP runs it, one term per step, each with its
source: the code path it models (file, line, commit) and where its value comes from.

Code read: Mooncake at 3a36980 (kvcache-ai/Mooncake, 2026-03-17, the blog's date; the lines
below are unchanged from c5829aad1, 2025-09-26, to 3b5a594, 2026-08-22) and SGLang 0.5.x
(sgl-project/sglang; `self.timeout_us = 10000000` in both versions of the dispatcher we read,
0202c26 and an older one that caches `active_ranks` in `__init__`).

  detection   The survivors' next MoE dispatch (or combine) spins on the dead rank's receive
              signal. SGLang passes `timeout_us = 10_000_000` (`layers/moe/token_dispatcher/
              mooncake.py`, `_MooncakeEPDispatcherImpl.__init__`; -1 only on each layer's first
              call, before graph capture); Mooncake turns it into SM cycles,
              `timeout_ticks = clock_rate_khz * timeout_us / 1000` (`mooncake-ep/src/
              mooncake_ep_buffer.cpp` 276-278), `clock_rate_khz` being `cudaDevAttrClockRate`
              (line 67), the device's maximum SM clock (H200: 1980 MHz); the
              kernel spins on `clock64()` until `end - start > timeout_ticks`, then sets
              `active_ranks[src] = 0` (`mooncake-ep/src/mooncake_ep_kernel.cu` 417-425 dispatch,
              670-678 combine). `clock64()` counts SM cycles, so the wait is timeout_ticks / the
              SM clock during the spin: 10 s at the maximum clock, longer below it (a clock
              above the reported maximum, the only way to a shorter wait, does not exist), so
              `SM_CLOCK_OVER_REPORTED = 1`. Nothing else zeroes this tensor: it is
              `ElasticEPState.active_ranks` (`elastic_ep/elastic_ep.py`), not the process
              group's mask that Mooncake PG's 100-us ping (`kPingTimeoutMicroseconds_`,
              `mooncake-pg/include/mooncake_worker.cuh` 88; `mooncake_worker_thread.cpp`
              117-140) clears for CPU collectives; only the non-IBGDA fallback copies that mask
              in (`mooncake-wheel/mooncake/mooncake_ep_buffer.py` 241-264).
  reload      Experts no survivor holds: their bytes from host memory
              (`--enable-elastic-expert-backup`, PR #17374) at `reload_gbps`, slowest survivor.
  placement   `ModelRunner.forward` sees `active_ranks` changed after the forward and runs the
              EPLB rebalance ("EPLB due to rank faults", `model_executor/model_runner.py`): the
              recorder's all-reduce, the algorithm over the survivors (`elasticity_aware` falls
              back to the global policy over the active ranks), the dispatch map, the per-layer
              move plans and weight moves from survivors (PR #12068;
              `epsim.eplb.host_terms.sglang_rebalance`).
  rerun       The same forward runs again on the new placement (`output = self._forward_raw(...)`
              right after the rebalance in `ModelRunner.forward`): the batch whose dispatch timed
              out produced tokens without the dead rank's experts. One decode step, priced where
              the step is known (the simulator's last step, the plan's steady step).
  recapture   none: Mooncake EP reads `active_ranks` from a device tensor inside the captured
              graph, and the rebalance rewrites the expert-location tensors in place.
  rejoin      a repaired rank relaunched with `--elastic-ep-rejoin` loads weights and captures
              its graphs off the serving path (PR #15771); survivors poll its state every 10 ms
              (`_PEER_STATE_POLL_INTERVAL_SEC`, `elastic_ep/elastic_ep.py`), then rebalance onto
              all ranks: the pause is that rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# token_dispatcher/mooncake.py: self.timeout_us (the default of deployment.moe_dispatch_timeout_s)
SGLANG_MOONCAKE_TIMEOUT_US = 10_000_000.0
# the SM clock while the dispatch kernel spins over cudaDevAttrClockRate (the maximum SM clock):
# a spin on a few warps per SM draws far below the power limit, so the SM holds its maximum, as
# our H200 records show after light runs (benchmarks/results/h200_layer/gpu.csv and
# h200_attention_holdout/run*/gpu.csv: 1980 MHz SM, the H200's maximum, at 124-229 W of 700)
SM_CLOCK_OVER_REPORTED = 1.0
MOONCAKE_PING_TIMEOUT_US = 100.0            # mooncake-pg mooncake_worker.cuh
REJOIN_POLL_US = 10_000.0                   # elastic_ep.py: _PEER_STATE_POLL_INTERVAL_SEC


def detection_us(timeout_us: float = SGLANG_MOONCAKE_TIMEOUT_US,
                 sm_clock_over_reported: float = SM_CLOCK_OVER_REPORTED) -> float:
    """Wall time of the dispatch kernel's timeout: `timeout_us` converted to cycles at the
    reported clock, counted down at the SM's actual clock (module doc)."""
    return timeout_us / sm_clock_over_reported


@dataclass(frozen=True)
class RecoveryTerms:
    """One failure's (or rejoin's) serving pause, term by term (µs, with sources)."""

    kind: str
    terms: dict[str, tuple[float, str]] = field(default_factory=dict)

    @property
    def interruption_us(self) -> float:
        return float(sum(us for us, _ in self.terms.values()))

    def as_dict(self) -> dict:
        return {"kind": self.kind, "interruption_us": self.interruption_us,
                "terms": {k: {"us": us, "source": s} for k, (us, s) in self.terms.items()}}


def failure_terms(rebalance_us: float, reload_us: float = 0.0,
                  detection: float | None = None, rerun_us: float | None = None) -> RecoveryTerms:
    """A failure's pause: detection (default `detection_us()`), expert reloads (experts no
    survivor held), the EPLB rebalance over the survivors (`rebalance_us`, 0 without EPLB) and
    the rerun of the timed-out forward (`rerun_us`: one decode step; None where no step is
    priced, the term then left out and said so)."""
    terms = {
        "detection": (detection_us() if detection is None else detection,
                      "Mooncake EP dispatch timeout_us as SGLang sets it, counted in SM cycles"),
        "reload": (reload_us, "lost experts' bytes / reload_gbps (slowest survivor)"),
        "placement": (rebalance_us, "EPLB rebalance over the survivors (host terms + moves)"),
        "recapture": (0.0, "none: active_ranks is read inside the captured graph")}
    if rerun_us is not None:
        terms["rerun"] = (rerun_us, "the timed-out forward run again (ModelRunner.forward)")
    return RecoveryTerms("failure", terms)


def rejoin_terms(rebalance_us: float) -> RecoveryTerms:
    """A repaired rank's rejoin: a poll interval at most, then the rebalance onto all ranks."""
    return RecoveryTerms("rejoin", {
        "poll": (REJOIN_POLL_US, "elastic_ep.py peer-state poll interval (at most)"),
        "placement": (rebalance_us, "EPLB rebalance onto all ranks (host terms + moves)")})
