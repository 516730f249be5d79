"""Elastic-EP recovery as SGLang with Mooncake EP runs it, one term per step, each with its
source (the code path it models and where its value comes from).

  detection   the survivors' next MoE layer waits in Mooncake EP's dispatch for the failed rank's
              tokens until the kernel's timeout: SGLang passes `timeout_us = 10_000_000`
              (`layers/moe/token_dispatcher/mooncake.py`, 0.5.x), Mooncake turns it into SM
              cycles (`mooncake_ep_buffer.cpp`: `clock_rate_khz * timeout_us / 1000`, the
              device's reported clock) and the kernel spins on `clock64()` until then, then
              sets `active_ranks[src] = 0` (`mooncake_ep_kernel.cu`). The Mooncake process
              group's own detection (a peer ping after `kPingTimeoutMicroseconds_ = 100` µs,
              `mooncake_worker_thread.cpp`) marks the scheduler's CPU group at once, but the
              dispatch kernel reads the EP state's own `active_ranks` (IBGDA path), so the
              kernel's timeout decides. A configured default, not a measurement.
  placement   `ModelRunner.forward` sees the EP state change and runs the EPLB rebalance
              ("EPLB due to rank faults"): the recorder's all-reduce, the algorithm over the
              survivors (`elasticity_aware` falls back to the global policy over the active
              ranks), the dispatch map, the per-layer move plans and weight moves from survivors
              (`epsim.eplb.host_terms.sglang_rebalance`); reloads when no survivor holds an
              expert (`--enable-elastic-expert-backup`: from host memory at `reload_gbps`).
  recapture   none: Mooncake EP reads `active_ranks` from a device tensor inside the captured
              graph, so the rank set changes without a recapture.
  rejoin      a repaired rank relaunched with `--elastic-ep-rejoin` loads weights and captures
              its graphs off the serving path; survivors poll its state every 10 ms
              (`_PEER_STATE_POLL_INTERVAL_SEC`), then rebalance onto all ranks: the pause is that
              rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# token_dispatcher/mooncake.py: self.timeout_us (the default of deployment.moe_dispatch_timeout_s)
SGLANG_MOONCAKE_TIMEOUT_US = 10_000_000.0
MOONCAKE_PING_TIMEOUT_US = 100.0            # mooncake-pg mooncake_worker.cuh
REJOIN_POLL_US = 10_000.0                   # elastic_ep.py: _PEER_STATE_POLL_INTERVAL_SEC


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
                  detection_us: float = SGLANG_MOONCAKE_TIMEOUT_US) -> RecoveryTerms:
    """A failure's pause: detection, expert reloads (experts no survivor held) and the EPLB
    rebalance over the survivors (`rebalance_us`, 0 without EPLB)."""
    return RecoveryTerms("failure", {
        "detection": (detection_us, "Mooncake EP dispatch timeout_us as SGLang sets it (10 s)"),
        "reload": (reload_us, "lost experts' bytes / reload_gbps (slowest survivor)"),
        "placement": (rebalance_us, "EPLB rebalance over the survivors (host terms + moves)"),
        "recapture": (0.0, "none: active_ranks is read inside the captured graph")})


def rejoin_terms(rebalance_us: float) -> RecoveryTerms:
    """A repaired rank's rejoin: a poll interval at most, then the rebalance onto all ranks."""
    return RecoveryTerms("rejoin", {
        "poll": (REJOIN_POLL_US, "elastic_ep.py peer-state poll interval (at most)"),
        "placement": (rebalance_us, "EPLB rebalance onto all ranks (host terms + moves)")})
