"""One GPU model and the node it ships in: the datasheet figures of the hardware zoo
(`epsim/data/zoo/hardware/`, read by `epsim.zoo`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from epsim.spec.network import NetworkKind


class HardwareSpec(BaseModel):
    """One GPU model and the node it ships in, from vendor datasheets.

    Bandwidths in GB/s (1e9 bytes/s) per direction. `network` is the scale-out kind the node
    ships with; its NIC count and speed (Gb/s, bits, as sold) are in `zoo/networks.yaml`. For
    NVL72 systems a "node" is the 72-GPU NVLink domain.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    bf16_tflops: float = Field(gt=0, description="dense BF16 tensor-core peak")
    fp8_tflops: float = Field(gt=0, description="dense FP8 tensor-core peak")
    hbm_gbps: float = Field(gt=0, description="HBM bandwidth, GB/s")
    hbm_gib: float = Field(gt=0, description="HBM the device reports (GiB, 2^30 bytes): what "
                           "SGLang's memory profile divides; the zoo converts its MiB once")
    hbm_gb: float | None = Field(default=None, gt=0, description="the datasheet figure as sold")
    nvlink_gbps: float = Field(gt=0, description="NVLink bandwidth per GPU per direction, GB/s")
    gpus_per_node: int = Field(gt=0, description="GPUs sharing one NVLink domain")
    network: NetworkKind = Field(default="infiniband", description="default scale-out kind")
    source: str = ""
