"""Where a model's shared experts run: their own dense MLP, or inside the fused MoE kernel.

SGLang fuses DeepSeek-V3/R1's shared expert into the routed experts' kernel
(`DeepseekV2ForCausalLM.determine_num_fused_shared_experts`, python/sglang/srt/models/
deepseek_v2.py): the shared expert's weights load as expert `n_routed_experts`, the router's
top-k gains one slot that every token fills with it (`num_experts + 1` experts, `top_k + 1`),
and no separate shared-expert MLP runs. SGLang does this unless `--disable-shared-experts-fusion`
is given, or any of these holds: two-batch (or single-batch) overlap; a DeepEP-class a2a backend
(DeepEP, Mooncake EP); expert parallelism (`moe_ep_size > 1` on NVIDIA GPUs); a model other than
the DeepSeek-V3 architecture with 256 routed experts and one shared expert (Kimi-K2's 384 only
as one quantised checkpoint, which the zoo does not hold); a GPU below compute capability 8.0
(none in the zoo); W4AFP8 weights (not a format epsim serves).

The zoo knows no architecture names: a DeepSeek-V3-architecture model is one of the
DeepSeek-keyed family (`attention` MLA, plain or with DSA) with 256 routed experts and one
shared expert (DeepSeek-V3, DeepSeek-R1; GLM-5 fuses by the same rule through its own
subclass). The live bench's HF transformers block (`block_kernels: transformers`) runs its
shared expert apart: fused only for SGLang's kernels.
"""

from __future__ import annotations

from epsim.spec.deployment import DeploymentSpec
from epsim.spec.model import ModelSpec

FUSED_ROUTED_EXPERTS = 256       # SGLang's allow-list of n_routed_experts on NVIDIA GPUs
DEEPEP_CLASS_BACKENDS = ("deepep", "mooncake")
# DeepseekV2MoE.forward's `DUAL_STREAM_TOKEN_THRESHOLD`: at most this many tokens the unfused
# shared expert runs beside the router and routed experts (`shared_beside`)
DUAL_STREAM_TOKENS = 1024


def fused_shared_experts(model: ModelSpec, deployment: DeploymentSpec, engine: str,
                         moe_ep_size: int) -> int:
    """Shared experts SGLang runs inside the fused MoE kernel (SGLang's
    `num_fused_shared_experts`, module doc): the model's one shared expert, or 0 (they run
    as their own MLP)."""
    if (engine != "sglang" or deployment.disable_shared_experts_fusion
            or deployment.enable_two_batch_overlap
            or deployment.moe_a2a_backend in DEEPEP_CLASS_BACKENDS or moe_ep_size > 1):
        return 0
    deepseek_v3 = (model.attention.startswith("mla") and model.num_shared_experts == 1
                   and model.num_experts == FUSED_ROUTED_EXPERTS)
    return model.num_shared_experts if deepseek_v3 else 0


def shared_beside(model: ModelSpec, deployment: DeploymentSpec, engine: str, fused: int) -> bool:
    """Whether SGLang runs a DeepSeek-family model's unfused shared expert on the main stream
    while the router, top-k and routed experts run on an alternate one, the MoE layer waiting
    for the longer (`DeepseekV2MoE.forward` -> `forward_normal_dual_stream`: CUDA, no
    DeepEP-class a2a backend, `num_fused_shared_experts == 0`, 1 to `DUAL_STREAM_TOKENS` tokens
    on the rank; two-batch overlap runs its own op sequence). The token bound is the step's
    (`CostModel._token_terms`)."""
    return (engine == "sglang" and fused == 0 and model.num_shared_experts > 0
            and model.attention.startswith("mla")
            and deployment.moe_a2a_backend not in DEEPEP_CLASS_BACKENDS
            and not deployment.enable_two_batch_overlap)
