"""GPUs (datasheet figures) and the clusters built from them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class HardwareSpec(BaseModel):
    """One GPU model and the node it ships in, from vendor datasheets.

    Bandwidths in GB/s (1e9 bytes/s) per direction, NIC speed in Gb/s (bits) as sold.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    bf16_tflops: float = Field(gt=0, description="dense BF16 tensor-core peak")
    fp8_tflops: float = Field(gt=0, description="dense FP8 tensor-core peak")
    hbm_gbps: float = Field(gt=0, description="HBM bandwidth, GB/s")
    hbm_gib: float = Field(gt=0)
    nvlink_gbps: float = Field(gt=0, description="NVLink bandwidth per GPU per direction, GB/s")
    nic_gbits: float = Field(gt=0, description="scale-out NIC per GPU, Gb/s")
    gpus_per_node: int = Field(gt=0)
    source: str = ""

    @property
    def nic_gbps(self) -> float:
        """Scale-out NIC per GPU per direction in GB/s (bytes)."""
        return self.nic_gbits / 8.0


class ClusterSpec(BaseModel):
    """Nodes of one GPU type joined by NVLink inside a node and RDMA across nodes.

    Bandwidth fields left unset take the GPU's datasheet value; the calibration profile,
    not this spec, supplies achieved efficiencies and latencies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(default="H200", description="hardware zoo name")
    num_nodes: int = Field(default=1, gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0)
    nvlink_gbps: float | None = Field(default=None, gt=0)
    rdma_gbps: float | None = Field(default=None, gt=0, description="per GPU per direction, GB/s")
    price_per_gpu_hour: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _known_gpu(self) -> "ClusterSpec":
        from epsim.zoo import hardware_names
        if self.gpu not in hardware_names():
            raise ValueError(f"gpu ({self.gpu!r}) must be one of {hardware_names()}")
        return self

    @property
    def hardware(self) -> HardwareSpec:
        from epsim.zoo import get_hardware
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
    def rdma_gbps_resolved(self) -> float:
        return self.rdma_gbps or self.hardware.nic_gbps
