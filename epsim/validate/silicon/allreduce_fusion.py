"""Whether a silicon row's SGLang server ran flashinfer's all-reduce fusion, as its version decides.

SGLang turns `enable_flashinfer_allreduce_fusion` on by itself (`ServerArgs.
_handle_model_specific_adjustments`, read in the released wheels):

- 0.5.7 to 0.5.9 (and later until a release says otherwise): for `DeepseekV3ForCausalLM`
  (DeepSeek-V3/R1), `Qwen3MoeForCausalLM` and a few others, on SM90 or SM100 (Hopper or
  Blackwell; not H20), without DP attention, on one node, with `moe_a2a_backend` none;
- 0.5.5 and 0.5.6: for `DeepseekV3ForCausalLM` on SM100 only, without DP attention (0.5.6
  also on one node only);
- earlier: never for these models.

Only rows served by SGLang (`backend` sglang) at a stated release (`backend_version`; a nightly
build states none) are judged. A launch script may set the flag itself; the rows' do not. What
it changes is priced by
`epsim.cost.attention_ops` (the two add-RMSNorms of a layer inside the TP all-reduces).
"""

from __future__ import annotations

import re

# config.json `architectures` of the rows' checkpoints (`epsim.validate.silicon.needs.MODELS`)
ARCHITECTURES = {"deepseek-ai/DeepSeek-V3": "DeepseekV3ForCausalLM",
                 "deepseek-ai/DeepSeek-R1": "DeepseekV3ForCausalLM",
                 "Qwen/Qwen3-235B-A22B-FP8": "Qwen3MoeForCausalLM"}
HOPPER = ("H100", "H200", "H800")        # SM90 (SGLang leaves H20 out: flashinfer#2204)
BLACKWELL = ("B200", "B300", "GB200", "GB300")   # SM100 / SM103
GENERAL_FROM = (0, 5, 7)                 # Hopper and Blackwell, DeepSeek and Qwen3-MoE
BLACKWELL_DEEPSEEK_FROM = (0, 5, 5)      # Blackwell DeepSeek only
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def sglang_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an SGLang version string ("0.5.10.post1"), None if none."""
    found = _VERSION.search(text or "")
    return tuple(int(g) for g in found.groups()) if found else None


def fusion_on(version: tuple[int, int, int] | None, model_path: str, gpu: str,
              deployment: dict, num_nodes: int) -> bool:
    """Whether SGLang `version` turns the fusion on for this instance (module docstring).

    Args:
        deployment: the instance's `DeploymentSpec` fields (`tp_size`, `enable_dp_attention`,
            `moe_a2a_backend`, and the flag itself where a script set it).
        num_nodes: nodes of one instance.
    """
    if deployment.get("enable_flashinfer_allreduce_fusion"):
        return True
    arch = ARCHITECTURES.get(model_path)
    if (version is None or arch is None or deployment.get("enable_dp_attention")
            or num_nodes != 1 or int(deployment.get("tp_size", 1)) < 2):
        return False
    if version >= GENERAL_FROM:
        return gpu in HOPPER + BLACKWELL and deployment.get("moe_a2a_backend", "none") == "none"
    return (version >= BLACKWELL_DEEPSEEK_FROM and arch == "DeepseekV3ForCausalLM"
            and gpu in BLACKWELL)


def apply(row, data: dict) -> str | None:
    """Set `deployment.enable_flashinfer_allreduce_fusion` in an instance's scenario `data` where
    the row's SGLang turns it on; returns the assumption line, or None (left off)."""
    deployment, cluster = data["deployment"], data["cluster"]
    version = sglang_version(row.backend_version) if row.backend == "sglang" else None
    if not fusion_on(version, row.model_path, cluster["gpu"], deployment,
                     int(cluster.get("num_nodes", 1))):
        return None
    deployment["enable_flashinfer_allreduce_fusion"] = True
    return (f"SGLang {row.backend_version} on {cluster['gpu']} turns on flashinfer's all-reduce "
            "fusion (one node, no DP attention, moe_a2a_backend none): a layer's two add-RMSNorms "
            "run inside its TP all-reduces at <= 2048 tokens")
