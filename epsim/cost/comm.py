"""Dispatch and combine time of one MoE layer, per all-to-all backend.

A DeepEP-class all-to-all (`torch`, `deepep`, `mooncake`) costs, per layer,

    t = base_us + max(overlap_us, transfer_us)
    transfer_us = max_r(max(nvl_bytes_r / nvl_gbps, rdma_bytes_r / rdma_gbps)) * 1e-3
                  + per_copy_us * max_r(copies_r) + slot_us_per_kb * max_s(slot_bytes_s) * 1e-3
                  + max(0, max_r(pair_bytes_r) - l2_bytes) / spill_gbps * 1e-3   (pair copies)
                  + expert_signal_us * num_experts                                (pair copies)
                  + rdma_signal_us * remote_experts                (pair copies, ranks span nodes)

where `nvl_bytes_r` is the busier direction (send or receive) of rank r's NVLink traffic and
likewise for RDMA: the busiest rank sets the pace. NVLink and the NIC are separate engines
that move bytes at the same time (DeepEP's normal kernels pipeline RDMA receive and NVLink
forwarding through chunked buffers; low-latency kernels and NCCL post to both at once), so a
rank's transfer ends with its slower link, not the sum of both. bytes / (GB/s) is ns, hence
the 1e-3.
`slot_bytes_s` is what the busiest (expert slot, source rank) queue carries: low-latency
kernels (DeepEP LL, Mooncake EP) receive each local expert's copies from each source rank with
one warp group (the dispatch kernels' receive phase, `responsible_expert_idx`), so one hot
expert paces them even when the ranks are balanced (measured on two H200: Zipf(1) routing, whose
hottest expert takes every token, made Mooncake's dispatch 2x slower than uniform routing with
the same bytes per rank), while more ranks, each sending its share, do not lengthen a queue
(AIC's H200 LL dispatch fitted on 1-2 nodes and judged on 4-8, EP 32-64: 10.0 % priced per
expert from every source, 2.3 % per queue).
`overlap_us` is fixed work that runs *while* the copies move (a kernel's count exchange and
buffer bookkeeping, or in an eager call the host's time after it launched the transfer), so a
large transfer hides it: `base_us` is what nothing hides. With `overlap_us = 0` the form is
the plain sum. `pair_bytes_r` is what rank r's low-latency receive buffer holds (every
(token, expert) pair it computes); beyond the GPU's L2 (`l2_bytes`) the kernel's writes and
the reads after them go to HBM, at `spill_gbps` (<= HBM bandwidth) for the bytes that spill.
`num_experts` is every expert slot of the deployment (physical experts, redundant ones
included): a low-latency kernel (DeepEP's `internode_ll.cu`, Mooncake EP after it) runs one warp
group per expert, which sends that expert's token count to its rank and, on the receive side,
polls the `ep` counts of each local expert before copying its tokens, `num_experts` signals per
rank whatever the batch; past the GPU's SM count the groups share SMs with fewer warps each
(`ceil(E / SMs)` groups an SM). Measured on aiconfigurator-core's H200 LL tables (one node of
8, 1-1024 tokens, 8-512 experts): without the term the fit under-predicted 384 and 512 experts
by 15-22 % and over-predicted 128 by 10 %. `remote_experts` are the slots on other nodes than
the rank's: their counts go out as GPU-initiated RDMA atomics (IBGDA) and come back over the
NIC, each dearer than an NVLink store; AIC's 2-8-node H200 LL rows at 2 tokens a rank run
6-15 µs (dispatch) and 14-19 µs (combine) above one node's, growing with the remote slots
(144, 216, 252 of 288 at 2, 4, 8 nodes) where the bytes are a few KB.
DeepEP's normal kernels (`intranode.cu`, `internode.cu`; `chunked`) add, per call,

                  + token_us * owner_tokens
                  + chunk_us * ceil(q / c) + chunk_us_per_kb * min(c, q) * bytes * 1e-3

`owner_tokens` is what the busiest rank holds itself (its own tokens, sent or not): each
channel's sending warps walk every token of its range for each peer (`is_token_in_rank`, the
`send_head` entry), and combine's receiving warps reduce every token, one warp each (a second
column for that reduction's bytes was tried: on <= 1024 tokens the fit could not tell it from
the count, and the weak-column rule dropped both on GB200).
A channel (one of `NORMAL_CHANNELS`: `Buffer.num_sms` 20, a sending and a receiving block
each) moves its copies to a peer through a queue of `c` tokens a round: `q` copies per queue
(the busiest rank's link copies over its NVLink peers and channels) take `ceil(q / c)` rounds
of `chunk_us` (the tail published, polled, the head returned), and the first chunk's copy
(`min(c, q)` tokens at `1 / chunk_us_per_kb`, one queue's warps) is not hidden behind other
queues. `c` is the size a tuner picks from `NORMAL_CHUNKS` (AIC's collector times the best of
DeepEP's test sweep, dispatch 4-32 and combine 1-16 tokens): the one with the least time at
the parameters, a choice the fit re-makes each round like the busiest rank. Measured on
aiconfigurator-core's normal tables (one node of 8, 1-131072 tokens): without these terms the
copy-only form missed 2048-16384 tokens by 23-26 % (MAPE) from a fit up to 1024 (high on
H100-B300, whose slope at 256-1024 tokens is 10-15 % steeper than beyond: the tuner's larger
chunks; low on GB200/GB300), and top-1/top-2 routing, whose time does not fall with its fewer
copies (the walk over every token).
Within a node the combine is priced as the slower of its sides (`epsim.cost.combine_sides`):
the NVLink bytes stretched to its longest channel queue, or its receiving warps' rounds
(`owner_tokens x 2 hidden / 512`, `token_us` a round); across nodes the rounds are added.
Intranode `owner_tokens x handshake_us` is added to the side that paces: a receiving warp's
per-token latency chain, unscaled by the hidden size, whose returned head frees the sender's
ring-buffer slot (docs/model.md; fitted where determined: GB200, GB300 ~0.04 µs a token).
The `none` backend (forward_normal) instead all-gathers the batch's hidden states and
all-reduces the expert outputs; a ring moves `(n-1)/n` (all-gather) or `2(n-1)/n` (all-reduce)
of the bytes over each rank's slowest link, with the same `base_us + max(overlap_us, ...)`.

Every model is linear in its coefficients (`base_us`, `overlap_us`, `1/nvl_gbps`,
`1/rdma_gbps`, `per_copy_us`, `slot_us_per_kb`, `1/spill_gbps`, `expert_signal_us`, `token_us`,
`chunk_us`, `chunk_us_per_kb`) once the busiest rank, the chunk size and
the side of the max are known: `comm_features` returns the design row a
least-squares fitter needs, `comm_us` is that row times `COMM_TERMS.coefficients(params)`.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.combine_sides import combine_sides, reduction_rounds
from epsim.cost.linear import COLLECTIVE_TERMS, COMM_TERMS
from epsim.cost.traffic import Traffic
from epsim.cost.transport import transport_path
from epsim import vocab
from epsim.errors import SpecError
from epsim.spec.hardware import ClusterSpec, HardwareSpec
from epsim.zoo import get_hardware

# Datasheet defaults: achieved / datasheet bandwidth, and small fixed latencies (us). The
# calibration profile replaces them with fitted values where a live measurement exists.
NVLINK_EFFICIENCY = 0.8
RDMA_EFFICIENCY = 0.8
_BASE_US = {
    ("torch", ""): 40.0,             # NCCL all_to_all_single + the split-size exchange
    ("deepep", "normal"): 30.0,      # layout + notify kernels before the copy
    ("deepep", "low_latency"): 12.0,
    ("mooncake", ""): 15.0,          # derived from DeepEP low-latency
    ("none", ""): 15.0,              # one NCCL collective
}

# The spill term's L2 (`l2_bytes`): a GPU's own on the Hopper GPUs whose low-latency kernels were
# measured; any other takes H200's, a stated assumption (Blackwell's own would spill less)
SPILL_L2_OWN_GPUS = ("H100", "H800", "H200")

_FP8_BLOCK = 128          # DeepEP FP8 dispatch: one float32 scale per 128 hidden values
_NVFP4_BLOCK = 16         # NVFP4: one E4M3 scale byte per 16 values
_DEDUP_META_BYTES = 12    # per top-k choice: int64 expert index + float32 weight
_PAIR_META_BYTES = 16     # per copy: DeepEP low-latency's int4 source-info header


# DeepEP normal (legacy `Buffer`): `num_sms` 20 by default, one channel per sending and receiving
# block pair; AIC's collector (`deep_collector/test_intranode.py`) keeps the best NVLink chunk
# (tokens a round) of dispatch `range(4, 33, 2)` and combine `range(1, 17)`.
NORMAL_CHANNELS = 10
NORMAL_CHUNKS = {"dispatch": tuple(range(4, 33, 2)), "combine": tuple(range(1, 17))}


def chunked(backend: str, mode: str) -> bool:
    """Whether a kernel moves its copies through per-channel chunked queues (DeepEP normal):
    only those pay the owner-token and per-chunk terms."""
    return backend == "deepep" and mode == "normal"


def queue_copies(link_copies: np.ndarray | float, peers: int) -> np.ndarray:
    """Copies one channel's queue to one peer carries: the busiest rank's link copies spread
    over its `peers` NVLink peers and `NORMAL_CHANNELS` channels."""
    return np.asarray(link_copies, dtype=np.float64) / (max(peers, 1) * NORMAL_CHANNELS)


def chunk_rounds(queue: np.ndarray | float, bytes_per_copy: float, params: dict[str, float],
                 kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(rounds, first chunk's kB) of a queue of `queue` copies at the chunk a tuner picks from
    `NORMAL_CHUNKS[kind]`: the least `chunk_us * rounds + chunk_us_per_kb * kB` (the smallest
    chunk on a tie). Args: queue [...] copies; returns two [...] arrays."""
    q = np.asarray(queue, dtype=np.float64)[..., None]
    sizes = np.asarray(NORMAL_CHUNKS[kind], dtype=np.float64)
    rounds = np.ceil(q / sizes)                                        # [..., chunks]
    fill_kb = np.minimum(sizes, q) * (bytes_per_copy * 1e-3)
    cost = params.get("chunk_us", 0.0) * rounds + params.get("chunk_us_per_kb", 0.0) * fill_kb
    pick = cost.argmin(axis=-1)[..., None]
    return (np.take_along_axis(rounds, pick, axis=-1)[..., 0],
            np.take_along_axis(fill_kb, pick, axis=-1)[..., 0])


def l2_bytes(gpu: str) -> float:
    """The L2 a low-latency receive buffer spills beyond on zoo GPU `gpu`, bytes."""
    return get_hardware(gpu if gpu in SPILL_L2_OWN_GPUS else "H200").l2_bytes


def per_message(dedup: str) -> bool:
    """Whether a kernel moves every (token, expert) pair as its own message (`pair` copies:
    DeepEP low-latency, Mooncake EP): only those pay the per-copy, busiest-slot, L2-spill and
    per-expert signal terms. Rank- and node-deduplicated paths (NCCL all-to-all, DeepEP
    normal) pack their copies into contiguous buffers, whose cost is the bytes."""
    return dedup == "pair"


def check_backend(backend: str) -> str:
    if backend not in vocab.BACKENDS:
        raise SpecError(f"backend ({backend!r}) must be one of {list(vocab.A2A_BACKENDS)}")
    return backend


def dedup_for(backend: str, mode: str = "") -> str:
    """How `backend` (in deepep `mode`) counts copies: "pair", "rank", "node" or "" (none)."""
    return vocab.copies_for(check_backend(backend), mode)


def dispatch_bytes_per_copy(hidden_size: int, dispatch_dtype: str, top_k: int, dedup: str) -> float:
    """Bytes one dispatched token copy carries.

    BF16: 2 bytes per hidden value. FP8: 1 byte per value + one float32 scale per 128 values.
    NVFP4 (DeepEP low-latency `use_nvfp4`): half a byte per value + one E4M3 scale byte per 16
    values (NVFP4's block), the tensor's global scale shared by all tokens.
    Plus routing metadata: a deduplicated copy carries all `top_k` (index, weight) pairs; a
    per-(token, expert) copy carries a 16-byte header.
    """
    if dispatch_dtype == "bf16":
        payload = 2.0 * hidden_size
    elif dispatch_dtype == "fp8":
        payload = hidden_size + 4.0 * hidden_size / _FP8_BLOCK
    elif dispatch_dtype == "nvfp4":
        payload = 0.5 * hidden_size + hidden_size / _NVFP4_BLOCK
    else:
        raise SpecError(f"dispatch_dtype ({dispatch_dtype!r}) must be one of "
                        f"{list(vocab.DISPATCH_DTYPES)}")
    meta = _PAIR_META_BYTES if dedup == "pair" else _DEDUP_META_BYTES * top_k
    return payload + meta


def combine_bytes_per_copy(hidden_size: int) -> float:
    """Combine returns each copy's expert output in BF16: 2 bytes per hidden value."""
    return 2.0 * hidden_size


def carried_comm_rates(params: dict[str, float], fitted_on: HardwareSpec, on: HardwareSpec,
                       link_bound: bool = True) -> dict[str, float]:
    """An all-to-all kernel's fitted `params` (`COMM_TERMS`: absolute rates) carried from the GPU
    it was fitted on to another (the system hold-out, record path): each byte rate kept as its
    fraction of the datasheet figure that bounds it, on the other GPU's datasheet, as the
    experts' `carried_rates` carry HBM and tensor rates.

    - `nvl_gbps` x NVLink on / NVLink fitted, for a `link_bound` kernel: the copy's bytes cross
      the scale-up link (its default, `comm_defaults`, is the datasheet NVLink times
      `NVLINK_EFFICIENCY`). DeepEP's low-latency kernels (csrc/kernels/internode_ll.cu) launch
      `ceil_div(num_experts, num_warp_groups)` blocks, every SM, each warp writing its tokens
      straight into the peer's buffer: the link paces them. AIC's tables: low-latency combine
      fitted 233 GB/s on H200 (NVLink 4, 450) and 649 on B200 (NVLink 5, 900). Not DeepEP
      normal (`chunked`, link_bound False): its intranode kernels run on the `Buffer.num_sms`
      (20) SMs of its channels whatever the GPU, so their copy loops, not the link, pace it
      (fitted 332 GB/s on H200, 474 on B200: 1.43x where NVLink doubles).
    - `spill_gbps` x HBM on / HBM fitted: a byte spilled past L2 costs an HBM pass (its default
      is the datasheet HBM rate); L2 itself is already the target GPU's (`l2_bytes`).

    Kept: `rdma_gbps` (the NIC, not the GPU: the same 400 Gb/s ConnectX-7 on the HGX systems),
    the fixed costs (`base_us`, signals, per-copy and per-token terms: launch and flag latency,
    which no datasheet carries), and the per-KB queue terms (`slot_us_per_kb`,
    `chunk_us_per_kb`: one warp group's copy loop, bound by its SM, not by the link). The same
    GPU, or one without an NVLink figure on either side: `params` as they are. Pass the fitted
    component's own params (not merged over the target's datasheet defaults, which need no carry)."""
    if fitted_on.name == on.name or not (fitted_on.nvlink_gbps and on.nvlink_gbps):
        return dict(params)
    out = dict(params)
    if "nvl_gbps" in out and link_bound:
        out["nvl_gbps"] = out["nvl_gbps"] * on.nvlink_gbps / fitted_on.nvlink_gbps
    if "spill_gbps" in out and fitted_on.hbm_gbps and on.hbm_gbps:
        out["spill_gbps"] = out["spill_gbps"] * on.hbm_gbps / fitted_on.hbm_gbps
    return out


# -- all-to-all (torch, deepep, mooncake) ------------------------------------------------------
def rdma_gbps_default(backend: str, cluster: ClusterSpec) -> float:
    """Achievable scale-out GB/s per GPU: NIC line rate x RDMA_EFFICIENCY x the framing ratio of
    the backend's transport path over the cluster's network (`epsim.cost.transport`)."""
    path = transport_path(backend, cluster.network_resolved.kind)
    return cluster.rdma_gbps_resolved * RDMA_EFFICIENCY * path.wire_ratio


def comm_defaults(backend: str, mode: str, cluster: ClusterSpec) -> dict[str, float]:
    """Datasheet parameters of `<backend>/dispatch|combine[/mode]` for a cluster."""
    check_backend(backend)
    return {
        "base_us": _BASE_US[(backend, mode if backend == "deepep" else "")],
        "overlap_us": 0.0,
        "nvl_gbps": cluster.nvlink_gbps_resolved * NVLINK_EFFICIENCY,
        "rdma_gbps": rdma_gbps_default(backend, cluster),
        "per_copy_us": 0.0,
        "slot_us_per_kb": 0.0,
        "spill_gbps": cluster.hardware.hbm_gbps,      # a spilled byte costs at least one HBM pass
        "expert_signal_us": 0.0,
        "rdma_signal_us": 0.0,        # a fabric crossing's datasheet cost is `transport`'s
        "token_us": 0.0,
        "chunk_us": 0.0,
        "chunk_us_per_kb": 0.0,
        "handshake_us": 0.0,          # DeepEP normal's combine: fitted where the data show it
    }


def comm_features(nvl_copies: np.ndarray, rdma_copies: np.ndarray, copies: np.ndarray,
                  bytes_per_copy: float, params: dict[str, float],
                  max_slot_pairs: np.ndarray | float = 0.0,
                  max_pairs: np.ndarray | float = 0.0, l2: float = float("inf"),
                  num_experts: float = 0.0, remote_experts: float = 0.0,
                  owner_tokens: np.ndarray | float = 0.0, queue: np.ndarray | float = 0.0,
                  kind: str = "") -> np.ndarray:
    """Design rows of the all-to-all model at each layer's busiest rank.

    Args:
        nvl_copies, rdma_copies: [..., ranks] busier direction of each rank's link (copies).
        copies: [..., ranks] link-crossing copies per rank (busier direction); zeros for a
            kernel that is not `per_message`, as are `max_slot_pairs` and `max_pairs`.
        params: pick the busiest rank (the one whose slower link takes longest), at it the
            link that paces it (the other link's column is zero), and the side of
            `max(overlap_us, transfer)` (the other side's columns are zero).
        max_slot_pairs: [...] pairs in the busiest (expert slot, source rank) queue.
        max_pairs: [...] pairs of the rank computing the most (its receive buffer holds them).
        l2: the GPU's L2 cache, bytes (`l2_bytes`; the default, no limit, spills nothing).
        num_experts: expert slots whose counts a low-latency kernel signals (0 for a kernel
            that is not `per_message`).
        remote_experts: those of them on other nodes than the rank's (0 within a node).
        owner_tokens: [...] tokens the busiest rank holds (0 for a kernel not `chunked`).
        queue: [...] copies one channel's queue to one peer carries (`queue_copies`).
        kind: "dispatch" or "combine" for a `chunked` kernel (its tuned chunk sizes), else "".
    Returns:
        [..., 13] float64 columns (1, overlap side, nvl_bytes*1e-3, rdma_bytes*1e-3, max copies,
        slot_bytes*1e-3, spilled bytes*1e-3, expert slots, remote expert slots, owner tokens,
        chunk rounds, first chunk's bytes*1e-3, an intranode combine's owner tokens: its
        handshake); times `COMM_TERMS.coefficients(params)` gives
        microseconds.
    """
    nvl_kb = np.asarray(nvl_copies, dtype=np.float64) * (bytes_per_copy * 1e-3)
    rdma_kb = np.asarray(rdma_copies, dtype=np.float64) * (bytes_per_copy * 1e-3)
    nvl_t, rdma_t = nvl_kb / params["nvl_gbps"], rdma_kb / params["rdma_gbps"]
    busiest = np.maximum(nvl_t, rdma_t).argmax(axis=-1)[..., None]
    nvl_b = np.take_along_axis(nvl_kb, busiest, axis=-1)[..., 0]
    rdma_b = np.take_along_axis(rdma_kb, busiest, axis=-1)[..., 0]
    rdma_paces = (np.take_along_axis(rdma_t, busiest, axis=-1)[..., 0]
                  > np.take_along_axis(nvl_t, busiest, axis=-1)[..., 0])
    nvl_b, rdma_b = np.where(rdma_paces, 0.0, nvl_b), np.where(rdma_paces, rdma_b, 0.0)
    slot_kb = np.broadcast_to(np.asarray(max_slot_pairs, dtype=np.float64) * (bytes_per_copy * 1e-3),
                              nvl_b.shape)
    spill_kb = np.broadcast_to(np.maximum(
        np.asarray(max_pairs, dtype=np.float64) * bytes_per_copy - l2, 0.0) * 1e-3, nvl_b.shape)
    signals = np.full_like(nvl_b, float(num_experts))
    remote = np.full_like(nvl_b, float(remote_experts))
    owner = np.broadcast_to(np.asarray(owner_tokens, dtype=np.float64), nvl_b.shape)
    handshake = np.zeros_like(nvl_b)
    if kind == "combine":            # its receiving warps' rounds (`combine_sides`)
        owner = owner * reduction_rounds(bytes_per_copy)
        if not np.any(rdma_kb):      # intranode: the slower side paces it, plus the handshake
            handshake = np.broadcast_to(np.asarray(owner_tokens, dtype=np.float64), nvl_b.shape)
            nvl_b, owner = combine_sides(nvl_b, owner, queue, owner_tokens, nvl_kb.shape[-1],
                                         NORMAL_CHANNELS, params)
    rounds, fill_kb = (chunk_rounds(np.broadcast_to(queue, nvl_b.shape), bytes_per_copy, params,
                                    kind) if kind else (np.zeros_like(nvl_b),) * 2)
    transfer = np.stack([nvl_b, rdma_b, np.asarray(copies).max(axis=-1), slot_kb, spill_kb,
                         signals, remote, owner, rounds, fill_kb, handshake], axis=-1)  # [..., 11]
    coef = COMM_TERMS.coefficients(params)
    hidden = transfer @ coef[2:] < params.get("overlap_us", 0.0)       # the fixed work paces
    transfer = np.where(hidden[..., None], 0.0, transfer)
    ones = np.ones_like(nvl_b)
    return np.concatenate([np.stack([ones, hidden.astype(np.float64)], axis=-1), transfer], axis=-1)


def comm_us(traffic: Traffic, bytes_per_copy: float, params: dict[str, float],
            l2: float = float("inf"), num_experts: float = 0.0,
            remote_experts: float = 0.0, owner_tokens: np.ndarray | float = 0.0,
            peers: int = 0, kind: str = "") -> np.ndarray:
    """[layers] microseconds of one dispatch (or combine) of `traffic`; `num_experts`: the
    deployment's expert slots (physical experts), whose counts a `per_message` kernel signals,
    `remote_experts` those on other nodes than a rank's; `owner_tokens` ([layers] or scalar),
    `peers` (NVLink peers of a rank) and `kind` ("dispatch" / "combine"): a `chunked` kernel's
    own tokens, queues and tuned chunk sizes (`kind` "" for any other kernel).

    The module formula evaluated directly (the step loop's hot path); equals
    `comm_features(...) @ COMM_TERMS.coefficients(params)`.
    """
    kb = bytes_per_copy * 1e-3
    # the busiest rank's time from the busiest rank's counts: times a positive constant,
    # the largest count gives the largest product (rounding keeps the order), so these are
    # the bits of reducing the per-rank products
    t = traffic.peak("nvl_copies") * (kb / params["nvl_gbps"])            # [layers]
    if traffic.multi_node:                     # links run concurrently: the slower one paces
        t = np.maximum(t, traffic.peak("rdma_copies") * (kb / params["rdma_gbps"]))
    if per_message(traffic.dedup):
        if params["per_copy_us"]:
            t = t + params["per_copy_us"] * traffic.peak("copies")
        if params.get("slot_us_per_kb") and traffic.max_slot_pairs is not None:
            t = t + params["slot_us_per_kb"] * traffic.max_slot_pairs * kb
        if params.get("spill_gbps"):
            spill_kb = np.maximum(traffic.peak("pairs") * bytes_per_copy - l2, 0.0) * 1e-3
            t = t + spill_kb / params["spill_gbps"]
        if params.get("expert_signal_us"):
            t = t + params["expert_signal_us"] * num_experts
        if params.get("rdma_signal_us") and traffic.multi_node:
            t = t + params["rdma_signal_us"] * remote_experts
    if kind == "combine":            # its receiving warps' rounds, intranode the slower side
        recv = owner_tokens * reduction_rounds(bytes_per_copy)
        if not traffic.multi_node:   # (rank-deduplicated: `t` is the NVLink bytes' time alone)
            send, recv = combine_sides(traffic.peak("nvl_copies") * kb, recv,
                                       queue_copies(traffic.peak("nvl_copies"), peers),
                                       owner_tokens, traffic.nvl_copies.shape[-1],
                                       NORMAL_CHANNELS, params)
            t = send / params["nvl_gbps"] + owner_tokens * params.get("handshake_us", 0.0)
        t = t + recv * params.get("token_us", 0.0)
    elif kind:
        t = t + owner_tokens * params.get("token_us", 0.0)
    if kind:
        if params.get("chunk_us") or params.get("chunk_us_per_kb"):
            rounds, fill_kb = chunk_rounds(queue_copies(traffic.peak("nvl_copies"), peers),
                                           bytes_per_copy, params, kind)
            t = t + params.get("chunk_us", 0.0) * rounds + params.get("chunk_us_per_kb", 0.0) * fill_kb
    return params["base_us"] + np.maximum(params.get("overlap_us", 0.0), t)


def background_us(traffic: Traffic, bytes_per_copy: float, params: dict[str, float]) -> np.ndarray:
    """[layers] the part of `comm_us` the NIC moves after a low-latency send kernel returned:
    the busiest rank's RDMA bytes beyond the time of its NVLink copies (0 within a node).

    DeepEP's low-latency kernels (and Mooncake EP's) write NVLink peers' buffers with the
    sending SMs and post RDMA puts that the NIC carries on alone (IBGDA); with a receive hook
    (`return_recv_hook=True`, SGLang's two-batch overlap) the send kernel returns once it has
    posted them, so only the RDMA time beyond its own copies runs off the compute stream
    (docs/model.md, "Two-batch overlap")."""
    if not traffic.multi_node:
        return np.zeros(np.shape(traffic.peak("nvl_copies")))
    kb = bytes_per_copy * 1e-3
    nvl = traffic.peak("nvl_copies") * (kb / params["nvl_gbps"])
    rdma = traffic.peak("rdma_copies") * (kb / params["rdma_gbps"])
    return np.maximum(rdma - nvl, 0.0)


# -- collectives (the `none` backend, TP attention) ---------------------------------------------
def collective_defaults(cluster: ClusterSpec) -> dict[str, float]:
    """Datasheet parameters of `none/allreduce`."""
    return {"base_us": _BASE_US[("none", "")], "overlap_us": 0.0,
            "nvl_gbps": cluster.nvlink_gbps_resolved * NVLINK_EFFICIENCY,
            "rdma_gbps": rdma_gbps_default("none", cluster)}


def collective_features(num_bytes: np.ndarray | float, num_ranks: int, num_nodes: int,
                        passes: int, params: dict[str, float] | None = None) -> np.ndarray:
    """Design rows of a ring collective over `num_ranks` ranks.

    Each rank moves `passes * (n-1)/n * num_bytes` (all-gather: passes=1, all-reduce: 2) over
    its slowest link: RDMA when the ring spans nodes, else NVLink; `params` (when given) pick
    the side of `max(overlap_us, transfer)`.

    Returns:
        [..., 4] float64 columns (1, overlap side, nvl_bytes*1e-3, rdma_bytes*1e-3).
    """
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    moved_kb = passes * (num_ranks - 1) / num_ranks * num_bytes * 1e-3
    zero = np.zeros_like(moved_kb)
    if num_ranks == 1:
        return np.stack([zero, zero, zero, zero], axis=-1)
    one = np.ones_like(moved_kb)
    link = "rdma_gbps" if num_nodes > 1 else "nvl_gbps"
    hidden = (zero if params is None else
              (moved_kb / params[link] < params.get("overlap_us", 0.0)).astype(np.float64))
    moved_kb = np.where(hidden > 0, 0.0, moved_kb)
    if num_nodes > 1:
        return np.stack([one, hidden, zero, moved_kb], axis=-1)
    return np.stack([one, hidden, moved_kb, zero], axis=-1)


def collective_us(num_bytes: np.ndarray | float, num_ranks: int, num_nodes: int, passes: int,
                  params: dict[str, float]) -> np.ndarray:
    """Microseconds of a ring all-gather (passes=1) or all-reduce (passes=2) of `num_bytes`."""
    rows = collective_features(num_bytes, num_ranks, num_nodes, passes, params)
    return rows @ COLLECTIVE_TERMS.coefficients(params)
