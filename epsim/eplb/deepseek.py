"""DeepSeek's EPLB (github.com/deepseek-ai/EPLB), rewritten in numpy from its description.

Hierarchical policy (when expert groups divide evenly over nodes):
  1. pack expert groups onto nodes, balancing node loads (greedy, heaviest group first);
  2. inside each node, replicate the experts whose per-replica load is highest until the
     node's slots are full;
  3. pack each node's replicas onto its GPUs, equal slots per GPU, balancing GPU loads.
Global policy (otherwise): one group and one node, i.e. steps 2 and 3 over the whole cluster.

Arithmetic is float32, like the reference (`weight.float()`), so ties break identically and
`rebalance_experts` reproduces its published example exactly.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from epsim.eplb.inputs import check_shape, check_weight
from epsim.eplb.placement import Placement
from epsim.errors import PlacementError

Policy = Literal["auto", "hierarchical", "global"]


def balanced_packing(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Put `items` weighted items into `num_packs` packs of `items // num_packs` each.

    Greedy longest-processing-time: items in descending weight (stable, so equal weights
    keep index order) each go to the lightest pack that still has room (lowest index on ties).

    Args:
        weight: [rows, items] float32; rows are packed independently.
    Returns:
        pack_index: [rows, items] int64, the pack of each item.
        rank_in_pack: [rows, items] int64, the item's position inside its pack.
    """
    num_rows, num_items = weight.shape
    items_per_pack = num_items // num_packs
    if items_per_pack == 1:  # one item per pack: the identity is as good as any
        return (np.broadcast_to(np.arange(num_items), weight.shape).copy(),
                np.zeros(weight.shape, dtype=np.int64))
    order = np.argsort(-weight, axis=1, kind="stable")                      # [rows, items]
    sorted_weight = np.take_along_axis(weight, order, axis=1)
    # the weight of each pack that has room, inf once full (flat [rows * packs]): the same
    # values the rule compares, kept as packs fill instead of masked every step
    open_weight = np.zeros(num_rows * num_packs, dtype=weight.dtype)
    pack_items = np.zeros(num_rows * num_packs, dtype=np.int64)
    row_start = np.arange(num_rows) * num_packs
    packs = np.empty((num_items, num_rows), dtype=np.int64)                # by step
    ranks = np.empty((num_items, num_rows), dtype=np.int64)
    first = 0
    if (sorted_weight[:, :num_packs] > 0).all():
        # every pack is empty and lightest in turn: item j of the first num_packs goes to pack j
        first = num_packs
        packs[:first], ranks[:first] = np.arange(first)[:, None], 0
        open_weight += sorted_weight[:, :first].ravel()
        pack_items[:] = 1
    for step in range(first, num_items):
        pack = open_weight.reshape(num_rows, num_packs).argmin(axis=1)      # [rows]
        flat = row_start + pack
        taken = pack_items[flat]
        packs[step], ranks[step] = pack, taken
        open_weight[flat] += sorted_weight[:, step]
        pack_items[flat] = taken + 1
        full = taken + 1 == items_per_pack
        if full.any():
            open_weight[flat[full]] = np.inf
    pack_index = np.empty(weight.shape, dtype=np.int64)
    rank_in_pack = np.empty(weight.shape, dtype=np.int64)
    np.put_along_axis(pack_index, order, packs.T, axis=1)
    np.put_along_axis(rank_in_pack, order, ranks.T, axis=1)
    return pack_index, rank_in_pack


def replicate_experts(weight: np.ndarray, num_physical: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add replicas one at a time to the expert with the highest load per replica.

    This greedy minimizes the largest per-replica load `weight / count` for the slot budget.
    The first `logical` slots hold experts 0..logical-1; slot `i >= logical` holds the i-th
    added replica.

    Args:
        weight: [rows, logical] float32 loads.
        num_physical: slots per row, >= logical.
    Returns:
        physical_to_logical: [rows, physical] int64.
        replica_rank: [rows, physical] int64, 0 for the first replica of an expert.
        logical_count: [rows, logical] int64.
    """
    num_rows, num_logical = weight.shape
    physical_to_logical = np.tile(np.arange(num_physical, dtype=np.int64), (num_rows, 1))
    replica_rank = np.zeros((num_rows, num_physical), dtype=np.int64)
    logical_count = np.ones((num_rows, num_logical), dtype=np.int64)
    rows = np.arange(num_rows)
    for slot in range(num_logical, num_physical):
        expert = np.argmax(weight / logical_count.astype(weight.dtype), axis=1)   # [rows]
        physical_to_logical[:, slot] = expert
        replica_rank[:, slot] = logical_count[rows, expert]
        logical_count[rows, expert] += 1
    return physical_to_logical, replica_rank, logical_count


def _inverse(perm: np.ndarray) -> np.ndarray:
    """Row-wise inverse of permutations [rows, n]."""
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.broadcast_to(np.arange(perm.shape[1]), perm.shape), axis=1)
    return inv


def rebalance_hierarchical(weight: np.ndarray, num_physical: int, num_groups: int, num_nodes: int,
                           num_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three-step hierarchical policy (module docstring).

    "mlog" numbers logical experts node-major after step 1: node n holds mlog ids
    `n * logical/nodes ...`; "phy" numbers a node's replicas before step 3 orders them by GPU.

    Args:
        weight: [layers, logical] float32.
    Returns:
        physical_to_logical, replica_rank: [layers, physical] int64;
        logical_count: [layers, logical] int64.
    """
    num_layers, num_logical = weight.shape
    group_size = num_logical // num_groups
    groups_per_node = num_groups // num_nodes
    logical_per_node = num_logical // num_nodes
    physical_per_node = num_physical // num_nodes
    slots_per_gpu = num_physical // num_gpus

    # 1. groups -> nodes
    group_weight = weight.reshape(num_layers, num_groups, group_size).sum(axis=2)   # [layers, groups]
    group_node, group_rank = balanced_packing(group_weight, num_nodes)
    group_start = (group_node * groups_per_node + group_rank) * group_size          # [layers, groups]
    log_to_mlog = (group_start[:, :, None] + np.arange(group_size)).reshape(num_layers, num_logical)
    mlog_to_log = _inverse(log_to_mlog)

    # 2. replicas inside each node: rows become (layer, node)
    mlog_weight = np.take_along_axis(weight, mlog_to_log, axis=1).reshape(-1, logical_per_node)
    phy_to_mlog, phy_rank, mlog_count = replicate_experts(mlog_weight, physical_per_node)

    # 3. replicas -> GPUs of the node
    replica_weight = mlog_weight / mlog_count.astype(weight.dtype)                 # [layers*nodes, logical/node]
    phy_weight = np.take_along_axis(replica_weight, phy_to_mlog, axis=1)           # [layers*nodes, physical/node]
    gpu_index, rank_in_gpu = balanced_packing(phy_weight, num_gpus // num_nodes)
    slot_to_phy = _inverse(gpu_index * slots_per_gpu + rank_in_gpu)

    slot_to_mlog = np.take_along_axis(phy_to_mlog, slot_to_phy, axis=1)           # local mlog ids
    slot_to_mlog = (slot_to_mlog.reshape(num_layers, num_nodes, physical_per_node)
                    + (np.arange(num_nodes) * logical_per_node)[None, :, None]).reshape(num_layers, -1)
    physical_to_logical = np.take_along_axis(mlog_to_log, slot_to_mlog, axis=1)
    replica_rank = np.take_along_axis(phy_rank, slot_to_phy, axis=1).reshape(num_layers, -1)
    logical_count = np.take_along_axis(mlog_count.reshape(num_layers, -1), log_to_mlog, axis=1)
    return physical_to_logical, replica_rank, logical_count


def deepseek_placement(weight, num_replicas: int, num_groups: int = 1, num_nodes: int = 1,
                       num_gpus: int = 1, policy: Policy = "auto") -> Placement:
    """DeepSeek EPLB as a `Placement`.

    Args:
        weight: [layers, logical] loads (tokens routed per logical expert).
        num_replicas: physical slots per layer, a multiple of `num_gpus`.
        num_groups: expert groups (DeepSeek-V3 `n_group`; 1 for Qwen3).
        num_nodes: nodes; the placement records it even under the global policy.
        policy: `auto` (hierarchical iff `num_groups % num_nodes == 0`, as the reference),
            `hierarchical` or `global`.
    Raises:
        PlacementError: bad loads or counts (see `epsim.eplb.inputs`), or `hierarchical`
            asked for when groups do not divide over nodes.
    """
    weight = check_weight(weight)
    check_shape(weight.shape[1], num_replicas, num_groups, num_nodes, num_gpus)
    hierarchical = num_groups % num_nodes == 0
    if policy == "hierarchical" and not hierarchical:
        raise PlacementError(f"num_groups ({num_groups}) must be a multiple of num_nodes "
                             f"({num_nodes}) for the hierarchical policy")
    if policy not in ("auto", "hierarchical", "global"):
        raise PlacementError(f"policy ({policy!r}) must be one of ['auto', 'hierarchical', 'global']")
    if policy == "global":
        hierarchical = False
    weight32 = weight.astype(np.float32)
    if hierarchical:
        p2l, rank, _ = rebalance_hierarchical(weight32, num_replicas, num_groups, num_nodes, num_gpus)
    else:
        p2l, rank, _ = rebalance_hierarchical(weight32, num_replicas, 1, 1, num_gpus)
    return Placement.from_physical_to_logical(p2l, weight.shape[1], num_gpus, num_nodes,
                                              replica_rank=rank)


def rebalance_experts(weight, num_replicas: int, num_groups: int, num_nodes: int,
                      num_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference EPLB's entry point, same signature and semantics, numpy in and out.

    Returns:
        phy2log: [layers, num_replicas] int64, logical expert of each slot.
        log2phy: [layers, logical, max_replicas] int64, slots of each expert, -1 padded.
        logcnt: [layers, logical] int64, replicas per expert.
    """
    return deepseek_placement(weight, num_replicas, num_groups, num_nodes, num_gpus).as_tuple()
