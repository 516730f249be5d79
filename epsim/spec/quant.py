"""Number formats: how many bytes a weight or a KV-cache entry takes, what tensor-core rate a
GEMM on those weights runs at, and how SGLang's `--quantization` and `--kv-cache-dtype` names
map onto them.

Weight formats (storage bytes include their scales: what HBM holds and a GEMM streams):

| format      | values   | scales                                     | bytes / weight | tensor rate |
|-------------|----------|--------------------------------------------|----------------|-------------|
| `bf16`      | BF16     | -                                          | 2              | BF16        |
| `fp16`      | FP16     | -                                          | 2              | BF16 (same) |
| `fp8`       | FP8 E4M3 | one per tensor (or per output row: w8a8)   | 1              | FP8         |
| `fp8_block` | FP8 E4M3 | one float32 per 128 x 128 block (DeepSeek) | 1 + 4/16384    | FP8         |
| `nvfp4`     | FP4 E2M1 | one FP8 E4M3 per 16 values (+ one fp32)    | 0.5 + 1/16     | FP4         |
| `w4a16`     | INT4     | one BF16 per 32 values (Kimi-K2.5's)       | 0.5 + 2/32     | BF16 (*)    |

(*) a weight-only format: the weights are dequantised to BF16 for the tensor cores.

KV-cache dtypes (SGLang's `--kv-cache-dtype`): `auto` is the model's activation dtype, BF16
for every zoo model (2 bytes); `bf16` 2; `fp8_e4m3` and `fp8_e5m2` 1 byte per element.

Sources: DeepSeek-V3 / R1, Qwen3-235B-A22B-FP8 and MiniMax-M2.5 `config.json`
(`quantization_config.weight_block_size: [128, 128]`); NVIDIA's NVFP4 checkpoints
(`hf_quant_config.json`: `quant_algo: NVFP4, group_size: 16`); Kimi-K2.5's
(`compressed-tensors`, 4-bit integer weights, `group_size: 32`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WeightFormat = Literal["bf16", "fp16", "fp8", "fp8_block", "nvfp4", "w4a16"]
WEIGHT_FORMATS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp8_block", "nvfp4", "w4a16")

# SGLang's `--quantization` values epsim takes, with our format names besides (a silicon
# row or a user may name the format itself); None = the checkpoint's own format
QUANTIZATIONS: tuple[str, ...] = ("bf16", "fp8", "w8a8_fp8", "modelopt_fp8", "fp8_block",
                                  "modelopt_fp4", "nvfp4", "w4a16")
Quantization = Literal[QUANTIZATIONS]

KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp8_e4m3", "fp8_e5m2")
KVCacheDtype = Literal[KV_CACHE_DTYPES]

TensorDtype = Literal["bf16", "fp8", "fp4"]


@dataclass(frozen=True)
class _Layout:
    value_bits: int
    scale_bytes: float       # bytes of one scale
    group: int               # weights sharing one scale (0: one scale per tensor, ~0 bytes)
    tensor: TensorDtype      # the tensor-core input dtype a GEMM on these weights runs at

    @property
    def bytes_per_element(self) -> float:
        scales = self.scale_bytes / self.group if self.group else 0.0
        return self.value_bits / 8.0 + scales


_LAYOUTS: dict[str, _Layout] = {
    "bf16": _Layout(16, 0.0, 0, "bf16"),
    "fp16": _Layout(16, 0.0, 0, "bf16"),
    "fp8": _Layout(8, 4.0, 0, "fp8"),
    "fp8_block": _Layout(8, 4.0, 128 * 128, "fp8"),
    "nvfp4": _Layout(4, 1.0, 16, "fp4"),
    "w4a16": _Layout(4, 2.0, 32, "bf16"),
}

_KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


def weight_bytes_per_element(fmt: str) -> float:
    """Bytes one weight takes in `fmt`, its share of the scales included (table above).

    Raises:
        ValueError: `fmt` is not one of WEIGHT_FORMATS.
    """
    layout = _LAYOUTS.get(fmt)
    if layout is None:
        raise ValueError(f"weight format ({fmt!r}) must be one of {list(WEIGHT_FORMATS)}")
    return layout.bytes_per_element


def weight_tensor_dtype(fmt: str) -> TensorDtype:
    """The tensor-core rate a GEMM on `fmt` weights runs at: "bf16", "fp8" or "fp4" (a
    weight-only format dequantises to BF16). Where the quantised GEMM physics reads it."""
    weight_bytes_per_element(fmt)                 # the one error for an unknown format
    return _LAYOUTS[fmt].tensor


def kv_bytes_per_element(kv_cache_dtype: str) -> float:
    """Bytes one KV-cache element takes (`auto`: the model's BF16 activations).

    Raises:
        ValueError: not one of KV_CACHE_DTYPES.
    """
    found = _KV_BYTES.get(kv_cache_dtype)
    if found is None:
        raise ValueError(f"kv_cache_dtype ({kv_cache_dtype!r}) must be one of {list(KV_CACHE_DTYPES)}")
    return found


@dataclass(frozen=True)
class ServedFormats:
    """The formats a deployment serves a model's weights in.

    Attributes:
        experts: the routed experts' weights.
        dense: attention projections, shared experts and dense layers.
    """

    experts: str
    dense: str


def served_formats(experts: str, dense: str, quantization: str | None) -> ServedFormats:
    """The served formats of a checkpoint whose experts and dense parts are `experts` and
    `dense`, under SGLang's `--quantization` (None: the checkpoint's own).

    `fp8` is SGLang's FP8 method: it reads a block-quantised checkpoint's 128 x 128 scales
    (`weight_block_size`) and quantises any other checkpoint per tensor at load. `w8a8_fp8`
    and `modelopt_fp8` are per-tensor (per-channel) FP8. `modelopt_fp4` serves NVFP4 experts;
    NVIDIA's NVFP4 checkpoints keep attention in BF16, so the dense parts stay BF16 there.
    `w4a16` (Kimi-K2.5's INT4 experts) likewise leaves the dense parts BF16.
    """
    if quantization is None:
        return ServedFormats(experts, dense)
    if quantization == "fp8":
        block = "fp8_block" if experts == "fp8_block" else "fp8"
        return ServedFormats(block, "fp8_block" if dense == "fp8_block" else "fp8")
    fmt = {"w8a8_fp8": "fp8", "modelopt_fp8": "fp8", "modelopt_fp4": "nvfp4"}.get(quantization,
                                                                               quantization)
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"quantization ({quantization!r}) must be one of {list(QUANTIZATIONS)}")
    if fmt in ("nvfp4", "w4a16"):
        return ServedFormats(fmt, "bf16")
    return ServedFormats(fmt, fmt)


def served_model(model, quantization: str | None):
    """`model` (a `ModelSpec`) with the weight formats a deployment serves it in
    (`served_formats` of its checkpoint under `quantization`); `model` itself when they are the
    checkpoint's, so a deployment that leaves `quantization` unset prices exactly its model."""
    served = served_formats(model.weight_dtype, model.dense_weight_dtype or model.weight_dtype,
                            quantization)
    dense = None if served.dense == served.experts else served.dense
    if (served.experts, dense) == (model.weight_dtype, model.dense_weight_dtype):
        return model
    return model.model_copy(update={"weight_dtype": served.experts, "dense_weight_dtype": dense})
