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
    fp4_tflops: float | None = Field(default=None, gt=0, description="dense FP4 (NVFP4) "
                                     "tensor-core peak; None: no FP4 tensor cores (Hopper)")
    hbm_gbps: float = Field(gt=0, description="HBM bandwidth, GB/s")
    hbm_gib: float = Field(gt=0, description="HBM the device reports (GiB, 2^30 bytes): what "
                           "SGLang's memory profile divides; the zoo converts its MiB once")
    hbm_gb: float | None = Field(default=None, gt=0, description="the datasheet figure as sold")
    nvlink_gbps: float = Field(gt=0, description="NVLink bandwidth per GPU per direction, GB/s")
    l2_bytes: float = Field(gt=0, description="L2 cache of the whole GPU (both dies on "
                            "Blackwell), bytes; its source on the zoo entry's line")
    gpus_per_node: int = Field(gt=0, description="GPUs sharing one NVLink domain")
    gpus_per_host: int | None = Field(default=None, gt=0, description=(
        "GPUs under one host OS where fewer than the NVLink domain (a GB200 / GB300 compute "
        "tray: 4); None: gpus_per_node. SGLang's custom all-reduce stays within one host"))
    network: NetworkKind = Field(default="infiniband", description="default scale-out kind")
    source: str = ""

    def tensor_tflops(self, dtype: str) -> float | None:
        """Dense tensor-core peak for GEMM inputs of `dtype` ("bf16", "fp8", "fp4"; the
        formats' `epsim.spec.quant.weight_tensor_dtype`), TFLOP/s; None where the GPU has none."""
        return {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp4": self.fp4_tflops}[dtype]
