"""How the model is laid out and served: EP size, all-to-all backend, EPLB, batching.

Option names follow SGLang's server arguments where one exists.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from epsim import vocab

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


class DeploymentSpec(BaseModel):
    """One serving instance: attention data-parallel, MoE expert-parallel over `ep_size` ranks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ep_size: int = Field(default=8, gt=0)
    enable_dp_attention: bool = True
    moe_a2a_backend: A2ABackend = "deepep"
    deepep_mode: DeepEPMode = "auto"
    dispatch_dtype: Literal[vocab.DISPATCH_DTYPES] = "fp8"
    disaggregation_mode: Literal["null", "prefill", "decode"] = "null"
    enable_two_batch_overlap: bool = False
    disable_cuda_graph: bool = Field(
        default=False, description="SGLang's flag: decode steps run eagerly, paying host launch time")
    cuda_graph_max_bs: int = Field(
        default=256, gt=0, description="largest decode batch per rank replayed as a CUDA graph")

    # batching (per DP rank)
    max_running_requests: int = Field(default=256, gt=0, description="per DP rank")
    chunked_prefill_size: int = Field(default=8192, gt=0, description="prefill tokens per step per DP rank")
    enable_mixed_chunk: bool = Field(
        default=False, description="decode tokens ride along in prefill (extend) batches")
    schedule_policy: Literal["fcfs"] = "fcfs"

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

    # elastic EP
    failures: list[FailureSpec] = Field(default_factory=list)
    elastic_recovery: Literal["replicas", "reload"] = "replicas"
    reload_gbps: float = Field(default=25.0, gt=0, description="expert reload from host/storage, GB/s")

    @field_validator("disaggregation_mode", mode="before")
    @classmethod
    def _null_mode(cls, value):
        """YAML's unquoted `null` (None) is SGLang's mode "null": no disaggregation."""
        return "null" if value is None else value

    @model_validator(mode="after")
    def _consistent(self) -> "DeploymentSpec":
        for i, failure in enumerate(self.failures):
            if failure.rank >= self.ep_size:
                raise ValueError(f"failures.{i}.rank ({failure.rank}) must be < ep_size ({self.ep_size})")
        # equal slots per rank needs (experts + redundant) % ep_size == 0, which needs the
        # model: checked by Scenario (DeepSeek's decode layout has 32 redundant over EP 144)
        return self

    def deepep_mode_for(self, phase: Literal["prefill", "decode"]) -> Literal["normal", "low_latency"]:
        """SGLang's rule: `auto` is normal kernels for prefill, low-latency for decode."""
        if self.deepep_mode == "auto":
            return "normal" if phase == "prefill" else "low_latency"
        return self.deepep_mode
