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

The rejoin (SGLang 0.5.12, PR #15771; Mooncake 7e4a85e1a, 2026-05-16): a rank relaunched with
`--elastic-ep-rejoin` loads its weights and captures its graphs off the serving path, its peers
masked out (`elastic_ep/elastic_ep.py` 54-60; `model_executor/model_runner.py` 530-545), then
joins. The survivors check once per forward (`model_runner.py` 3369 -> 1690-1729) and go on
serving until its peer state is ready; then, between two forwards, they pause for the
resynchronisation (`rejoin_terms`), each step a few small collectives over the instance:

  peer_state  `try_recover_ranks` (`elastic_ep.py` 147-174): for the default WORLD backend and
              the device and CPU backends of every live group holding the rank (with DP
              attention the world and TP groups: MoE EP is the TP group, `distributed/
              parallel_state.py` 1970; attention TP/CP, MoE TP/DP and PP are one rank each),
              `get_peer_state` all-reduces the readiness flags (MIN; Mooncake `mooncake-pg/src/
              mooncake_backend.cpp` 1095-1138) and `recover_ranks` marks the rank active and
              writes its state to the TCP store, one key per backend (1140-1166).
  ep_reconnect the EP buffer's `update_ep_member` -> `connect(True)` (`mooncake-wheel/mooncake/
              mooncake_ep_buffer.py` 88-215): all-gathers of the memory region's address and
              key, the QP numbers and LIDs all-to-all (RoCE: two GID all-gathers instead of the
              LIDs), the NVLink IPC handles all-gathered; the QPs are re-created in place
              (`update_local_qpns`), so captured graphs stay valid.
  metadata    `broadcast_global_expert_location_metadata` (`eplb/expert_location.py` 321-363):
              an `all_gather_object` of the rejoin flags to pick a healthy source
              (`model_runner.py` 1732-1748), then its four int64 maps broadcast
              (`[layers, physical]`, `[layers, experts, max replicas]`, `[layers, experts]` twice
              with a static dispatch map); the seed broadcast (`model_runner.py` 1723-1728).
  placement   none: the masks reset (`ElasticEPState.reset`, `elastic_ep.py` 34-38) and the EPLB
              manager's interval restarts (`eplb_manager.reset_generator`, `eplb/eplb_manager.py`
              44-45). No rebalance runs at the rejoin: the rank's slots keep the placeholders,
              unreferenced, until the next periodic rebalance places experts on them; its DP
              scheduler takes requests again at once.
  recapture   none: the survivors' graphs read `active_ranks` and the QP contexts in place; the
              joiner captured its own before joining.
  weights     none on the serving path: the joiner loaded its own before joining.

The collectives are priced by the link model (`allreduce_us`'s ring: per step one link latency
plus the bytes at the link's bandwidth), a lower bound: Mooncake's process groups run them from
a host worker thread whose overhead is not measured here. The TCP-store writes, the QP
re-creation and the IPC handle opening are host work not measured here (`RecoveryTerms.unpriced`).
While a rank is down, 0.5.12's survivors also all-reduce its peer state once per forward
(`maybe_recover_ep_ranks`); not charged, as the failure path is modelled on 0.5.9, which has no
such poll.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epsim.eplb.host_terms import allreduce_us

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
# backends a survivor recovers at a rejoin (module doc, peer_state): the default WORLD one, then
# the device and CPU backends of the world and TP groups
REJOIN_BACKENDS = 1 + 2 * 2
# the EP buffer's reconnect (module doc, ep_reconnect): address, key, QPNs, LIDs, IPC handles on
# InfiniBand; on RoCE two GID all-gathers take the LIDs' place
EP_RECONNECT_COLLECTIVES = {"ib": 5, "roce": 6}
METADATA_BROADCASTS = 4                     # expert_location.py 349-358, static dispatch map
SEED_BROADCASTS = 2                         # broadcast_pyobj: the pickle's size, then its bytes
INT64_BYTES = 8


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


def rejoin_metadata_bytes(num_layers: int, num_experts: int, num_physical: int,
                          max_replicas: int, dispatch_static: bool = True) -> float:
    """Bytes SGLang broadcasts of its expert-location metadata at a rejoin (module doc): int64
    `[layers, physical]`, `[layers, experts, max replicas]`, `[layers, experts]` (the replica
    counts) and, with a static dispatch map, another `[layers, experts]`."""
    per_layer = num_physical + num_experts * max_replicas + num_experts * (2 if dispatch_static else 1)
    return float(INT64_BYTES * num_layers * per_layer)


def rejoin_terms(num_ranks: int, link_gbps: float, link_latency_us: float,
                 metadata_bytes: float, roce: bool = False) -> RecoveryTerms:
    """A repaired rank's rejoin (SGLang 0.5.12, module doc): no rebalance; the survivors pause
    for the resynchronisation's collectives over `num_ranks` ranks on one link (GB/s, µs a
    step), a lower bound; its host work is listed unpriced."""
    def ring_us(num_bytes: float, steps_per_rank: int) -> float:
        # steps_per_rank (n - 1) steps of a ring, each one latency; 2 for an all-reduce
        return allreduce_us(num_bytes, num_ranks, link_gbps, link_latency_us) * steps_per_rank / 2

    small = float(INT64_BYTES)
    broadcast_us = (link_latency_us + metadata_bytes * max(num_ranks - 1, 0) / (link_gbps * 1e3)
                    if num_ranks > 1 else 0.0)                 # the source writes every peer
    reconnect = EP_RECONNECT_COLLECTIVES["roce" if roce else "ib"]
    terms = {
        "peer_state": (REJOIN_BACKENDS * ring_us(4.0 * num_ranks, 2),
                       f"{REJOIN_BACKENDS} readiness all-reduces, one per recovered backend "
                       "(elastic_ep.py 147-174; mooncake_backend.cpp 1095-1138)"),
        "ep_reconnect": (reconnect * ring_us(small * num_ranks, 1),
                         f"{reconnect} all-gathers / all-to-alls of the EP buffer's reconnect "
                         "(mooncake_ep_buffer.py 88-215)"),
        "metadata": (ring_us(small * num_ranks, 1) + broadcast_us
                     + (METADATA_BROADCASTS - 1 + SEED_BROADCASTS) * (link_latency_us if num_ranks > 1 else 0.0),
                     "the rejoin flags all-gathered, the expert-location maps and the seed "
                     "broadcast (model_runner.py 1713-1748; expert_location.py 321-363)"),
        "placement": (0.0, "none: the masks reset and the EPLB interval restarts "
                           "(model_runner.py 1713-1721 in 0.5.12); the next periodic "
                           "rebalance places experts on the rank"),
        "recapture": (0.0, "none: the survivors' graphs read the masks and QP contexts in place; "
                           "the joiner captured its own (elastic_ep.py 54-60)"),
        "weights": (0.0, "none on the serving path: the joiner loaded its own before joining "
                         "(model_runner.py 530-545)")}
    unpriced = {
        "store": f"{REJOIN_BACKENDS} TCP-store writes per recovered rank "
                 "(mooncake_backend.cpp 1140-1166): round trips not measured",
        "qp_setup": "the QPs re-created and connected, the IPC handles opened "
                    "(update_local_qpns, sync_ib/sync_roce, sync_nvlink_ipc_handles): host verbs "
                    "and CUDA calls not measured",
        "collective_host": "Mooncake's process groups run collectives from a host worker thread; "
                           "its overhead over the link's latency is not measured",
        "poll": f"at most one forward plus {REJOIN_POLL_US / 1e3:.0f}-ms peer-state polls before "
                "the rank is taken back (model_runner.py 3369): a delay, not a pause"}
    return RecoveryTerms("rejoin", terms, unpriced)


def deployment_rejoin_terms(scenario, links: dict[str, float], max_replicas: int) -> RecoveryTerms:
    """`rejoin_terms` of a scenario's instance: its EP ranks over the scale-out link when it spans
    nodes (NVLink inside one), RoCE's reconnect on a RoCE network, the expert-location maps of
    its model and a placement whose most replicated expert has `max_replicas` replicas.

    Args:
        links: `epsim.eplb.rebalance_params` of the cluster (bandwidths, per-transfer latencies).
    """
    m, c, d = scenario.model, scenario.cluster, scenario.deployment
    nodes = max(1, d.ep_size // min(c.gpus_per_node_resolved, d.ep_size))
    link = "rdma" if nodes > 1 else "nvlink"
    metadata = rejoin_metadata_bytes(m.num_layers, m.num_experts,
                                     m.num_experts + d.ep_num_redundant_experts, max_replicas,
                                     d.ep_dispatch_algorithm == "static")
    return rejoin_terms(d.ep_size, links[f"{link}_gbps"], links[f"{link}_latency_us"], metadata,
                        roce=c.network_resolved.kind == "roce")
