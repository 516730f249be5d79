"""A P/D prefill server's DP rank by bootstrap room (`epsim.sim.rank_queues`): each arrival to
an independently drawn rank, every arrival on exactly one rank, in arrival order there."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.sim import simulate
from epsim.sim.clients import ClientQueues
from epsim.sim.engine import Simulation
from epsim.sim.rank_queues import RankQueues, routes_by_room
from tests.epsim.sim.test_engine import tiny_scenario


def _room_queues(num: int, ranks: int, seed: int = 3) -> RankQueues:
    return RankQueues(np.linspace(0.0, 1.0, num), ranks, np.random.default_rng(seed))


def test_every_arrival_lands_on_one_rank_in_arrival_order():
    q = _room_queues(1000, 4)
    counts = q.arrived(1.0)
    assert counts.sum() == 1000 and (counts > 0).all()
    orders = np.concatenate([q.request_ids(np.full(c, r), np.arange(c))
                             for r, c in enumerate(counts)])
    assert sorted(orders.tolist()) == list(range(1000))
    for r, c in enumerate(counts):      # a rank's queue is first come, first served
        ids = q.request_ids(np.full(c, r), np.arange(c))
        assert (np.diff(ids) > 0).all()


def test_room_ranks_are_uniform_draws_not_round_robin():
    q = _room_queues(40000, 4)
    counts = q.arrived(1.0)
    # binomial(40000, 1/4): the spread of independent draws (sd ~87), not round-robin's 0
    assert np.abs(counts - 10000).max() < 500
    first = q.arrived(q.arrival_s[99])               # the first 100 arrivals
    assert first.sum() == 100 and first.max() - first.min() > 1
    rr = RankQueues(np.linspace(0.0, 1.0, 100), 4)
    assert rr.arrived(1.0).tolist() == [25, 25, 25, 25]


def test_sends_added_later_are_routed_too():
    q = ClientQueues(3, offset=0, rooms=np.random.default_rng(5))
    q.add([0.0, 0.1, 0.2], [0, 1, 2])
    q.add([0.15], [3])                                   # out of order: inserted, re-indexed
    assert q.arrived(1.0).sum() == 4
    ids = [q.request_ids(np.full(c, r), np.arange(c)).tolist()
           for r, c in enumerate(q.arrived(1.0))]
    assert sorted(sum(ids, [])) == [0, 1, 2, 3]


def test_a_failed_rank_under_room_routing_says_what_is_not_modelled():
    q = _room_queues(10, 2)
    with pytest.raises(ValueError, match="bootstrap room"):
        q.route_to(np.array([True, False]), 0.5)


def test_a_prefill_server_or_an_old_decode_with_dp_ranks_routes_by_room():
    prefill = tiny_scenario(deployment={"disaggregation_mode": "prefill",
                                        "enable_dp_attention": True, "dp_size": 4})
    assert routes_by_room(prefill.deployment, prefill.dp_size)
    assert not routes_by_room(tiny_scenario().deployment, 4)
    decode = tiny_scenario(deployment={"disaggregation_mode": "decode"})
    assert not routes_by_room(decode.deployment, 4)
    # a decode told to (SGLang 0.4.8-0.5.6's round_robin_scheduler under P/D) routes by room too
    old = tiny_scenario(deployment={"disaggregation_mode": "decode",
                                    "load_balance_method": "follow_bootstrap_room"})
    assert routes_by_room(old.deployment, 4) and not routes_by_room(old.deployment, 1)
    agg = tiny_scenario(deployment={"load_balance_method": "follow_bootstrap_room"})
    assert not routes_by_room(agg.deployment, 4)            # no rooms without disaggregation
    assert not routes_by_room(prefill.deployment, 1)
    sim = Simulation(prefill)
    assert not sim.scheduler.queues.one_epoch()


def test_uneven_ranks_wait_longer_than_round_robin_at_the_same_load(monkeypatch):
    # the same prefill server and arrivals, by room and (patched) round-robin: lock-step
    # forwards serve the busiest rank's queue, so chance imbalance lengthens the mean TTFT
    sc = tiny_scenario(deployment={"enable_dp_attention": True, "dp_size": 4,
                                   "chunked_prefill_size": 256, "disaggregation_mode": "prefill"},
                       workload={"arrivals": {"kind": "poisson", "rate_per_s": 300.0},
                                 "output_len": {"kind": "fixed", "value": 1}, "duration_s": 0.6})
    rooms = simulate(sc)
    monkeypatch.setattr("epsim.sim.engine.routes_by_room", lambda deployment, dp: False)
    robin = simulate(sc)
    assert _mean_ttft_s(rooms) > 1.05 * _mean_ttft_s(robin)


def _mean_ttft_s(result) -> float:
    done = ~np.isnan(result.first_token_s) & ~result.is_initial
    return float((result.first_token_s[done] - result.arrival_s[done]).mean())


def test_a_room_routed_decode_runs_its_busiest_rank_fuller_than_round_robin(monkeypatch):
    # the same DP-attention decode and arrivals, by room and (patched) round-robin: chance
    # imbalance leaves some rank holding more than round-robin's even share, step after step
    sc = tiny_scenario(deployment={"disaggregation_mode": "decode", "enable_dp_attention": True,
                                   "dp_size": 4, "load_balance_method": "follow_bootstrap_room"},
                       workload={"arrivals": {"kind": "poisson", "rate_per_s": 300.0},
                                 "duration_s": 0.3})

    def busiest_tokens(routed: bool) -> float:
        monkeypatch.setattr("epsim.sim.engine.routes_by_room", lambda deployment, dp: routed)
        sim, seen = Simulation(sc), []
        sim.add_observer(lambda info: seen.append(info.tokens_per_rank.max()))
        sim.run()
        return float(np.mean(seen))

    # ~7.5 requests on round-robin's busiest rank at this load, ~9.9 by room (seed 7)
    assert busiest_tokens(True) > 1.2 * busiest_tokens(False)
