"""Elastic EP in the simulator: EP ranks fail at scenario times and may come back.

What a failure does (`deployment.failures`, each `at_s`, `rank`, `recover_after_s`), following
SGLang's elastic EP over Mooncake:

- The rank's DP-attention scheduler is gone: its running and queued requests are lost; SGLang
  never answers them, and their clients resend them when their own timeout runs out
  (`workload.retry`, `epsim.sim.retries`). Later arrivals go round-robin over the live ranks
  (SGLang's data-parallel controller skips dead workers).
- `elastic_recovery: replicas` (Mooncake EP): serving first stalls for the failure's detection:
  the survivors' MoE dispatch waits for the dead rank until Mooncake EP's timeout (10 s as SGLang
  sets it, `deployment.moe_dispatch_timeout_s`; `epsim.eplb.recovery`). The rank is then masked
  as Mooncake EP's `active_ranks` does, so no token is dispatched to it. Experts with a replica on a survivor
  are served there at once. An expert whose only replicas were on the failed rank is re-placed
  into a survivor slot of the expert with the most replicas (`epsim.eplb.fill_lost`) and its
  weights are reloaded from host or storage at `reload_gbps` per GPU; every MoE layer needs
  it, so serving stalls until the slowest survivor has reloaded. With EPLB on, a rebalance onto
  the survivors follows at once (SGLang elastic EP triggers one on failure). Then the forward
  whose dispatch timed out runs again (SGLang's `ModelRunner.forward`): one more stall of the
  last step's length. When the rank comes back
  (`recover_after_s`) it has loaded its weights and captured its graphs off the serving path,
  and rejoins as SGLang 0.5.12 takes it back (`epsim.eplb.recovery`): its DP-attention
  scheduler takes new requests at once, no rebalance runs, the EPLB interval restarts, and its
  expert slots hold unreferenced placeholders (expert 0, as SGLang's elasticity-aware
  placement leaves a dead rank's slots) until the next rebalance places experts on them
  (`place_rejoined`). Without EPLB (SGLang's rejoin needs its manager) the rank's slots serve
  again at once with what they held. Either way the survivors pause for the
  resynchronisation's collectives (`epsim.eplb.recovery.rejoin_terms`: the process groups'
  peer state, the EP buffer's reconnect, the expert-location broadcast; link-model lower
  bounds, its host work unpriced).
- `elastic_recovery: reload` (no elastic EP): nothing can serve the failed rank's experts, so
  the whole instance waits until the rank is back and has reloaded all its slots at
  `reload_gbps` (`recover_after_s` is then required).
"""

from __future__ import annotations

from typing import Generator

import numpy as np

from epsim.eplb.cost import rebalance_params
from epsim.eplb.recovery import deployment_rejoin_terms, failure_terms
from epsim.eplb.survivors import refill_survivors


class ElasticEP:
    """Runs every `deployment.failures` entry as a SimPy process of `sim`.

    Attributes:
        events: one dict per failure or recovery: `kind`, `at_s`, `rank`, `num_alive`,
            `lost_requests`, `reloaded_experts` (layer x expert pairs), `reload_bytes`,
            `detection_us` (the dispatch timeout the survivors wait out), `rerun_us` (the timed-out
            forward run again: the last step's length), `stall_us` (detection, reloads and the
            rerun; the rebalance between them is the EPLB manager's event; a recovery's: the
            rejoin's resynchronisation), `terms` (a recovery's, `RecoveryTerms.as_dict`).
    """

    def __init__(self, sim):
        self.sim = sim
        d, m = sim.scenario.deployment, sim.scenario.model
        self.mode = d.elastic_recovery
        self.reload_bytes_per_us = d.reload_gbps * 1e3                # 1 GB/s = 1e3 bytes/us
        self.detection_us = d.moe_dispatch_timeout_s * 1e6
        self.expert_bytes = m.expert_bytes
        self.slots_per_rank = (m.num_experts + d.ep_num_redundant_experts) // d.ep_size
        self.events: list[dict] = []
        self.down = np.zeros(d.ep_size, dtype=bool)                   # failed, not yet back
        self.awaiting: set[int] = set()       # rejoined, slots unreferenced until a rebalance
        self._paused_until_us = 0.0                                   # `reload` mode outages
        for failure in d.failures:
            sim.add_process(lambda s, f=failure: self._outage(f))

    def _outage(self, failure) -> Generator:
        env = self.sim.env
        yield env.timeout(failure.at_s * 1e6)
        self.fail(failure.rank, failure.recover_after_s)
        if failure.recover_after_s is not None:
            yield env.timeout(failure.recover_after_s * 1e6)
            self.recover(failure.rank)

    def _event(self, kind: str, rank: int, **values) -> dict:
        event = {"kind": kind, "at_s": self.sim.env.now * 1e-6, "rank": rank,
                 "num_alive": int((~self.down).sum()), "lost_requests": 0,
                 "reloaded_experts": 0, "reload_bytes": 0.0, "detection_us": 0.0, "rerun_us": 0.0,
                 "stall_us": 0.0,
                 **values}
        self.events.append(event)
        return event

    def fail(self, rank: int, recover_after_s: float | None = None) -> dict:
        """Rank `rank` fails now (see the module docstring); returns the event."""
        sim = self.sim
        now_s = sim.env.now * 1e-6
        state, sched = sim.placement, sim.scheduler
        self.down[rank] = True
        self.awaiting.discard(rank)
        # a rank rejoined since is active in SGLang's mask: the survivors include its slots
        self.place_rejoined()
        alive = ~self.down
        # route first: the clients' resends of what the rank loses go to the live ranks
        sched.route_to(alive, now_s)
        lost = sched.drop_rank(rank, now_s)
        if self.mode == "reload":
            # every layer waits for the rank's experts: serving pauses until it is back, reloaded
            reload_bytes = self.slots_per_rank * state.physical_to_logical.shape[0] * self.expert_bytes
            end_us = sim.env.now + recover_after_s * 1e6 + reload_bytes / self.reload_bytes_per_us
            stall = max(0.0, end_us - max(sim.env.now, self._paused_until_us))
            self._paused_until_us = max(self._paused_until_us, end_us)
            if stall > 0:
                sim.stall(stall, "rank failure")
            return self._event("failure", rank, lost_requests=len(lost),
                               reloaded_experts=self.slots_per_rank * state.physical_to_logical.shape[0],
                               reload_bytes=reload_bytes, stall_us=stall)
        spr = self.slots_per_rank
        target, _ = refill_survivors(state.placement.with_alive(alive))
        # reloads: per survivor rank, its slots that changed; the slowest survivor sets the pause
        changed = target.physical_to_logical != state.physical_to_logical       # [layers, physical]
        per_rank = changed.reshape(changed.shape[0], -1, spr).sum(axis=(0, 2))   # [ranks]
        reload_us = float(per_rank.max()) * self.expert_bytes / self.reload_bytes_per_us
        state.set_alive(rank, False, placement=target)
        # the forward whose dispatch timed out runs again after the rebalance: one more step of
        # the length of the last one (none before the first step)
        last = sim.last_step
        rerun_us = 0.0 if last is None else last.end_us - last.start_us
        terms = failure_terms(0.0, reload_us, detection=self.detection_us, rerun_us=rerun_us)
        sim.stall(self.detection_us, "failure detection")
        if reload_us > 0:
            sim.stall(reload_us, "expert reload")
        if sim.eplb is not None:
            sim.eplb.trigger("failure")
        if rerun_us > 0:
            sim.stall(rerun_us, "forward rerun")
        return self._event("failure", rank, lost_requests=len(lost),
                           reloaded_experts=int(changed.sum()),
                           reload_bytes=float(changed.sum()) * self.expert_bytes,
                           detection_us=self.detection_us, rerun_us=rerun_us,
                           stall_us=terms.interruption_us)

    def recover(self, rank: int) -> dict:
        """Rank `rank` rejoins now with its slots' weights loaded; returns the event."""
        sim = self.sim
        state = sim.placement
        if self.mode == "replicas" and sim.eplb is not None:
            spr = self.slots_per_rank
            placeholders = state.physical_to_logical.copy()
            placeholders[:, rank * spr:(rank + 1) * spr] = 0
            state.set_alive(rank, False, placement=placeholders)
            self.awaiting.add(rank)
            sim.eplb.restart_interval()
        elif self.mode == "replicas":
            state.set_alive(rank, True)
        self.down[rank] = False
        sim.scheduler.route_to(~self.down, sim.env.now * 1e-6)
        if self.mode != "replicas":
            return self._event("recovery", rank)
        terms = deployment_rejoin_terms(sim.scenario, rebalance_params(sim.profile, sim.scenario.cluster),
                                        int(state.placement.logical_count.max()))
        sim.stall(terms.interruption_us, "rejoin resync")
        return self._event("recovery", rank, stall_us=terms.interruption_us, terms=terms.as_dict())

    def serving(self) -> np.ndarray | None:
        """[ranks] bool: ranks whose DP attention runs (None: all): the live ones and the
        rejoined ones whose expert slots wait for the next rebalance."""
        state = self.sim.placement
        if not self.awaiting:
            return None if state.all_alive else state.alive
        mask = state.alive.copy()
        mask[sorted(self.awaiting)] = True
        return None if mask.all() else mask

    def place_rejoined(self) -> None:
        """Unmask the rejoined ranks' slots, for a rebalance about to place experts on them."""
        for rank in sorted(self.awaiting):
            self.sim.placement.set_alive(rank, True)
        self.awaiting.clear()
