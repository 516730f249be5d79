"""Elastic-EP recovery as SGLang with Mooncake EP runs it, one term per step, each with its
source (the code path it models and where its value comes from).

  detection   survivors wait in the EP dispatch for the failed rank until the kernel's timeout:
              SGLang passes `timeout_us = 10_000_000` to Mooncake EP's dispatch and combine
              (`layers/moe/token_dispatcher/mooncake.py`), which Mooncake turns into SM clock
              ticks (`mooncake_ep_buffer.cpp`: clock rate x timeout); the kernel then marks the
              rank inactive in `active_ranks`. A configured default, not a measurement.
  repair      membership repair in the communicator: the Mooncake backend marks the peer broken
              after its ping timeout (`kPingTimeoutMicroseconds_ = 100`, mooncake-pg
              `mooncake_worker.cuh`); the scheduler drops the DP rank from new batches.
  placement   the EPLB rebalance over the survivors SGLang triggers on a failure: algorithm,
              map update and weight moves (`epsim.eplb.host_terms`, `epsim.eplb.cost`); none
              of its weights move when replicas cover every expert, reloads when not.
  recapture   none: Mooncake EP reads `active_ranks` from a device tensor inside the captured
              graph, so the rank set changes without a recapture.
  rejoin      a repaired rank relaunched with `--elastic-ep-rejoin` loads weights and captures
              its graphs off the serving path; survivors poll its state every 10 ms
              (`_PEER_STATE_POLL_INTERVAL_SEC`), then recover the groups and rebalance onto all
              ranks: the pause is that rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SGLANG_MOONCAKE_TIMEOUT_US = 10_000_000.0   # token_dispatcher/mooncake.py: self.timeout_us
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
    """A failure's pause: detection, repair, expert reloads (experts no survivor held) and the
    EPLB rebalance over the survivors (`rebalance_us`, 0 without EPLB)."""
    return RecoveryTerms("failure", {
        "detection": (detection_us, "SGLang Mooncake EP dispatch timeout_us (configured default)"),
        "repair": (MOONCAKE_PING_TIMEOUT_US, "Mooncake backend ping timeout (mooncake-pg)"),
        "reload": (reload_us, "lost experts' bytes / reload_gbps (slowest survivor)"),
        "placement": (rebalance_us, "EPLB rebalance over the survivors (host terms + moves)"),
        "recapture": (0.0, "none: active_ranks is read inside the captured graph")})


def rejoin_terms(rebalance_us: float) -> RecoveryTerms:
    """A repaired rank's rejoin: a poll interval at most, then the rebalance onto all ranks."""
    return RecoveryTerms("rejoin", {
        "poll": (REJOIN_POLL_US, "elastic_ep.py peer-state poll interval (at most)"),
        "placement": (rebalance_us, "EPLB rebalance onto all ranks (host terms + moves)")})
