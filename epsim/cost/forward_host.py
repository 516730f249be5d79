"""The host time of one eager DeepSeek-V3/R1 prefill forward as SGLang runs it, and what of it
a step exposes.

SGLang 0.5.5-0.5.9 runs every extend (prefill) forward eagerly at the silicon rows' flags: its
CUDA graphs are decode's, and the piecewise CUDA graph that captures extends is off by default
(`enable_piecewise_cuda_graph = False`, 0.5.9 `server_args.py:604`; PR #16331 of 2026-03-02 turns
it on later), which no row's recipe sets (the P/D prefill recipes disable CUDA graphs). 0.5.10.post1
defaults it on (`disable_piecewise_cuda_graph = False`, `server_args.py:637`, at most 2048 tokens
for an MLA model, :1254-1261) but turns it off again for every row that runs 0.5.10 or later:
`--moe-runner-backend flashinfer_trtllm` (:2722-2731, "bypassed topk is incompatible with
torch.compile"; every B200/B300 DeepSeek agg script passes it), `--enable-symm-mem` (:1131-1133),
DP attention (:1092-1093), an all-to-all MoE backend (:1104-1105) and P/D disaggregation
(:1129-1130), so those extends run eager as 0.5.9's do. The CPU then
issues each kernel from Python, one after another; the GPU runs them as they come. Without a
host sync inside the forward the CPU runs ahead, so the forward lasts `max(device, host)`; where
the forward waits on the host every layer (DeepEP normal mode's dispatch spins the CPU on each
MoE layer's receive counts, `token_dispatcher/deepep.py`), the CPU is never more than a layer
ahead and each layer lasts `max(layer device, layer host)`.

Counted from the 0.5.9 wheel (`sglang/srt/`; 0.5.8 runs the same path) for an extend without a
cached prefix (`AttnForwardMethod.MHA`, `models/deepseek_common/attention_forward_methods/
forward_mha.py` `forward_normal_prepare` / `forward_normal_core`), attention tensor-parallel,
kernel launches issued from Python per layer (`LAYER_LAUNCHES`):

  the block     fused add-RMSNorm before the attention and before the MLP (`LayerCommunicator.
                prepare_attn` / `prepare_mlp`), `q_a_layernorm` and `kv_a_layernorm`, RoPE on
                `q_pe` / `k_pe` (sgl-kernel, in place), `q_pe` written back into `q`, the latent
                KV written to the cache (`set_mla_kv_buffer`), `concat_mla_k`, the ragged
                attention kernel; on Blackwell with an FP8 KV cache (the recipes' `trtllm_mla`)
                q, k and v quantised before it (`trtllm_mla_backend.py` `_quantize_fp8_qkv`)
  linears       `fused_qkv_a_proj_with_mqa`, `q_b_proj`, `kv_b_proj`, `o_proj`, and the
                MLP's (shared experts' or dense layer's) `gate_up_proj` / `down_proj`, each one
                GEMM in BF16 and an activation quantisation plus a GEMM in block FP8
                (`fp8_utils.py`; `LINEAR_LAUNCHES`); `silu_and_mul` between the MLP's two
  TP            the all-reduce after the attention and after the MLP (custom / FlashInfer
                all-reduce; 0 at TP 1)
  MoE           the router GEMM (`MoEGate`), the routed experts by runner (`RUNNER_LAUNCHES`),
                the shared experts' output added (`DeepseekV2MoE.forward_normal`)

and per forward (`FORWARD_LAUNCHES`): `ForwardBatch.init_new` (positions, lengths to the GPU),
the attention backend's `init_forward_metadata` (cumulative lengths), the embedding, the final
norm, the logits processor (last-token gather, LM head, TP all-gather) and the sampler, and the
sampled ids read back.

Unit: one launch at `launch_us`, the host time of an eager launch where epsim measured one: the
profile's `any/block_ops/host` per launch of the block it timed, else the shipped profile's
(the live bench's eager block ops minus their device time on our harness's host, 29.3 us a
launch; extrapolated to the serving host, which nobody here timed). A public op-level figure
agrees: an eager 1-token extend of DeepSeek-V3 on SGLang took 82.6 ms a forward against 23.1 ms
in a CUDA graph (sgl-project/sglang PR #12160, 2025-10, TP0's forward time; the host bound the
eager forward, the graph its device time), ~30 us per launch at the count of that path (the
absorbed MLA of a cached prefix and Hopper's Triton MoE: ~45 launches a layer). A launch issued
from C++ inside one Python call (FlashInfer's fused MoE routing, GEMMs and finalize) costs
microseconds and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.cost.block_ops import launches
from epsim.default_profile import default_profile

# launches of every layer outside its linears, TP collectives and routed experts
LAYER_LAUNCHES = {
    "norms": 2,                # fused add-RMSNorm before the attention and before the MLP
    "latent_norms": 2,         # q_a_layernorm, kv_a_layernorm
    "rope": 1,                 # q_pe, k_pe in place
    "q_pe_write": 1,           # q[..., nope:] = q_pe
    "kv_cache_write": 1,       # set_mla_kv_buffer
    "concat_k": 1,             # concat_mla_k
    "attention": 1,            # the ragged prefill kernel
}
FP8_KV_QUANT = 3               # trtllm_mla with an FP8 KV cache: q, k, v quantised
ATTENTION_LINEARS = 4          # fused_qkv_a_proj_with_mqa, q_b_proj, kv_b_proj, o_proj
MLP_LINEARS = 2                # gate_up_proj, down_proj (shared experts or the dense MLP)
MLP_ACT = 1                    # silu_and_mul
TP_ALLREDUCES = 2              # after the attention, after the MLP
MOE_OWN = 2                    # router GEMM, shared experts' output added to the routed
LINEAR_LAUNCHES = {"bf16": 1, "fp8": 2, "fp8_block": 2, "nvfp4": 2, "mxfp4": 2, "w4a16": 1}
# routed experts by MoE runner: FlashInfer's TRT-LLM fused MoE (Blackwell, quantised experts:
# input quantisation and one call, its routing inside); Triton's fused MoE (SGLang's block ops:
# fused top-k and its id postprocess, `moe_align_block_size`'s three, `moe_sum_reduce`; then the
# input quantisation, two GEMMs, `silu_and_mul` and the second quantisation); DeepEP normal's
# runner (dispatch layout, dispatch, `ep_scatter`, quantisation, two grouped GEMMs, activation,
# quantisation, `ep_gather`, combine; its top-k as Triton's)
RUNNER_LAUNCHES = {"trtllm": 2, "triton": 13, "deepep_normal": 13}
FORWARD_LAUNCHES = {
    "forward_batch_init": 6,   # positions, sequence and extend lengths to the GPU
    "attention_metadata": 5,   # cumulative lengths, indices
    "embedding": 1,
    "final_norm": 1,
    "logits": 4,               # last-token gather, LM head, TP all-gather, slice
    "sampler": 5,              # temperature, softmax, top-k/top-p, sample, ids cast
    "readback": 1,             # next_token_ids.tolist()
}


@dataclass(frozen=True)
class ForwardHost:
    """One eager prefill forward's host time (module doc).

    Attributes:
        moe_layer_launches: launches of one MoE layer.
        dense_layer_launches: launches of one dense layer.
        forward_launches: launches once a forward.
        num_moe_layers, num_dense_layers: the model's layers.
        launch_us: host time of one launch (µs).
        waits_host: the forward waits on the host every MoE layer (DeepEP normal mode).
        source: where `launch_us` came from.
    """

    moe_layer_launches: int
    dense_layer_launches: int
    forward_launches: int
    num_moe_layers: int
    num_dense_layers: int
    launch_us: float
    waits_host: bool
    source: str

    @property
    def moe_layer_us(self) -> float:
        return self.moe_layer_launches * self.launch_us

    @property
    def host_us(self) -> float:
        """Host time of the whole forward (µs)."""
        return self.launch_us * (self.moe_layer_launches * self.num_moe_layers
                                 + self.dense_layer_launches * self.num_dense_layers
                                 + self.forward_launches)

    def exposed_us(self, layer_us: np.ndarray, device_us: float) -> float:
        """Host time the forward adds to its device time `device_us` (µs): what outlasts it,
        or, where the forward waits on the host, what each MoE layer's host outlasts of that
        layer (`layer_us`: [moe_layers] µs) plus what the rest's host outlasts of the rest.

        Args:
            layer_us: [moe_layers] float64, each MoE layer's priced time (µs).
            device_us: the step's priced time (µs).
        """
        if not self.waits_host:
            return max(0.0, self.host_us - device_us)
        per_layer = float(np.maximum(self.moe_layer_us - layer_us, 0.0).sum())
        rest_host = self.host_us - self.moe_layer_us * self.num_moe_layers
        rest_device = device_us - float(layer_us.sum())
        return per_layer + max(0.0, rest_host - rest_device)


def launch_host_us(params) -> tuple[float, str]:
    """(µs, source) of one eager launch's host time: the profile's `any/block_ops/host` per
    launch of the block it timed, else the shipped profile's (module doc)."""
    # not `any/serving_host` `loop_launch_us` (the scheduler loop's small index and copy ops):
    # the model's launches are GEMMs, norms and attention with weights and arguments, the block's
    block = params.eager.block_ops.timing
    if block.host_us > 0:
        return block.host_us / launches(BLOCK_OPS_PARTS), "any/block_ops/host per launch"
    shipped = default_profile("H200").components.get("any/block_ops/host")
    us = shipped.params["base_us"] / launches(BLOCK_OPS_PARTS)
    return us, "the shipped profile's any/block_ops/host per launch (extrapolated: another host)"


def forward_host(params, engine: str) -> ForwardHost | None:
    """The eager prefill forward's host work of a deployment priced with `params`
    (`CostParams`), or None where it is not priced: `deployment.eager_prefill_host` off,
    another engine than SGLang's, a model without MLA (the count is DeepSeek-V3's),
    or CUDA graphs forced on every step."""
    m, d = params.model, params.deployment
    if (not d.eager_prefill_host or engine != "sglang" or m.attention != "mla"
            or params.time_mode == "graph"):
        return None
    dense_fmt = m.dense_weight_dtype or m.weight_dtype
    linear = LINEAR_LAUNCHES.get(dense_fmt, 2)
    blackwell = params.cluster.hardware.fp4_tflops is not None     # FP4 tensor cores
    block = sum(LAYER_LAUNCHES.values()) + ATTENTION_LINEARS * linear
    if blackwell and d.kv_cache_dtype.startswith("fp8"):
        block += FP8_KV_QUANT
    tp = TP_ALLREDUCES if params.parallel.tp_size > 1 else 0
    mlp = MLP_LINEARS * linear + MLP_ACT
    mode = params.kernel_modes.get("prefill", "")
    if params.backend == "deepep" and mode == "normal":
        runner = "deepep_normal"
    elif params.eager.experts.reread_gbps:
        runner = "trtllm"
    else:
        runner = "triton"
    shared = mlp if m.num_shared_experts else 0
    moe_layer = block + tp + shared + MOE_OWN + RUNNER_LAUNCHES[runner]
    dense_layer = block + tp + mlp
    launch_us, source = launch_host_us(params)
    return ForwardHost(moe_layer, dense_layer, sum(FORWARD_LAUNCHES.values()), m.num_moe_layers,
                       m.num_dense_layers, launch_us, runner == "deepep_normal", source)
