"""How each all-to-all backend's bytes cross each network kind: its transport path.

A dispatch or combine that spans nodes pays, on top of the link-bandwidth terms of
`epsim.cost.comm`, the path's own costs (docs/model.md, "Networks"):

    network_us = latency_us + per_message_us * max_r(rdma_messages_r)      (ranks span nodes)
    rdma_gbps  = nic_gbps_per_gpu * RDMA_EFFICIENCY * wire_ratio

`wire_ratio` is the payload share of the wire at the path's MTU relative to InfiniBand's
(framing headers per packet; InfiniBand = 1, so InfiniBand predictions are the plain
datasheet ones). `latency_us` is one crossing of the fabric (NIC + switch hops).
`per_message_us` is what a host proxy thread spends posting one RDMA write where the NIC
offers no GPU-initiated path (IBGDA needs a Mellanox/NVIDIA NIC; AWS EFA has none, so
DeepEP-class kernels there go through a CPU proxy as NVSHMEM's IBRC path and UCCL-EP do);
it counts token-level messages only (`pair` copies), since chunked paths post few.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.traffic import Traffic
from epsim.errors import SpecError
from epsim.spec.network import NETWORK_KINDS

# Framing bytes per packet at a 4096-byte payload MTU (what RDMA writes fill):
#   InfiniBand: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 (IBTA spec vol. 1, ch. 5-7).
#   RoCEv2: Ethernet 14 + FCS 4 + preamble/SFD 8 + inter-frame gap 12 + IPv4 20 + UDP 8
#           + BTH 12 + ICRC 4 = 82 (IBTA RoCEv2 annex A17).
#   EFA (SRD over Ethernet, 8 KiB payloads under a 9001-byte MTU): Ethernet 38 + IPv4 20
#           + UDP 8 + an SRD header we take as 32 (unpublished) = 98 per 8192.
_MTU_BYTES = 4096
_IB_FRAMING = _MTU_BYTES / (_MTU_BYTES + 26)
WIRE_RATIO = {
    "infiniband": 1.0,
    "roce": (_MTU_BYTES / (_MTU_BYTES + 82)) / _IB_FRAMING,
    "efa": (8192 / (8192 + 98)) / _IB_FRAMING,
    "nvl72": 1.0,        # racks of an NVL72 cluster reach each other over InfiniBand
}
# One fabric crossing, µs: NIC-to-NIC RDMA write latency plus three switch hops of a two-tier
# fat tree. InfiniBand: ConnectX-7 ~1 µs (ib_write_lat) + Quantum-2 ~0.13 µs/hop. RoCE: same
# NIC + Ethernet switches ~0.6 µs/hop (Spectrum-class cut-through, more with ECN/PFC queues).
# EFA: SRD's one-way latency is not published; assumed ~10 µs (libfabric + Nitro card).
LATENCY_US = {"infiniband": 1.5, "roce": 3.0, "efa": 10.0, "nvl72": 1.5}
# Host proxy posting one RDMA write (no GPU-initiated verbs on EFA): assumed 0.05 µs/message
# per GPU with several proxy threads (UCCL-EP's design: a multi-threaded CPU proxy per GPU).
PROXY_US_PER_MESSAGE = 0.05


@dataclass(frozen=True)
class TransportPath:
    """One backend's path over one network kind.

    Attributes:
        name: short path name shown in tables (e.g. "IBGDA", "CPU proxy (libfabric)").
        detail: what the path is, one sentence.
        wire_ratio: payload share of the wire relative to InfiniBand (<= 1).
        latency_us: one crossing of the fabric, µs.
        per_message_us: host-proxy cost per token-level RDMA message, µs (0 when GPU-initiated).
    """

    name: str
    detail: str
    wire_ratio: float
    latency_us: float
    per_message_us: float = 0.0


_PATHS = {
    # (backend, kind) -> (name, detail, proxied)
    ("deepep", "infiniband"): ("IBGDA", "NVSHMEM GPU-initiated RDMA (InfiniBand GPUDirect Async)", False),
    ("deepep", "roce"): ("IBGDA over RoCEv2", "the same GPU-initiated verbs on ConnectX RoCEv2 ports", False),
    ("deepep", "efa"): ("CPU proxy (libfabric)", "no IBGDA on EFA: GPU hands each write to a host "
                        "proxy thread (NVSHMEM libfabric / UCCL-EP)", True),
    ("deepep", "nvl72"): ("NVLink (MNNVL) + IBGDA", "NVLink inside the 72-GPU domain, IBGDA across racks", False),
    ("mooncake", "infiniband"): ("IBGDA", "Mooncake EP's GPU-initiated RDMA (DeepEP low-latency lineage)", False),
    ("mooncake", "roce"): ("IBGDA over RoCEv2", "Mooncake EP's GPU-initiated verbs on RoCEv2", False),
    ("mooncake", "efa"): ("CPU proxy (libfabric)", "Mooncake EP has no EFA GPU-initiated path; "
                          "modelled as a host proxy like UCCL-EP", True),
    ("mooncake", "nvl72"): ("NVLink (MNNVL) + IBGDA", "NVLink inside the rack, IBGDA across racks", False),
    ("torch", "infiniband"): ("NCCL net/IB", "NCCL all_to_all over IB verbs (NCCL's proxy thread, chunked)", False),
    ("torch", "roce"): ("NCCL net/IB (RoCEv2)", "NCCL's IB transport on RoCEv2", False),
    ("torch", "efa"): ("NCCL + aws-ofi-nccl", "NCCL's libfabric plugin over SRD", False),
    ("torch", "nvl72"): ("NCCL NVLS/MNNVL + net/IB", "NCCL over NVLink in the rack, IB across racks", False),
    ("none", "infiniband"): ("NCCL net/IB", "NCCL ring collectives over IB verbs", False),
    ("none", "roce"): ("NCCL net/IB (RoCEv2)", "NCCL ring collectives on RoCEv2", False),
    ("none", "efa"): ("NCCL + aws-ofi-nccl", "NCCL ring collectives over SRD", False),
    ("none", "nvl72"): ("NCCL NVLS/MNNVL + net/IB", "NCCL over NVLink in the rack, IB across racks", False),
}


def transport_path(backend: str, kind: str) -> TransportPath:
    """The path `backend` takes over a network of `kind`.

    Raises:
        SpecError: an unknown backend or network kind.
    """
    entry = _PATHS.get((backend, kind))
    if entry is None:
        if kind not in NETWORK_KINDS:
            raise SpecError(f"cluster.network.kind ({kind!r}) must be one of {list(NETWORK_KINDS)}")
        raise SpecError(f"backend ({backend!r}) must be one of "
                        f"{sorted({b for b, _ in _PATHS})}")
    name, detail, proxied = entry
    return TransportPath(name, detail, WIRE_RATIO[kind], LATENCY_US[kind],
                         PROXY_US_PER_MESSAGE if proxied else 0.0)


def network_us(traffic: Traffic, path: TransportPath) -> np.ndarray | float:
    """[layers] µs the fabric adds to one dispatch or combine that spans nodes (0 otherwise).

    `latency_us` once, plus the proxy's per-message cost at the rank posting or receiving the
    most token-level RDMA messages (`pair` copies; chunked paths post few messages).
    """
    if not traffic.multi_node:
        return 0.0
    t = path.latency_us
    if path.per_message_us and traffic.dedup == "pair":
        t = t + path.per_message_us * traffic.peak("rdma_copies")
    return t
