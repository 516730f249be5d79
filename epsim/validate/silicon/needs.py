"""A silicon row's facts as scenario *needs*, and what the spec answers to each.

Every fact a row states is a need: a dotted scenario path and value (`deployment.tp_size`, 8),
named the way SGLang's server arguments and issues 37/38 name it. The spec is asked whether it
accepts each need (a scenario is built with it); a need it refuses is *missing* (`Missing`, the
row's reason). A need whose value is what the spec already means without the field (no MoE-TP,
`kv_cache_dtype: auto`) is *neutral*. `approximate_need` gives a refused need its nearest
expressible form, for `plan_row(..., approximate=True)` (`epsim.validate.silicon.mapping`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from epsim.errors import EpsimError
from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon.rows import Side, SiliconRow
from epsim.zoo import get_model

# row model -> zoo model: DeepSeek-R1 has DeepSeek-V3's architecture (the same config.json
# shapes); Qwen3-235B-A22B-FP8 is Qwen3-235B-A22B with block-FP8 weights (a quantization need)
MODELS = {"deepseek-ai/DeepSeek-V3": "DeepSeek-V3", "deepseek-ai/DeepSeek-R1": "DeepSeek-V3",
          "Qwen/Qwen3-235B-A22B-FP8": "Qwen3-235B-A22B"}
# row system -> zoo GPU (a GPU the zoo lacks is a missing need, `cluster.gpu`)
GPUS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "b300_sxm": "B300",
        "gb200": "GB200", "gb300": "GB300"}
# the MoE weights' quantization names the checkpoint's scheme (SGLang's --quantization is one
# value per checkpoint: DeepSeek's FP8 checkpoints are 128x128 block-scaled throughout)
QUANTIZATION = {"fp8_block": "fp8_block", "nvfp4": "nvfp4", "fp8": "fp8", "bf16": "bf16", "": "bf16"}
KV_CACHE_DTYPE = "auto"      # the rows do not state it; SGLang's default (the model's dtype)


@dataclass(frozen=True)
class Need:
    """One fact of a row as a scenario path and value.

    Attributes:
        path: dotted scenario path in SGLang's names (`deployment.moe_tp_size`).
        value: what the row needs there.
        feature: what it is, as the features table counts it ("MoE-TP").
        issue: the issue that adds it, if any.
        neutral: the spec without the field already means this value.
        shown: how a reason writes the value (default: the value itself).
    """

    path: str
    value: Any
    feature: str
    issue: int | None = None
    neutral: bool = False
    shown: str | None = None


@dataclass(frozen=True)
class Missing:
    """A need the spec refused: `detail` is the spec's own one-line answer."""

    need: Need
    detail: str

    @property
    def reason(self) -> str:
        issue = f", issue {self.need.issue}" if self.need.issue else ""
        value = self.need.shown or _show(self.need.value)
        return f"needs {self.need.path}={value} ({self.need.feature}{issue})"

def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def set_path(data: dict, path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = copy.deepcopy(value)


def spec_error(data: dict) -> str | None:
    """The spec's one-line refusal of a scenario mapping, or None when it builds."""
    try:
        scenario_from_dict(copy.deepcopy(data), where="scenario")
    except EpsimError as exc:
        return " ".join(str(exc).split())
    return None


def short_answer(detail: str) -> str:
    """The spec's answer without the list of allowed fields (the reason names the field)."""
    return detail.split("; allowed:")[0]

def side_needs(row: SiliconRow, side: Side) -> list[Need]:
    """The needs of one instance of `side` beyond what every scenario has (model, lengths).

    SGLang's names: `tp_size` is the instance's GPUs; with `enable_dp_attention` there are
    `dp_size` attention ranks, each of tp_size / dp_size GPUs; `ep_size` and `moe_tp_size`
    split the experts (moe_tp x ep = tp_size).
    """
    gpus = side.num_gpus
    quant = QUANTIZATION.get(row.moe_quant_mode, row.moe_quant_mode)
    needs = [Need("cluster.gpu", GPUS.get(row.system, row.system),
                  f"GPU {GPUS.get(row.system, row.system)} in the hardware zoo")]
    needs.append(Need("deployment.tp_size", gpus, "attention TP", 37, neutral=side.tp_size == 1))
    if side.attention_dp_size > 1:
        needs.append(Need("deployment.dp_size", side.attention_dp_size,
                          "attention DP over part of the instance", 37,
                          neutral=side.attention_dp_size == gpus))
    needs += [Need("deployment.moe_tp_size", side.moe_tp_size, "MoE-TP", 37,
                   neutral=side.moe_tp_size == 1),
              Need("deployment.pp_size", side.pp_size, "pipeline parallelism",
                   neutral=side.pp_size == 1),
              Need("deployment.quantization", quant, f"{quant} weights", 37, neutral=quant == "bf16"),
              Need("deployment.kv_cache_dtype", KV_CACHE_DTYPE, "KV-cache dtype", 37,
                   neutral=KV_CACHE_DTYPE == "auto")]
    return needs


def closed_loop_needs(clients: int, disagg: bool) -> list[Need]:
    """Closed-loop clients (`sglang.bench_serving --max-concurrency`); a P/D pair also needs
    each side's clients to wait out the other side (a think time)."""
    needs = [Need("workload.arrivals", {"kind": "concurrency", "clients": clients},
                  "closed-loop clients", 38)]
    if disagg:
        needs.append(Need("workload.arrivals.think_time_s", 0.0, "a client's wait for the other side "
                          "of a P/D pair (think time)", 38,
                          shown="<the other side's time per request>"))
    return needs

def approximate_need(need: Need, data: dict, side: Side) -> str | None:
    """Edit `data` to the nearest expressible form of `need`; the tag, or None when there is none."""
    gpus = side.num_gpus
    if need.path in ("deployment.tp_size", "deployment.dp_size", "deployment.moe_tp_size"):
        data["deployment"].update(ep_size=gpus, enable_dp_attention=True,
                                  moe_a2a_backend="deepep" if gpus > 1 else "none")
        return (f"attention TP {side.tp_size} x DP {side.attention_dp_size}, MoE-TP "
                f"{side.moe_tp_size} x EP {side.moe_ep_size} as DP attention + EP {gpus}")
    if need.path == "deployment.quantization":
        dtype = get_model(data["model"]).weight_dtype
        return f"{need.value} weights as the zoo's {dtype} weights on BF16-fitted kernels"
    if need.path.startswith("workload.arrivals"):
        return "closed-loop clients as Poisson arrivals at the loop's rate (Little's law)"
    return None
