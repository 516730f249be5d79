"""Token movement of one MoE dispatch: the pairs each rank computes and the copies on each link.

Expected values over `[layers, ranks]` from a step's logical expert loads (token-expert pairs,
`SkewModel.loads`), the tokens each source rank holds, and a placement of physical expert
slots on ranks (slot p lives on rank `p // slots_per_rank`, rank r on node
`r // ranks_per_node`). A token picks logical expert e with probability
`pi_e = load_e / num_tokens` (its inclusion probability); combine moves the same copies back.

Copy counting follows the kernels (`dedup`):
  "pair"  DeepEP low-latency, Mooncake EP: one copy per (token, selected expert).
  "rank"  our `torch` backend (and DeepEP normal inside one node): one copy per destination
          rank the token hits, hit probability `1 - prod_{e on r}(1 - pi_e)`.
  "node"  DeepEP normal across nodes: one RDMA copy per destination node (to the rank with the
          sender's local index), then NVLink forwarding to each hit rank of that node.
          Group-limited routing (DeepSeek-V3: each token's experts lie in `topk_group` of
          `n_group` groups) caps the nodes a token reaches at `max_nodes_per_token` of N: a
          node is picked with f = max_nodes / N, and then its experts with pi / f. (With
          per-source replica maps the node-hit probabilities are scaled to sum to the cap.)
Copies to the sender's own rank cross no link (`self_copies`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.derived import derived
from epsim.cost.groups import group_prod, rank_sum, rank_sum_strided
from epsim.cost.tables import PlacementTables
from epsim.errors import SpecError
from epsim.fast_init import fast_init
from epsim.spec.model import ModelSpec

DEDUP_KINDS = ("pair", "rank", "node")


@fast_init
@dataclass(frozen=True, eq=False)
class Traffic:
    """One dispatch's expected token movement, `[layers, ranks]` float64 each.

    Attributes:
        pairs: token-expert pairs each rank's experts compute (dispatched = combined pairs).
        active_experts: local expert slots that receive at least one token.
        nvl_send, nvl_recv: token copies each rank sends / receives over NVLink.
        rdma_send, rdma_recv: token copies each rank sends / receives over RDMA.
        self_copies: copies a rank routes to itself (no link).
        num_tokens: tokens in the batch (all source ranks).
        dedup: "pair" | "rank" | "node" | "" (no copies counted, the `none` backend).
        multi_node: the ranks span nodes (else every RDMA count is zero).
        fraction: the batch share these counts are for (two-batch overlap: one micro-batch, 0.5).
        max_slot_pairs: [layers] pairs in the busiest (expert slot, source rank) queue: a
            low-latency kernel receives each such queue with one warp group (DeepEP's
            `internode_ll.cu` and Mooncake EP's `mooncake_ep_kernel.cu` dispatch, receive phase:
            `responsible_expert_idx` = source rank x local experts + local expert), so the
            busiest queue paces them, and a hot expert is a hot queue from every source.
    """

    pairs: np.ndarray
    active_experts: np.ndarray
    nvl_send: np.ndarray
    nvl_recv: np.ndarray
    rdma_send: np.ndarray
    rdma_recv: np.ndarray
    self_copies: np.ndarray
    num_tokens: float
    dedup: str
    multi_node: bool = False
    fraction: float = 1.0
    max_slot_pairs: np.ndarray | None = None

    @derived
    def nvl_copies(self) -> np.ndarray:
        """[layers, ranks] the busier direction of each rank's NVLink (max of send, receive)."""
        return np.maximum(self.nvl_send, self.nvl_recv)

    @derived
    def rdma_copies(self) -> np.ndarray:
        """[layers, ranks] the busier direction of each rank's RDMA NIC."""
        return np.maximum(self.rdma_send, self.rdma_recv)

    @derived
    def copies(self) -> np.ndarray:
        """[layers, ranks] link-crossing copies, busier direction (per-copy overhead)."""
        return np.maximum(self.nvl_send + self.rdma_send, self.nvl_recv + self.rdma_recv)

    @derived
    def _peaks(self) -> dict[str, np.ndarray]:
        return {}

    def peak(self, name: str) -> np.ndarray:
        """[layers] the busiest rank's `name` count (`pairs`, `nvl_copies`, `rdma_copies`,
        `copies`): what the costs read (`comm_us`, `network_us`), reduced once however many
        costs read it (a dispatch and a combine)."""
        peaks = self._peaks
        if name not in peaks:
            peaks[name] = getattr(self, name).max(axis=-1)
        return peaks[name]


def _active(slot_loads: np.ndarray, fraction: float, group: int) -> np.ndarray:
    """[..., ranks] expected busy slots per rank when a micro-batch takes `fraction` of each
    slot's tokens: a slot with `x` tokens keeps at least one with probability `1 - (1 - f)^x`."""
    if fraction < 1.0:
        return rank_sum(-np.expm1(slot_loads * np.log1p(-fraction)), group)
    if slot_loads.min() > 0:                    # high load: every slot is busy
        return np.full((*slot_loads.shape[:-1], slot_loads.shape[-1] // group), float(group))
    busy = slot_loads > 0
    if group == 2:
        return np.add(busy[..., 0::2], busy[..., 1::2], dtype=np.float64)
    return rank_sum(busy.astype(np.float64), group)


def max_nodes_per_token(model: ModelSpec, num_nodes: int) -> float | None:
    """Nodes one token's experts may span under group-limited routing, or None (no limit).

    DeepSeek-V3 picks `topk_group` of `num_expert_groups` groups per token; with experts laid
    out contiguously a group covers `num_nodes / num_expert_groups` nodes (at least one node's
    share), so a token reaches at most `topk_group * max(1, num_nodes / groups)` nodes
    (EP 64 on 8 nodes: 4 of 8).
    """
    groups = model.num_expert_groups
    if groups <= 1 or model.topk_group >= groups or num_nodes <= 1:
        return None
    cap = model.topk_group * max(1.0, num_nodes / groups)
    return cap if cap < num_nodes else None


def count_traffic(loads: np.ndarray, tokens_per_rank: np.ndarray, tables: PlacementTables,
                  dedup: str, fraction: float = 1.0,
                  max_nodes_per_token: float | None = None) -> Traffic:
    """Expected token movement of one dispatch.

    Args:
        loads: [layers, experts] float64 token-expert pairs per logical expert; rows sum to
            num_tokens * top_k. `[steps, layers, experts]` prices many steps of the same
            batch shape at once (the fast engine; the returned arrays gain the `steps` axis).
        tokens_per_rank: [ranks] float64 tokens each source rank dispatches.
        tables: `build_tables` of the current placement.
        dedup: "pair" | "rank" | "node" (see module doc) or "" for pairs only.
        fraction: the share of the batch one micro-batch carries (two-batch overlap: 0.5);
            counts scale by it, busy slots follow `_active`.
        max_nodes_per_token: nodes a token's experts may span (group-limited routing), or None.
    Returns:
        Traffic with `[layers, ranks]` arrays.
    Raises:
        SpecError: shapes that do not match the placement, or an unknown dedup.
    """
    if dedup not in DEDUP_KINDS + ("",):
        raise SpecError(f"dedup ({dedup!r}) must be one of {list(DEDUP_KINDS)}")
    loads = np.asarray(loads, dtype=np.float64)
    tokens = np.asarray(tokens_per_rank, dtype=np.float64)
    if loads.shape[-2:] != (tables.placement.num_layers, tables.placement.num_logical) or loads.ndim > 3:
        raise SpecError(f"loads (shape {list(loads.shape)}) must be [layers, experts] = "
                        f"[{tables.placement.num_layers}, {tables.placement.num_logical}]")
    if tokens.shape != (tables.placement.num_ranks,):
        raise SpecError(f"tokens_per_rank (shape {list(tokens.shape)}) must be [ranks] = "
                        f"[{tables.placement.num_ranks}]")
    num_tokens = float(tokens.sum())
    if tables.static_map is None:
        return _traffic_shared(loads, tokens, num_tokens, tables, dedup, fraction,
                               max_nodes_per_token)
    if loads.ndim == 3 and dedup not in ("pair", ""):
        return stack_traffic([_traffic_per_source(step, tokens, num_tokens, tables, dedup, fraction,
                                                  max_nodes_per_token) for step in loads])
    return _traffic_per_source(loads, tokens, num_tokens, tables, dedup, fraction,
                               max_nodes_per_token)


def _cap_nodes(node_hit: np.ndarray, max_nodes: float | None) -> np.ndarray:
    """[..., nodes] node-hit probabilities scaled so a token reaches at most `max_nodes` nodes
    in expectation (group-limited routing); unchanged without a cap."""
    if max_nodes is None:
        return node_hit
    expected = node_hit.sum(axis=-1, keepdims=True)
    return node_hit * np.minimum(1.0, max_nodes / np.maximum(expected, 1e-300))


_TRAFFIC_ARRAYS = ("pairs", "active_experts", "nvl_send", "nvl_recv", "rdma_send", "rdma_recv",
                   "self_copies", "max_slot_pairs")


def stack_traffic(steps: list[Traffic]) -> Traffic:
    """One Traffic with a leading `[steps]` axis from per-step ones of the same batch."""
    first = steps[0]
    arrays = {name: np.stack([getattr(t, name) for t in steps]) for name in _TRAFFIC_ARRAYS}
    return Traffic(num_tokens=first.num_tokens, dedup=first.dedup, multi_node=first.multi_node,
                   fraction=first.fraction, **arrays)


def traffic_at(traffic: Traffic, index: int) -> Traffic:
    """Step `index` of a Traffic with a leading `[steps]` axis."""
    return Traffic(*(getattr(traffic, name)[index] for name in _TRAFFIC_ARRAYS[:7]),
                   traffic.num_tokens, traffic.dedup, traffic.multi_node, traffic.fraction,
                   traffic.max_slot_pairs[index])


def _largest_share(tokens: np.ndarray, num_tokens: float) -> float:
    """The largest source's share of the batch's tokens (0 for an empty batch)."""
    return float(tokens.max()) / num_tokens if num_tokens > 0 else 0.0


def _slot_values(values: np.ndarray, tables: PlacementTables) -> np.ndarray:
    """[..., layers, experts] per logical expert -> [..., layers, physical] per slot, split over
    replicas."""
    if tables.is_identity:
        return values
    return tables.per_slot(values) * tables.slot_share


def rank_slot_rows(loads: np.ndarray, tables: PlacementTables, fraction: float = 1.0
                   ) -> np.ndarray:
    """[..., layers, ranks, slots_per_rank] expected rows of each rank's expert slots, from
    `loads` [..., layers, experts] per logical expert (split over replicas, times `fraction`)."""
    slots = _slot_values(np.asarray(loads, dtype=np.float64) * fraction, tables)
    return slots.reshape(*slots.shape[:-1], -1, tables.placement.slots_per_rank)


def _traffic_shared(loads, tokens, num_tokens, tables, dedup, fraction, max_nodes=None) -> Traffic:
    """Every source routes alike (no replicas, or an even split): closed forms over ranks."""
    spr, rpn = tables.placement.slots_per_rank, tables.placement.ranks_per_node
    multi_node = tables.placement.num_nodes > 1
    slot_loads = _slot_values(loads, tables)                             # [layers, physical]
    pairs = rank_sum(slot_loads, spr)                                    # [layers, ranks]
    active = _active(slot_loads, fraction, spr)
    # every source sends the same share of each slot's pairs: the busiest queue is the busiest
    # slot's pairs from the source with the most tokens
    hottest = slot_loads.max(axis=-1) * (fraction * _largest_share(tokens, num_tokens))  # [layers]
    if not dedup or num_tokens <= 0:
        zeros = np.zeros_like(pairs)
        return Traffic(pairs * fraction, active, zeros, zeros, zeros, zeros, zeros,
                       num_tokens * fraction, dedup, multi_node, fraction, hottest)
    if dedup == "pair":
        rate = pairs / num_tokens                                        # [layers, ranks] a_r
    else:
        # group-limited routing: a node is among a token's `max_nodes` of N with probability
        # f = max_nodes / N, and given that, each of its experts is picked with pi / f
        f = max_nodes / tables.placement.num_nodes if max_nodes is not None and multi_node else 1.0
        slot_miss = 1.0 - np.minimum(slot_loads / (num_tokens * f), 1.0 - 1e-12)  # 1 - pi/f
        rank_miss = group_prod(slot_miss, spr)
        rate = f * (1.0 - rank_miss)                                     # h_r, hit prob
    if fraction != 1.0:                          # copies scale with tokens, rates do not
        pairs, tokens, num_tokens = pairs * fraction, tokens * fraction, num_tokens * fraction
    self_copies = rate * tokens
    if not multi_node:                          # one node: every other rank is an NVLink peer
        nvl_recv = rate * (num_tokens - tokens)
        nvl_send = tokens * (rate.sum(axis=-1, keepdims=True) - rate)
        rdma_send = rdma_recv = np.zeros_like(rate)
        return Traffic(pairs, active, nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies,
                       num_tokens, dedup, multi_node, fraction, hottest)
    node_tokens = np.repeat(rank_sum(tokens, rpn), rpn)                  # [ranks] T_node(r)
    # per-node terms broadcast over each node's ranks on [..., nodes, rpn] views (the same
    # value at every rank of a node, as a repeat to [..., ranks] gives, without the copy)
    num_nodes = tables.placement.num_nodes
    by_node = (*rate.shape[:-1], num_nodes, rpn)
    rate_n, tokens_n = rate.reshape(by_node), tokens.reshape(num_nodes, rpn)
    rate_node_r = rank_sum(rate, rpn)[..., None]                         # [layers, nodes, 1]
    if dedup in ("pair", "rank"):
        nvl_recv = rate * (node_tokens - tokens)
        rdma_recv = rate * (num_tokens - node_tokens)
        nvl_send = (tokens_n * (rate_node_r - rate_n)).reshape(rate.shape)
        rdma_send = (tokens_n * (rate.sum(axis=-1, keepdims=True)[..., None] - rate_node_r)
                     ).reshape(rate.shape)
    else:  # node dedup: RDMA once per node to the same local index, then NVLink forwarding
        local_tokens = np.tile(rank_sum_strided(tokens, rpn), num_nodes)  # T_loc(local r)
        node_hit = f * (1.0 - group_prod(rank_miss, rpn))                # [layers, nodes] g_n
        node_hit_r = np.repeat(node_hit, rpn, axis=-1)
        nvl_recv = rate * (num_tokens - local_tokens)
        rdma_recv = node_hit_r * (local_tokens - tokens)
        nvl_send = ((rate_node_r - rate_n) * local_tokens.reshape(num_nodes, rpn)
                    ).reshape(rate.shape)
        rdma_send = tokens * (node_hit.sum(axis=-1, keepdims=True) - node_hit_r)
    return Traffic(pairs, active, nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies,
                   num_tokens, dedup, multi_node, fraction, hottest)


def _traffic_per_source(loads, tokens, num_tokens, tables, dedup, fraction,
                        max_nodes=None) -> Traffic:
    """Static selection with replicas: each source has its own slot map. Pair copies (and pairs
    alone) take `[..., layers, experts]` loads, a leading draws axis included; rank- and
    node-deduplicated copies one `[layers, experts]` draw (`[src, layers, ranks]` rates)."""
    num_layers = tables.placement.num_layers
    spr, num_physical = tables.placement.slots_per_rank, tables.placement.num_physical
    ops = tables.source_operators                                         # sparse, per placement
    # per-slot loads: a logical expert's load split by the token share of the sources using it
    slot_weight = ops.slot_weights(tokens / max(num_tokens, 1e-300))     # [layers * physical]
    # over the slots of one logical expert the weights sum to 1: its load splits by source
    slot_loads = slot_weight.reshape(num_layers, num_physical) * tables.per_slot(
        loads)                                                           # [..., layers, physical]
    pairs = rank_sum(slot_loads, spr)
    active = _active(slot_loads, fraction, spr)
    # a source sends all its pairs of an expert to the one replica its map names: the busiest
    # queue is the hottest logical expert's pairs from the source with the most tokens
    hottest = loads.max(axis=-1) * (fraction * _largest_share(tokens, num_tokens))  # [..., layers]
    multi_node = tables.placement.num_nodes > 1
    if not dedup or num_tokens <= 0:
        zeros = np.zeros_like(pairs)
        return Traffic(pairs * fraction, active, zeros, zeros, zeros, zeros, zeros,
                       num_tokens * fraction, dedup, multi_node, fraction, hottest)
    pi = np.minimum(loads / num_tokens, 1.0)                              # [..., layers, experts]
    if dedup == "pair":
        links = _pair_copies_per_source(pi, tables.per_slot(pi), tokens, tables)
    else:
        links = _deduplicated_copies_per_source(pi, tokens, tables, dedup, max_nodes)
    f = fraction
    # the pair copies come as fresh contiguous arrays, which times 1 would only copy; the
    # deduplicated ones partly as transposed views, which it makes contiguous
    if f != 1.0 or dedup != "pair":
        links, pairs = tuple(x * f for x in links), pairs * f
    nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies = links
    return Traffic(pairs, active, nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies,
                   num_tokens * f, dedup, multi_node, f, hottest)


def _pair_copies_per_source(pi, slot_pi, tokens, tables) -> tuple[np.ndarray, ...]:
    """(nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies), `[..., layers, ranks]`, of one
    copy per (token, expert) under the static map, from per-slot sums only.

    Receive side: a slot's copies are its expert's pick rate pi times the tokens of the sources
    sending to it, split by where they sit (`SourceOperators.peer_remote_tokens`). Send side:
    the static map (`epsim.eplb.replicas.static_dispatch_map`) sends to the source's own replica
    if it has one and to one in its node if the node has one, so a source's NVLink rate is the
    pi of the experts its node holds but it does not, its RDMA rate that of the experts its node
    does not hold; which replica it picks does not matter.

    Args:
        pi: [..., layers, experts] pick probabilities; slot_pi: [..., layers, physical] per slot.
        tokens: [ranks] tokens each source dispatches.
    """
    p, ops = tables.placement, tables.source_operators
    spr, rpn = p.slots_per_rank, p.ranks_per_node
    peer_tokens, remote_tokens = ops.peer_remote_tokens(tokens)          # [layers, physical]
    nvl_recv = rank_sum(slot_pi * peer_tokens, spr)
    rdma_recv = rank_sum(slot_pi * remote_tokens, spr)
    own_rate = rank_sum(slot_pi * ops.own_used, spr)                     # [..., layers, ranks]
    self_copies = own_rate * tokens
    if rpn == 1:                                 # the node is the rank: no NVLink peers
        nvl_send = np.zeros_like(own_rate)
        node_rate = own_rate
    else:
        node_rate = np.repeat(rank_sum(slot_pi * ops.node_first, spr * rpn), rpn, axis=-1)
        nvl_send = tokens * (node_rate - own_rate)
    # a node that holds every expert sends nothing over RDMA (exactly, not a rounding residue)
    remote_rate = np.where(ops.node_holds_all, 0.0,
                           pi.sum(axis=-1, keepdims=True) - node_rate)
    return nvl_send, nvl_recv, tokens * remote_rate, rdma_recv, self_copies


def _deduplicated_copies_per_source(pi, tokens, tables, dedup, max_nodes) -> tuple[np.ndarray, ...]:
    """(nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies), `[layers, ranks]`, of rank- or
    node-deduplicated copies: per source and destination hit probabilities `[src, layers, dst]`."""
    num_ranks, num_layers = tables.placement.num_ranks, tables.placement.num_layers
    rpn, num_nodes = tables.placement.ranks_per_node, tables.placement.num_nodes
    ops = tables.source_operators
    src = np.arange(num_ranks)

    def per_dest(weights: np.ndarray, operator, width: int) -> np.ndarray:
        """[src, layers, width]: sum of `weights` [layers, experts] over the experts each source
        sends to each destination rank (or node)."""
        return (operator @ weights.ravel()).reshape(num_ranks, num_layers, width)

    log_miss = np.log1p(-np.minimum(pi, 1.0 - 1e-12))
    rate = -np.expm1(per_dest(log_miss, ops.to_rank, num_ranks))          # [src, layers, dst]
    node, local = src // rpn, src % rpn
    same_node = node[:, None] == node[None, :]                            # [src, dst]
    not_self = ~np.eye(num_ranks, dtype=bool)
    diag = rate[src, :, src]                                              # [ranks, layers]
    self_copies = (tokens[:, None] * diag).T

    def weigh(mask: np.ndarray) -> np.ndarray:
        """[src, dst] float64: T_s where `mask`, else 0 (the source's tokens on those pairs)."""
        return np.where(mask, tokens[:, None], 0.0)

    # sums over sources or destinations of T_s * x[s, l, r] on masked pairs: one einsum each,
    # one pass over [src, layers, dst] and no temporaries of that size
    if dedup == "rank" or num_nodes == 1:
        on_nvl, on_rdma = weigh(same_node & not_self), weigh(~same_node)
        nvl_recv = np.einsum("slr,sr->lr", rate, on_nvl)
        rdma_recv = np.einsum("slr,sr->lr", rate, on_rdma)
        nvl_send = np.einsum("slr,sr->ls", rate, on_nvl)
        rdma_send = np.einsum("slr,sr->ls", rate, on_rdma)
    else:
        node_hit = _cap_nodes(-np.expm1(per_dest(log_miss, ops.to_node, num_nodes)),
                              max_nodes)                                  # [src, layers, nodes]
        same_local = local[:, None] == local[None, :]
        rdma_recv = np.einsum("slr,sr->lr", node_hit[:, :, node], weigh(same_local & ~same_node))
        nvl_recv = np.einsum("slr,sr->lr", rate, weigh(~same_local))
        rdma_send = (tokens[:, None] * (node_hit.sum(axis=2) - node_hit[src, :, node])).T
        # rank x sends over NVLink every token of a same-local-index source to x's node peers
        node_rate = rank_sum(rate, rpn)                                   # [src, layers, nodes]
        on_local = weigh(same_local)
        nvl_send = (np.einsum("slr,sr->lr", node_rate[:, :, node], on_local)
                    - np.einsum("slr,sr->lr", rate, on_local))
    return nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies
