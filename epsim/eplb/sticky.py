"""`sticky`: balance at least as well as DeepSeek's global policy, and move few experts.

A fresh DeepSeek placement is computed from scratch on every rebalance, so a small change in
loads reshuffles most slots and every reshuffled slot is an expert's weights sent over
NVLink or RDMA. Per layer, `sticky`:

  1. gives experts the same replica counts as DeepSeek (greedy on load per replica);
  2. sets a *target* for the busiest GPU: by default DeepSeek global's (equal balancedness);
     with `tolerance_frac`, DeepSeek global's placement is first improved by pairwise swaps
     between the busiest GPU and any other (`refine`) and the target is the refined busiest
     GPU times `1 + tolerance_frac`;
  3. incremental candidate: keeps every replica that the previous placement already has
     where it is, puts the missing replicas into freed slots on the least-loaded GPUs, then
     swaps, fewest added moves first, until the busiest GPU is within the target;
  4. aligned candidate: step 2's placement with its GPUs renumbered (assignment problem)
     and slots reordered to overlap the previous placement most (balance unchanged);
  5. returns whichever candidate meets the target with fewer changed slots.

Without a previous placement it returns the refined placement, never worse balanced than
DeepSeek's global policy. It is a global policy: replicas may go to any GPU of any node.
"""

from __future__ import annotations

import numpy as np

from epsim.eplb.deepseek import deepseek_placement
from epsim.eplb.inputs import check_shape, check_weight
from epsim.eplb.placement import Placement
from epsim.errors import PlacementError

# Swaps must lower the busiest GPU's load by more than this fraction of the mean GPU load;
# smaller gains are float noise, not balance.
_MIN_GAIN_FRAC = 1e-9


def refine(slot_weight: np.ndarray, slot_expert: np.ndarray, slots_per_gpu: int,
           target: float = 0.0, previous: np.ndarray | None = None,
           max_swaps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Swap slot contents between the busiest GPU and another until no swap helps.

    Each step takes the busiest GPU `g` and, over every slot `a` on `g` and `b` on another
    GPU `h`, considers the swaps that bring `max(load_g - d, load_h + d)`, `d = w_a - w_b`,
    below `load_g`. It takes the one minimizing that maximum or, with `previous`, the one
    that adds the fewest changed slots (ties: the lower maximum). Stops when the busiest GPU
    is at or below `target`, when no swap lowers it, or after `max_swaps` (default: 4 x slots).

    Args:
        slot_weight: [physical] float64, tokens each slot serves.
        slot_expert: [physical] int64, logical expert in each slot (moves with its weight).
        slots_per_gpu: consecutive slots per GPU.
        previous: [physical] int64, the placement in service, to count changed slots.
    Returns:
        (slot_weight, slot_expert) after the swaps, new arrays.
    """
    weight = np.array(slot_weight, dtype=np.float64, copy=True)
    expert = np.array(slot_expert, dtype=np.int64, copy=True)
    num_physical = weight.shape[0]
    num_gpus = num_physical // slots_per_gpu
    if num_gpus < 2:
        return weight, expert
    gpu_of_slot = np.arange(num_physical) // slots_per_gpu
    loads = weight.reshape(num_gpus, slots_per_gpu).sum(axis=1)            # [gpus]
    min_gain = _MIN_GAIN_FRAC * loads.sum() / num_gpus
    same = None if previous is None else expert == previous                  # [physical]
    for _ in range(max_swaps if max_swaps is not None else 4 * num_physical):
        g = int(np.argmax(loads))
        if loads[g] <= target:
            break
        own = slice(g * slots_per_gpu, (g + 1) * slots_per_gpu)
        delta = weight[own, None] - weight[None, :]                          # [slots, physical]
        pair_max = np.maximum(loads[g] - delta, loads[gpu_of_slot] + delta)
        useful = (delta > 0) & (pair_max < loads[g] - min_gain)
        useful[:, own] = False
        if not useful.any():
            break
        if same is None:
            flat = int(np.argmin(np.where(useful, pair_max, np.inf)))
        else:
            # changed slots a swap adds: matches with `previous` before minus after
            added = (same[own, None].astype(np.int8) + same[None, :]
                     - (previous[own, None] == expert[None, :])              # b's expert into a
                     - (expert[own, None] == previous[None, :]))             # a's expert into b
            flat = int(np.argmin(np.where(useful, added * (4.0 * loads[g] + 1.0) + pair_max, np.inf)))
        a, b = g * slots_per_gpu + flat // num_physical, flat % num_physical
        d = weight[a] - weight[b]
        loads[g] -= d
        loads[gpu_of_slot[b]] += d
        weight[[a, b]] = weight[[b, a]]
        expert[[a, b]] = expert[[b, a]]
        if same is not None:
            same[[a, b]] = expert[[a, b]] == previous[[a, b]]
    return weight, expert


def _incremental(weight: np.ndarray, counts: np.ndarray, previous: np.ndarray,
                 slots_per_gpu: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the previous slots that are still wanted; fill the rest heaviest-first.

    Args:
        weight: [logical] loads; counts: [logical] wanted replicas; previous: [physical] ids.
    Returns:
        (slot_weight, slot_expert), [physical] each.
    """
    num_physical = previous.shape[0]
    num_gpus = num_physical // slots_per_gpu
    per_replica = weight / counts                                            # [logical]
    kept = np.zeros_like(counts)
    expert = np.full(num_physical, -1, dtype=np.int64)
    for slot, e in enumerate(previous):
        if kept[e] < counts[e]:
            expert[slot] = e
            kept[e] += 1
    slot_weight = np.where(expert >= 0, per_replica[np.maximum(expert, 0)], 0.0)
    missing = np.repeat(np.arange(counts.shape[0]), counts - kept)          # replicas to place
    missing = missing[np.argsort(-per_replica[missing], kind="stable")]
    free = expert < 0
    loads = slot_weight.reshape(num_gpus, slots_per_gpu).sum(axis=1)
    free_per_gpu = free.reshape(num_gpus, slots_per_gpu).sum(axis=1)
    for e in missing:
        g = int(np.argmin(np.where(free_per_gpu > 0, loads, np.inf)))
        slot = g * slots_per_gpu + int(np.argmax(free[g * slots_per_gpu:(g + 1) * slots_per_gpu]))
        expert[slot], slot_weight[slot], free[slot] = e, per_replica[e], False
        loads[g] += per_replica[e]
        free_per_gpu[g] -= 1
    return slot_weight, expert


def _align(slot_expert: np.ndarray, previous: np.ndarray, slots_per_gpu: int) -> np.ndarray:
    """Renumber GPUs and reorder slots inside each GPU to match `previous` most.

    GPU loads are only permuted, so balance is unchanged. GPUs are matched by the
    assignment problem on shared experts; inside a GPU an expert the old GPU held returns to
    its old slot.

    Returns:
        [physical] int64 logical ids.
    """
    from scipy.optimize import linear_sum_assignment  # scipy only when a previous placement exists

    num_physical = slot_expert.shape[0]
    num_gpus = num_physical // slots_per_gpu
    num_logical = int(max(slot_expert.max(), previous.max())) + 1
    new_hist = np.zeros((num_gpus, num_logical), dtype=np.int64)
    old_hist = np.zeros((num_gpus, num_logical), dtype=np.int64)
    gpu_of_slot = np.arange(num_physical) // slots_per_gpu
    np.add.at(new_hist, (gpu_of_slot, slot_expert), 1)
    np.add.at(old_hist, (gpu_of_slot, previous), 1)
    overlap = np.minimum(new_hist[:, None, :], old_hist[None, :, :]).sum(axis=2)  # [new gpus, old gpus]
    new_gpu, old_gpu = linear_sum_assignment(-overlap)
    out = np.empty(num_physical, dtype=np.int64)
    for src, dst in zip(new_gpu, old_gpu):
        items = list(slot_expert[src * slots_per_gpu:(src + 1) * slots_per_gpu])
        old = previous[dst * slots_per_gpu:(dst + 1) * slots_per_gpu]
        row = np.full(slots_per_gpu, -1, dtype=np.int64)
        for i, e in enumerate(old):          # experts that stay keep their slot
            if e in items:
                row[i] = e
                items.remove(e)
        row[row < 0] = items
        out[dst * slots_per_gpu:(dst + 1) * slots_per_gpu] = row
    return out


def sticky_placement(weight, num_replicas: int, num_groups: int = 1, num_nodes: int = 1,
                     num_gpus: int = 1, previous: Placement | None = None,
                     tolerance_frac: float | None = None) -> Placement:
    """Balanced placement that keeps experts where `previous` had them (module docstring).

    Args:
        weight: [layers, logical] loads.
        num_replicas, num_groups, num_nodes, num_gpus: as `deepseek_placement` (groups are
            checked but not used: sticky is a global policy).
        previous: the placement in service, same shape; None = place from scratch.
        tolerance_frac: None: every layer's busiest GPU must be no busier than under
            DeepSeek's global policy; a number: no busier than (1 + tolerance_frac) x the
            refined placement's (0 = the best this algorithm finds, at more moves).
    Returns:
        Placement meeting that target per layer (with no previous placement: the refined one).
    Raises:
        PlacementError: bad inputs, a previous placement of another shape, or a negative
            tolerance.
    """
    weight = check_weight(weight)
    num_layers, num_logical = weight.shape
    check_shape(num_logical, num_replicas, num_groups, num_nodes, num_gpus)
    if tolerance_frac is not None and not tolerance_frac >= 0:
        raise PlacementError(f"tolerance_frac ({tolerance_frac}) must be >= 0")
    if previous is not None:
        expected = (num_layers, num_replicas)
        if previous.physical_to_logical.shape != expected or previous.num_logical != num_logical:
            raise PlacementError(
                f"previous placement (shape {list(previous.physical_to_logical.shape)}, "
                f"{previous.num_logical} experts) must match [layers, num_replicas] = "
                f"{list(expected)} with {num_logical} experts")
        if previous.num_ranks != num_gpus:
            raise PlacementError(f"previous placement num_ranks ({previous.num_ranks}) must equal "
                                 f"num_gpus ({num_gpus})")
    slots_per_gpu = num_replicas // num_gpus
    base = deepseek_placement(weight, num_replicas, 1, 1, num_gpus)
    counts = base.logical_count                                            # [layers, logical]
    out = np.empty((num_layers, num_replicas), dtype=np.int64)
    for layer in range(num_layers):
        w = weight[layer]
        per_replica = w / counts[layer]
        start = base.physical_to_logical[layer]
        prev = None if previous is None else previous.physical_to_logical[layer]
        if prev is not None and tolerance_frac is None:
            # equal balancedness: DeepSeek global's own placement is a valid fallback
            best = start
            target = per_replica[start].reshape(num_gpus, slots_per_gpu).sum(axis=1).max()
        else:
            best_w, best = refine(per_replica[start], start, slots_per_gpu)
            if prev is None:
                out[layer] = best
                continue
            target = best_w.reshape(num_gpus, slots_per_gpu).sum(axis=1).max() * (1.0 + tolerance_frac)
        inc_w, inc = _incremental(w, counts[layer], prev, slots_per_gpu)
        inc_w, inc = refine(inc_w, inc, slots_per_gpu, target=target, previous=prev)
        inc_ok = inc_w.reshape(num_gpus, slots_per_gpu).sum(axis=1).max() <= target * (1 + 1e-12)
        inc_changed = int((inc != prev).sum())
        # no placement changes fewer slots than the replicas it adds; then skip aligning
        fewest = int(np.maximum(counts[layer] - previous.logical_count[layer], 0).sum())
        if inc_ok and inc_changed <= fewest:
            out[layer] = inc
            continue
        aligned = _align(best, prev, slots_per_gpu)
        out[layer] = inc if inc_ok and inc_changed <= int((aligned != prev).sum()) else aligned
    return Placement.from_physical_to_logical(out, num_logical, num_gpus, num_nodes)
