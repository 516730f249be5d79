"""The cluster a scenario runs on: nodes of one zoo GPU (`epsim.spec.gpu`) joined by NVLink
inside a node and a scale-out network across nodes; unset fields take the zoo's datasheet
values (`epsim.zoo`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from epsim.spec.gpu import HardwareSpec
from epsim.spec.network import Network, NetworkSpec
from epsim.zoo import get_hardware, resolve_network


class ClusterSpec(BaseModel):
    """Nodes of one GPU type joined by NVLink inside a node and RDMA across nodes.

    Bandwidth fields left unset take the GPU's datasheet value; the calibration profile,
    not this spec, supplies achieved efficiencies and latencies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(default="H200", description="hardware zoo name (checked by the scenario "
                     "loader; `hardware` raises for an unknown one)")
    num_nodes: int = Field(default=1, gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0)
    nvlink_gbps: float | None = Field(default=None, gt=0)
    rdma_gbps: float | None = Field(default=None, gt=0, description="per GPU per direction, GB/s; "
                                    "overrides what `network` gives")
    network: NetworkSpec | None = Field(default=None, description="scale-out network; a kind "
                                        "string is short for {kind: ...}; None = the GPU's default")
    price_per_gpu_hour: float = Field(default=0.0, ge=0)

    @field_validator("network", mode="before")
    @classmethod
    def _network_kind(cls, value):
        return {"kind": value} if isinstance(value, str) else value

    @property
    def hardware(self) -> HardwareSpec:
        return get_hardware(self.gpu)

    @property
    def gpus_per_node_resolved(self) -> int:
        return self.gpus_per_node or self.hardware.gpus_per_node

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node_resolved

    @property
    def nvlink_gbps_resolved(self) -> float:
        return self.nvlink_gbps or self.hardware.nvlink_gbps

    @property
    def network_resolved(self) -> Network:
        """The scale-out network with datasheet defaults filled in (`zoo/networks.yaml`)."""
        return resolve_network(self.network or NetworkSpec(kind=self.hardware.network), self.gpu,
                               self.gpus_per_node_resolved)

    @property
    def rdma_gbps_resolved(self) -> float:
        """Scale-out bandwidth per GPU per direction, GB/s: `rdma_gbps`, else the network's
        NICs x Gb/s / 8 / GPUs per node."""
        return self.rdma_gbps or self.network_resolved.nic_gbps_per_gpu
