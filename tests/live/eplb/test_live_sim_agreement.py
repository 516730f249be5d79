"""The live module and the simulator agree on where tokens go and on what a rebalance moves.

Random placements of 8 experts over 4 gloo ranks (16 slots, 2 nodes of 2 ranks), with every rank
alive and with rank 2 masked (elastic EP). Live side: each rank's real block reports the static
replica it dispatches every expert to, and the real weight updater moves the weights between the
ranks (point-to-point over gloo) and reports its move plan. Simulator side: the traffic tables
the step loop uses (`epsim.sim.PlacementState`) and the rebalance-cost tally
(`epsim.eplb.rebalance_cost` over `plan_moves`' link tallies). They must agree exactly: same slot
per (source rank, layer, expert), same bytes sent and received per rank, same transfers, same
changed slots, local copies and reloads — and the slots must then hold their experts' weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from epsim.eplb import Placement, plan_moves, rebalance_cost, rebalance_params
from epsim.sim.placement import PlacementState
from live.config import MoeConfig
from live.dist import run_ranks
from live.eplb import ExpertWeightUpdater
from live.model import Qwen3MoeModel
from live.weights import fused_names, random_weights, to_hf_names

pytestmark = pytest.mark.slow

CONFIG = MoeConfig(hidden_size=16, moe_intermediate_size=8, num_experts=8, top_k=2, num_layers=2)
NUM_RANKS, NUM_SLOTS, NUM_NODES = 4, 16, 2
MASKED = 2                                      # the rank that fails in the masked cases
NUM_CASES = 8                                   # per mask


def _random_p2l(rng: np.random.Generator, num_slots: int = NUM_SLOTS) -> np.ndarray:
    """[layers, num_slots]: every expert once, random replicas, shuffled per layer."""
    return np.stack([rng.permutation(np.r_[np.arange(8), rng.integers(0, 8, num_slots - 8)])
                     for _ in range(CONFIG.num_layers)])


def _cases(seed: int = 15) -> list[tuple[Placement, Placement]]:
    """(old, new) placements: NUM_CASES with every rank alive, NUM_CASES with rank 2 masked
    (old and new keep every expert on an alive rank; the masked rank's slots stay as they are,
    as the EPLB managers leave them)."""
    rng = np.random.default_rng(seed)
    alive = np.ones(NUM_RANKS, dtype=bool)
    alive[MASKED] = False
    out = []
    while len(out) < 2 * NUM_CASES:
        masked = len(out) >= NUM_CASES
        old = Placement.from_physical_to_logical(_random_p2l(rng), 8, NUM_RANKS, NUM_NODES,
                                                 alive=alive if masked else None)
        if masked:
            if (old.live_counts() == 0).any():
                continue                                # an expert only on the failed rank
            new = old.expand(_random_p2l(rng, NUM_SLOTS - NUM_SLOTS // NUM_RANKS))   # its slots stay
        else:
            new = old.with_physical_to_logical(_random_p2l(rng))
        out.append((old, new))
    return out


def agreement_worker(rank: int, world_size: int, group, cases) -> list[dict]:
    """Per case: this rank's static dispatch row per layer, then (on alive ranks) the live
    updater's move plan and whether every slot holds its expert's weights afterwards."""
    weights = random_weights(CONFIG, range(CONFIG.num_layers), seed=0)   # identical on every rank
    out = []
    for old, new in cases:
        model = Qwen3MoeModel(CONFIG, placement=old, backend="torch", group=group)
        model.load_weights(to_hf_names(weights))
        dispatch = [model.block(layer).slot_of_expert.tolist() for layer in model.layer_ids]
        alive = np.flatnonzero(old.alive_mask).tolist()
        # the survivors' control group (every rank when none is masked); only members create it
        control = (None if old.all_alive else
                   dist.new_group(alive, backend="gloo", use_local_synchronization=True)
                   if rank in alive else None)
        result = {"dispatch": dispatch, "plan": None, "holds": None}
        if rank in alive:
            updater = ExpertWeightUpdater(model, layers_per_chunk=1, control_group=control)
            result["plan"] = updater.apply(new).plan
            held = model.placement.local_slots(rank)
            result["holds"] = all(
                torch.equal(tensor[slot], weights[name][int(held[layer, slot])])
                for layer in model.layer_ids
                for name, tensor in zip(fused_names(layer)[1:],
                                        model.routed_experts_weights_of_layer[layer])
                for slot in range(held.shape[1]))
        dist.barrier(group)
        out.append(result)
    return out


@pytest.fixture(scope="module")
def runs():
    cases = _cases()
    per_rank = run_ranks(agreement_worker, NUM_RANKS, "gloo", (cases,), timeout_s=600)
    return cases, per_rank


def test_cases_cover_both_masks_and_real_moves(runs):
    cases, _ = runs
    assert sum(old.all_alive for old, _ in cases) == NUM_CASES
    assert sum(not old.all_alive for old, _ in cases) == NUM_CASES
    for old, new in cases:
        assert new.changed_slots(old).sum() > 0


def test_live_and_simulator_agree_on_the_dispatch_map(runs):
    cases, per_rank = runs
    for i, (old, _) in enumerate(cases):
        live = np.array([per_rank[r][i]["dispatch"] for r in range(NUM_RANKS)])  # [ranks, layers, experts]
        simulated = PlacementState(old, "static").tables.source_slot             # the step loop's map
        np.testing.assert_array_equal(live, simulated, err_msg=f"case {i}")
        if not old.all_alive:
            assert (live // (NUM_SLOTS // NUM_RANKS) != MASKED).all()             # none to the failed rank


def test_live_and_simulator_agree_on_the_move_plan(runs):
    cases, per_rank = runs
    for i, (old, new) in enumerate(cases):
        alive = np.flatnonzero(old.alive_mask)
        plans = [per_rank[r][i]["plan"] for r in alive]
        assert all(p == plans[0] for p in plans), f"case {i}: ranks derived different plans"
        live = plans[0]
        expert_bytes = live["expert_bytes"]
        tallies = plan_moves(old, new, expert_bytes=expert_bytes).link_tallies()
        cost = rebalance_cost(old, new, expert_bytes, rebalance_params(), algorithm=None)
        send = (tallies["send_nvlink_bytes"] + tallies["send_rdma_bytes"]).sum(axis=0)   # [ranks]
        recv = (tallies["recv_nvlink_bytes"] + tallies["recv_rdma_bytes"]).sum(axis=0)
        transfers = (tallies["nvlink_transfers"] + tallies["rdma_transfers"]).sum(axis=0)
        np.testing.assert_array_equal(live["send_bytes_per_rank"], send, err_msg=f"case {i}")
        np.testing.assert_array_equal(live["recv_bytes_per_rank"], recv, err_msg=f"case {i}")
        np.testing.assert_array_equal(live["transfers_per_rank"], transfers, err_msg=f"case {i}")
        assert live["link_bytes"] == cost.nvlink_bytes + cost.rdma_bytes, f"case {i}"
        assert live["changed_slots"] == cost.changed_slots, f"case {i}"
        assert live["changed_slots_per_layer"] == new.changed_slots(old).tolist(), f"case {i}"
        assert live["reloads"] == 0 and live["moved_bytes"] == cost.moved_bytes, f"case {i}"
        for r in range(NUM_RANKS):
            if r not in alive:
                assert live["send_bytes_per_rank"][r] == live["recv_bytes_per_rank"][r] == 0


def test_the_moves_put_every_expert_where_the_placement_says(runs):
    cases, per_rank = runs
    for i, (old, _) in enumerate(cases):
        for r in np.flatnonzero(old.alive_mask):
            assert per_rank[r][i]["holds"], f"case {i}, rank {r}"
