"""How the model is laid out and served: parallelism (TP, attention DP, EP, MoE-TP), number
formats, all-to-all backend, EPLB, batching.

Option names follow SGLang's server arguments where one exists.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from epsim import vocab
from epsim.spec.parallel import Parallel, resolve_parallel
from epsim.spec.quant import KVCacheDtype, Quantization

# the literals are `epsim.vocab`'s tuples, so a new backend or mode is added in one place
A2ABackend = Literal[vocab.A2A_BACKENDS]
DeepEPMode = Literal[vocab.DEEPEP_MODE_CHOICES]
EPLBAlgorithm = Literal["deepseek", "deepseek_hierarchical", "deepseek_global", "sticky"]
ReplicaSelection = Literal[vocab.REPLICA_SELECTIONS]


class FailureSpec(BaseModel):
    """One rank lost at a scenario time (elastic EP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0, description="simulated seconds after start")
    rank: int = Field(ge=0)
    recover_after_s: float | None = Field(default=None, gt=0,
                                          description="rank rejoins after this long; None = never")


class FirstUseCompileSpec(BaseModel):
    """Kernels the server compiles inside the run on first use (`epsim.sim.first_use`): by `kernel`,
    SGLang's Triton fused MoE at each prefill batch's new shape key (`epsim.cost.first_use`), or
    FlashInfer's CUTLASS FMHA module that SGLang's `trtllm_mla` backend plans on the first prefill
    step attending to a prefix (a chunked prompt's later chunk), built once, or SGLang's paged KV
    allocator's Triton kernels at each batch's new key (`epsim.sim.first_use_alloc`); the FMHA
    variant with `alloc_compile_s` carries the allocator's kernels as well."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kernel: Literal["sglang_triton_fused_moe", "flashinfer_cutlass_fmha",
                    "sglang_paged_alloc"] = "sglang_triton_fused_moe"
    compile_s: float = Field(gt=0, le=600, description=(
        "host seconds one new kernel's compile (the FMHA module's build; the paged allocator's "
        "extend kernel) holds the step"))
    decode_compile_s: float | None = Field(default=None, gt=0, le=600, description=(
        "sglang_paged_alloc: host seconds of one new decode-kernel compile (None: compile_s)"))
    alloc_compile_s: float | None = Field(default=None, gt=0, le=600, description=(
        "flashinfer_cutlass_fmha: the server also pages its KV cache (page_size), so the paged "
        "allocator's kernels compile at each new key as under sglang_paged_alloc: host seconds of "
        "one new extend-kernel compile (its decode kernel's: decode_compile_s); None: the module "
        "build alone"))
    page_size: int = Field(default=64, ge=2, description=(
        "sglang_paged_alloc (and flashinfer_cutlass_fmha with alloc_compile_s): the KV "
        "allocator's page size (tokens; trtllm_mla's 64)"))
    extend_keys_tokens: bool = Field(default=True, description=(
        "sglang_paged_alloc: the extend kernel keys on max_num_extend_tokens (SGLang 0.5.6-0.5.9; "
        "False: 0.5.10, sgl-project/sglang#19898)"))
    spec_compile_s: dict[str, float] = Field(default_factory=dict, description=(
        "sglang_paged_alloc under speculative decoding: host seconds of one compile of each "
        "EAGLE v1 kernel keyed on the batch, by name (`epsim.sim.first_use_alloc.SPEC_KERNELS`)"))
    warmup_batches: list[int] = Field(default_factory=list, description=(
        "prefill batches the server ran before the run, each of this many copies of the run's "
        "first prompt (InferenceX's warm-up at N clients: [N, N]); []: only its start-up"))

    @field_validator("warmup_batches")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        for i, copies in enumerate(value):
            if copies < 1:
                raise ValueError(f"warmup_batches.{i} ({copies}) must be >= 1")
        return value


class DeploymentSpec(BaseModel):
    """One serving instance of `tp_size` GPUs (default `ep_size`): attention data-parallel in
    `dp_size` groups (or tensor-parallel over all), MoE expert-parallel over `ep_size` ranks of
    `moe_tp_size` GPUs (`epsim.spec.parallel`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ep_size: int = Field(default=8, gt=0)
    enable_dp_attention: bool = True

    # parallelism beyond EP, SGLang's names (epsim.spec.parallel); unset: what epsim meant
    # before (tp_size = ep_size GPUs, one DP group per GPU with DP attention, else one)
    tp_size: int | None = Field(default=None, gt=0, description=(
        "GPUs of the instance (SGLang's --tp-size); None: ep_size x moe_tp_size"))
    dp_size: int | None = Field(default=None, gt=0, description=(
        "attention DP groups with enable_dp_attention (each runs attention TP over "
        "tp_size / dp_size GPUs); None: tp_size with DP attention, 1 without"))
    moe_tp_size: int | None = Field(default=None, gt=0, description=(
        "GPUs each expert's intermediate is split over: tp_size / ep_size (SGLang derives it); "
        "None: derived"))
    # number formats (epsim.spec.quant)
    quantization: Quantization | None = Field(default=None, description=(
        "SGLang's --quantization (fp8, w8a8_fp8, modelopt_fp8, modelopt_fp4) or a format "
        "(bf16, fp8_block, nvfp4, w4a16); None: the checkpoint's own (the model's weight_dtype)"))
    kv_cache_dtype: KVCacheDtype = Field(default="auto", description=(
        "SGLang's --kv-cache-dtype: auto (the model's BF16), bf16, fp8_e4m3, fp8_e5m2"))
    moe_a2a_backend: A2ABackend = "deepep"
    deepep_mode: DeepEPMode = "auto"
    dispatch_dtype: Literal[vocab.DISPATCH_DTYPES] = "fp8"
    disaggregation_mode: Literal["null", "prefill", "decode"] = "null"
    load_balance_method: Literal["auto", "round_robin", "follow_bootstrap_room"] = Field(
        default="auto", description=(
            "SGLang's --load-balance-method, which DP rank a request meets: auto as 0.5.8 runs it "
            "(a P/D prefill by the request's bootstrap room, any other server round-robin; a "
            "prefill's round_robin is its bootstrap room too, `server_args.py` 772-800); "
            "follow_bootstrap_room on a P/D decode as 0.4.8-0.5.6 route it "
            "(`round_robin_scheduler`: `bootstrap_room % dp_size` whenever disaggregated; "
            "`epsim.sim.rank_queues`)"))
    enable_two_batch_overlap: bool = False
    disable_cuda_graph: bool = Field(
        default=False, description="SGLang's flag: decode steps run eagerly, paying host launch time")
    disable_overlap_schedule: bool = Field(
        default=False, description="SGLang's flag: the scheduler's host work between forward "
        "passes runs in turn with the GPU, not under the next forward (`epsim.cost."
        "scheduler_host`; speculative decoding runs so too)")
    mlp_sync_group: Literal["auto", "cpu"] = Field(default="auto", description=(
        "the process group of DP attention's per-step batch-info all-gather (`prepare_mlp_sync_"
        "batch`): auto as SGLang runs it since PR #8001 (2025-07-14; NCCL's device group in the "
        "normal loop); cpu: the gloo CPU group always, as SGLang 0.4.9.post2 and earlier, whose "
        "speculative cycle also all-reduced its draft-extend check on gloo "
        "(`epsim.cost.scheduler_host`)"))
    cuda_graph_max_bs: int = Field(
        default=256, gt=0, description="largest decode batch per rank replayed as a CUDA graph")
    disable_shared_experts_fusion: bool = Field(
        default=False, description="SGLang's flag: DeepSeek-V3/R1's shared expert runs as its "
        "own MLP where SGLang would otherwise fuse it into the routed experts' kernel "
        "(`epsim.cost.shared_experts`)")
    enable_flashinfer_allreduce_fusion: bool = Field(default=False, description=(
        "SGLang's flag: each TP all-reduce takes the residual add and RMSNorm after it into one "
        "kernel (flashinfer's trtllm_allreduce_fusion) at batches of <= 2048 tokens, so the two "
        "add-norm launches of a layer go; SGLang 0.5.7+ turns it on for DeepSeek-V3/R1 and "
        "Qwen3-MoE on Hopper and Blackwell, one node, no DP attention, moe_a2a_backend none "
        "(`epsim.cost.attention_ops`)"))
    fp8_gemm_backend: Literal["deep_gemm", "flashinfer_trtllm"] | None = Field(
        default=None, description=(
            "SGLang's --fp8-gemm-backend for block-FP8 dense linears (attention projections, "
            "shared experts, dense MLP): flashinfer_trtllm runs FlashInfer's trtllm-gen "
            "low-latency GEMM at a token tile fixed by N / K (`epsim.cost.trtllm_fp8_gemm`; "
            "its tile model fitted on published B200 timings of the kernel); None or deep_gemm: "
            "the profile's block-FP8 GEMM fit (DeepGEMM's)"))
    mla_kv_splits: Literal["split", "one"] = Field(default="split", description=(
        "how the MLA decode kernel spreads a sequence's keys: split (the profile's kernel: "
        "TRT-LLM's / FlashAttention's split-KV, the keys split to fill the SMs) or one "
        "(SGLang's cutlass_mla backend, which calls CUTLASS's SM100 MLA kernel with "
        "num_kv_splits=1: a sequence's heads are one CTA pair walking all its keys, however "
        "few the sequences; an MLA model on an SM100 GPU only; `epsim.cost.mla_decode`)"))
    moe_served_tiles: bool = Field(default=False, description=(
        "the fused Triton MoE runs SGLang's own tuned H200 tiles for DeepSeek-V3/R1 block-FP8 at "
        "MoE-TP 8 with the shared expert fused (E 257 tables, SGLang 0.5.9+), not the collector's "
        "E 256 ones its fit was timed at: the experts' device time times a ratio measured on H100 "
        "(`epsim.cost.served_tiles`)"))
    moe_fp4_allgather: bool = Field(default=False, description=(
        "SGLang's FP4 all-gather (`should_use_flashinfer_cutlass_moe_fp4_allgather`: "
        "--moe-runner-backend flashinfer_cutlass, modelopt_fp4, DP attention, moe_a2a_backend "
        "none, MoE EP = DP size): the DP ranks' tokens are quantised to NVFP4 before the MoE's "
        "all-gather (`all_gatherv` of values, scales, top-k weights and ids) and the experts' "
        "BF16 outputs go back by one reduce-scatter (`reduce_scatterv`), not an all-reduce "
        "(`epsim.cost.tp`)"))
    nvfp4_fp8_q_b: bool = Field(default=False, description=(
        "SGLang's SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN=1: an NVFP4 checkpoint's BF16 q_b_proj "
        "(`NVFP4_CKPT_FP8_ATTN_QUANT_MODULES`, q_b_proj alone) quantised to 128 x 128 block-FP8 "
        "at load and run on the block-FP8 GEMM; the other projections stay BF16 "
        "(`epsim.cost.mla`)"))
    block_kernels: Literal["sglang", "transformers"] = Field(default="sglang", description=(
        "whose kernels run the attention and MoE blocks' own ops (norms, RoPE, KV write, router, "
        "permute, weighting): SGLang's fused ones, or HF transformers' unfused eager block (what "
        "epsim's live bench measures on one GPU)"))

    # batching (per DP rank)
    max_running_requests: int = Field(default=256, gt=0, description="per DP rank")
    chunked_prefill_size: int = Field(default=8192, gt=0, description="prefill tokens per step per DP rank")
    max_prefill_tokens: int | None = Field(default=None, gt=0, description=(
        "SGLang's --max-prefill-tokens: a prefill batch's input budget; a request after the "
        "first joins only while its prompt is below what is left of it "
        "(`epsim.sim.chunked_prefill.chunk`); None: not applied (SGLang's default, 16384, "
        "is not laid over scenarios that do not state it)"))
    scheduler_recv_interval: int | None = Field(default=None, ge=1, le=1 << 20, description=(
        "SGLang's --scheduler-recv-interval: new requests are received once per this many "
        "decode steps (a prefill step's next step receives; `epsim.sim.recv`); None: SGLang's "
        "default 1, every step"))
    enable_mixed_chunk: bool = Field(
        default=False, description="decode tokens ride along in prefill (extend) batches")
    schedule_policy: Literal["fcfs"] = "fcfs"
    first_use_compile: FirstUseCompileSpec | None = Field(default=None, description=(
        "kernels compiled on a prefill step's first use of a shape key (or of the chunked-prefix "
        "attention) inside the run; None: every kernel compiled before it"))
    eager_prefill_host: bool = Field(default=True, description=(
        "an eager prefill forward of an MLA model lasts at least its host time: SGLang's "
        "kernel launches counted from its source at one eager launch's measured host time "
        "(`epsim.cost.forward_host`); it outlasts a lone 1k prompt's device time by 0-20 ms, "
        "nothing at 8k; off: the device time alone"))
    sustained_clock: bool = Field(default=True, description=(
        "a prefill (extend) forward's device compute at the clock a busy GPU's power limit "
        "holds, by the forward's tokens (`epsim.cost.sustained`: measured on an H100, 1.13x at "
        "8k tokens a GPU); off: the op tables' burst clock"))
    server_tokenize: Literal["off", "serial", "parallel"] = Field(default="off", description=(
        "the server tokenises each prompt, sent as text, before its scheduler sees it, at the "
        "measured cost of DeepSeek-V3's tokenizer on random prompts (`epsim.cost.tokenize`: "
        "~1.7 ms at 1k tokens, ~18 ms at 8k); serial: one prompt at a time, first come first "
        "served (SGLang's tokenizer manager); parallel: each prompt on its own thread (Dynamo's "
        "Rust frontend); TTFT counts from the send; off: prompts arrive as token ids"))

    # EPLB
    enable_eplb: bool = False
    ep_num_redundant_experts: int = Field(default=0, ge=0)
    eplb_rebalance_num_iterations: int = Field(default=1000, gt=0)
    expert_distribution_recorder_buffer_size: int = Field(
        default=1000, gt=0, description="statistics window, forward passes")
    eplb_rebalance_layers_per_chunk: int | None = Field(default=None, gt=0)
    eplb_algorithm: EPLBAlgorithm = "deepseek"
    eplb_stop_the_world: bool = Field(
        default=True, description="False: move one layer chunk per later step instead of stalling")
    ep_dispatch_algorithm: ReplicaSelection = "static"
    init_expert_location: str = Field(
        default="trivial", min_length=1,
        description="placement before the first step (SGLang's --init-expert-location): trivial "
                    "(experts in order), from_skew (EPLB placement of the workload's own skew "
                    "model), or a file of recorded expert loads (our JSONL trace, an SGLang "
                    "expert-distribution dump, .json/.csv/.npy [layers, experts])")

    # instances behind the router: xPyD's x (prefill) or y (decode), or colocated replicas
    num_instances: int = Field(
        default=1, ge=1, le=4096, description="instances of this deployment sharing the workload "
        "(the router sends each 1/num_instances of it, round-robin: xPyD's count on this side); "
        "one is simulated")

    # memory (SGLang's server arguments; `epsim.sim.memory`, `epsim.sim.kv_pool`)
    mem_fraction_static: float | None = Field(
        default=None, gt=0, lt=1, description="share of the GPU's memory for weights and the KV "
        "pool (SGLang's --mem-fraction-static); None: SGLang's default for the GPU")
    max_total_tokens: int | None = Field(
        default=None, gt=0, le=1 << 40, description="KV tokens one GPU's pool holds at most "
        "(SGLang's --max-total-tokens: the least of it and what memory leaves, per GPU, not "
        "divided by the DP size; `epsim.sim.memory`, `epsim.sim.prefill_pool`); None: what "
        "memory leaves")
    num_reserved_decode_tokens: int = Field(
        default=512, ge=0, le=1 << 20, description="KV tokens a decode rank keeps free per running "
        "request when it admits another (SGLANG_NUM_RESERVED_DECODE_TOKENS)")

    # speculative decoding (SGLang's --speculative-*; `epsim.sim.speculative`)
    speculative_algorithm: Literal["EAGLE", "NEXTN"] | None = Field(
        default=None, description="NEXTN (DeepSeek's MTP module as the draft) or EAGLE; None: off")
    speculative_num_steps: int | None = Field(
        default=None, ge=1, le=16, description="draft steps per verify (None: 3, SGLang's choice "
                                                "for DeepSeek)")
    speculative_eagle_topk: int | None = Field(default=None, ge=1, le=16,
                                               description="draft branches per step (None: 1)")
    speculative_num_draft_tokens: int | None = Field(
        default=None, ge=1, le=256, description="tokens per request the verify step runs (None: "
                                                "num_steps + 1)")
    speculative_accept_length: float | None = Field(
        default=None, ge=1, description="mean tokens per request per verify step, the bonus token "
        "included (SGLang's avg_spec_accept_length); None: each draft token accepted with the "
        "DeepSeek-V3 report's 0.85")

    # elastic EP
    failures: list[FailureSpec] = Field(default_factory=list)
    elastic_recovery: Literal["replicas", "reload"] = "replicas"
    reload_gbps: float = Field(default=25.0, gt=0, description="expert reload from host/storage, GB/s")
    moe_dispatch_timeout_s: float = Field(
        default=10.0, gt=0, description="how long survivors wait in the EP dispatch for a failed "
                                        "rank before masking it, once per failure (Mooncake EP's "
                                        "IBGDA kernels: timeout_us as SGLang sets it, 10 s; its "
                                        "non-IBGDA fallback reads the process group's ping: 1e-4)")
    failures_per_gpu_hour: float = Field(
        default=0.0, ge=0, description="GPU failure rate for the planner's resilience columns "
                                       "(failures per GPU-hour; 1e-4 is one per 10,000 GPU-hours)")
    failure_repair_s: float = Field(
        default=600.0, gt=0, description="planner: time until a failed rank is back (elastic EP: "
                                         "rejoins; without it: the instance restarts)")

    @field_validator("disaggregation_mode", mode="before")
    @classmethod
    def _null_mode(cls, value):
        """YAML's unquoted `null` (None) is SGLang's mode "null": no disaggregation."""
        return "null" if value is None else value

    @model_validator(mode="after")
    def _consistent(self) -> "DeploymentSpec":
        _ = self.parallel                             # raises on a bad combination of sizes
        for i, failure in enumerate(self.failures):
            if failure.rank >= self.ep_size:
                raise ValueError(f"failures.{i}.rank ({failure.rank}) must be < ep_size ({self.ep_size})")
        self._check_speculative()
        if self.dispatch_dtype == "nvfp4" and (self.moe_a2a_backend, self.deepep_mode) != (
                "deepep", "low_latency"):
            raise ValueError(f"dispatch_dtype (nvfp4) needs moe_a2a_backend deepep with deepep_mode "
                             f"low_latency (only DeepEP's low-latency dispatch packs NVFP4), not "
                             f"{self.moe_a2a_backend} / {self.deepep_mode}")
        if self.moe_fp4_allgather:
            par = self.parallel
            if self.moe_a2a_backend != "none" or par.dp_size < 2 or par.ep_size != par.dp_size:
                raise ValueError(f"moe_fp4_allgather needs moe_a2a_backend none and DP attention "
                                 f"with ep_size = dp_size, not {self.moe_a2a_backend}, dp_size "
                                 f"{par.dp_size}, ep_size {par.ep_size}")
        # equal slots per rank needs (experts + redundant) % ep_size == 0, which needs the
        # model: checked by Scenario (DeepSeek's decode layout has 32 redundant over EP 144)
        return self

    @property
    def parallel(self) -> Parallel:
        """The resolved layout (`epsim.spec.parallel.resolve_parallel`).

        Raises:
            ValueError: a bad combination of sizes, naming the fields.
        """
        return resolve_parallel(self.ep_size, self.tp_size, self.dp_size, self.moe_tp_size,
                                self.enable_dp_attention, self.moe_a2a_backend)

    @property
    def num_gpus(self) -> int:
        """GPUs of the instance (`tp_size` resolved)."""
        return self.parallel.tp_size

    def _check_speculative(self) -> None:
        """The speculative fields go together, as SGLang's server arguments check them."""
        fields = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                  "speculative_accept_length")
        if self.speculative_algorithm is None:
            for name in fields:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} ({getattr(self, name)}) needs speculative_algorithm "
                                     f"(NEXTN or EAGLE)")
            return
        steps, topk, tokens = self.speculative_steps
        if topk == 1 and tokens != steps + 1:
            raise ValueError(f"speculative_num_draft_tokens ({tokens}) must be speculative_num_steps "
                             f"+ 1 ({steps + 1}) with speculative_eagle_topk 1 (a chain of drafts)")
        if tokens > topk * steps + 1:
            raise ValueError(f"speculative_num_draft_tokens ({tokens}) must be <= eagle_topk x "
                             f"num_steps + 1 ({topk * steps + 1}): the draft tree holds no more")
        accept = self.speculative_accept_length
        if accept is not None and accept > steps + 1:
            raise ValueError(f"speculative_accept_length ({accept}) must be <= speculative_num_steps "
                             f"+ 1 ({steps + 1}): a verify step accepts at most every draft step "
                             f"and the bonus token")

    @property
    def speculative_steps(self) -> tuple[int, int, int]:
        """(num_steps, eagle_topk, num_draft_tokens) with SGLang's defaults for DeepSeek filled in
        (3, 1, num_steps + 1); meaningful only with `speculative_algorithm`."""
        steps = self.speculative_num_steps or 3
        topk = self.speculative_eagle_topk or 1
        return steps, topk, self.speculative_num_draft_tokens or steps + 1

    def deepep_mode_for(self, phase: Literal["prefill", "decode"]) -> Literal["normal", "low_latency"]:
        """SGLang's rule: `auto` is normal kernels for prefill, low-latency for decode."""
        if self.deepep_mode == "auto":
            return "normal" if phase == "prefill" else "low_latency"
        return self.deepep_mode
