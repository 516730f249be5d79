"""The scale-out network of a cluster: its kind, NICs per node and their speed.

NIC speeds are written as sold, in gigaBITS per second (`nic_gbit_per_s`: 400 Gb/s NDR
InfiniBand); epsim converts once, here, to the GB/s (1e9 bytes/s) its cost models use
(`nic_gbps_per_gpu`: 400 Gb/s / 8 = 50 GB/s). Unset fields take the datasheet default of the
kind for the cluster's GPU (`epsim/data/zoo/networks.yaml`, listed by `epsim hardware`).
How each all-to-all backend travels over a kind is `epsim.cost.transport`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NETWORK_KINDS = ("infiniband", "roce", "efa", "nvl72")
NetworkKind = Literal["infiniband", "roce", "efa", "nvl72"]


class NetworkSpec(BaseModel):
    """What a scenario writes under `cluster.network` (or just the kind: `network: efa`).

    `nvl72` is a multi-node NVLink domain (GB200/GB300 NVL72: 72 GPUs share NVLink, so a
    "node" of the cluster is the 72-GPU rack); racks reach each other over InfiniBand.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: NetworkKind = Field(description="infiniband | roce | efa | nvl72")
    nics_per_node: int | None = Field(default=None, gt=0, description="scale-out NICs per node")
    nic_gbit_per_s: float | None = Field(default=None, gt=0,
                                         description="per NIC, gigabits/s as sold (not GB/s)")


@dataclass(frozen=True)
class Network:
    """A cluster's network with every default resolved.

    Attributes:
        kind: one of NETWORK_KINDS.
        nics_per_node: scale-out NICs per node (an NVL72 rack counts as one node).
        nic_gbit_per_s: one NIC's line rate, gigabits/s.
        gpus_per_node: GPUs sharing the node's NVLink domain.
        system: the datasheet system the defaults come from (e.g. "DGX H100").
        source: where the default figures are published.
    """

    kind: str
    nics_per_node: int
    nic_gbit_per_s: float
    gpus_per_node: int
    system: str = ""
    source: str = ""

    @property
    def nic_gbps_per_gpu(self) -> float:
        """Scale-out line rate per GPU per direction, GB/s (bytes): NICs x Gb/s / 8 / GPUs."""
        return self.nics_per_node * self.nic_gbit_per_s / 8.0 / self.gpus_per_node

    def describe(self) -> str:
        """One line, e.g. `infiniband: 8 x 400 Gb/s per 8-GPU node (50 GB/s per GPU)`."""
        return (f"{self.kind}: {self.nics_per_node} x {self.nic_gbit_per_s:g} Gb/s per "
                f"{self.gpus_per_node}-GPU node ({self.nic_gbps_per_gpu:g} GB/s per GPU)")
