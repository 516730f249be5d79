"""A chosen deployment as SGLang launch arguments (`epsim plan --emit sglang`).

`SGLANG_ARGS` is the one table: every `DeploymentSpec` field has an entry saying how it reaches
SGLang's server (`python -m sglang.launch_server`): a server argument (`--ep-size`), an
environment variable, a value SGLang refuses or lacks (the entry raises `EmitError` naming the
field, so nothing is guessed), or "simulation only" (what epsim simulates but a server is not
told, such as rank failures). A field with no entry is refused the same way: a new field must
add its row here before `--emit sglang` will run (`tests/epsim/plan/test_emit_sglang.py`
checks the table covers the spec).

Units differ where SGLang counts per server and epsim per DP rank: with DP attention SGLang
divides `--max-running-requests` and `--chunked-prefill-size` by `--dp-size`
(`server_args.py`, the scheduler), so they are emitted multiplied by the DP size. The layout
(`epsim.spec.parallel`) is emitted resolved: `--tp-size`, `--ep-size` and, with DP attention,
`--dp-size`; SGLang derives MoE-TP (tp_size / ep_size) itself. Weight formats reach
`--quantization` only where SGLang quantises at load or reads the checkpoint so (`fp8`,
`w8a8_fp8`, `modelopt_fp8`, `modelopt_fp4`); a checkpoint's own format needs no argument, and
another format needs another checkpoint (refused). Sources:
sglang `srt/server_args.py`, `srt/eplb/expert_location.py` (what `--init-expert-location`
reads), `srt/eplb/expert_location_dispatch.py` (`--ep-dispatch-algorithm`: static, dynamic),
`srt/layers/moe/token_dispatcher/mooncake.py` (Mooncake EP dispatches FP8 always) and
`SGLANG_DEEPEP_BF16_DISPATCH` (DeepEP's BF16 dispatch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from epsim.errors import SpecError

LAUNCH = ["python", "-m", "sglang.launch_server"]
ROUTER = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]


class EmitError(SpecError):
    """A deployment value SGLang has no setting for (the message names the field and why)."""


@dataclass
class Launch:
    """One instance's launch: `args` after `LAUNCH`, `env` to set, `notes` for the reader."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def command(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(LAUNCH + self.args)


Rule = Callable[[object, object, Launch], None]     # (value, scenario, launch): add to launch


def _refuse(name: str, value, why: str):
    raise EmitError(f"--emit sglang: deployment.{name} ({value!r}) has no SGLang setting: {why}")


def _flag(option: str) -> Rule:
    """A boolean server flag, given when true."""
    def rule(value, scenario, launch):
        if value:
            launch.args.append(option)
    return rule


def _value(option: str, per_server: bool = False) -> Rule:
    """A valued argument; `per_server`: epsim's per-DP-rank count times the DP ranks."""
    def rule(value, scenario, launch):
        if value is None:
            return
        d = scenario.deployment
        if per_server and d.enable_dp_attention:
            value = value * d.parallel.dp_size
        launch.args += [option, str(value)]
    return rule


def _choice(name: str, option: str, values: dict, why: str) -> Rule:
    """A value translated to SGLang's name for it; one it lacks is refused with `why`."""
    def rule(value, scenario, launch):
        if value not in values:
            _refuse(name, value, why)
        launch.args += [option, values[value]]
    return rule


def _simulation_only(why: str) -> Rule:
    """Not a server setting; said in a note when the scenario has rank failures to simulate."""
    def rule(value, scenario, launch):
        if scenario.deployment.failures:
            launch.notes.append(why)
    return rule


def _tp_size(value, scenario, launch):
    # one instance: its GPUs are SGLang's tensor-parallel world (resolved: unset is ep_size x
    # moe_tp_size), one command per node
    gpus = scenario.deployment.parallel.tp_size
    nodes = math.ceil(gpus / scenario.cluster.gpus_per_node_resolved)
    launch.args += ["--tp-size", str(gpus)]
    if nodes > 1:
        launch.args += ["--nnodes", str(nodes), "--node-rank", f"<0..{nodes - 1}>",
                        "--dist-init-addr", "<HOST:PORT>"]
        launch.notes.append(f"one command per node ({nodes} nodes): --node-rank 0 to {nodes - 1}, "
                            f"the same --dist-init-addr on each")


def _dp_attention(value, scenario, launch):
    if value:
        launch.args += ["--enable-dp-attention", "--dp-size", str(scenario.deployment.parallel.dp_size)]


def _resolved_elsewhere(value, scenario, launch):
    """A value another row emits resolved (`--dp-size` with enable_dp_attention, the draft
    chain with speculative_algorithm) or SGLang derives (moe_tp_size = tp_size / ep_size):
    nothing of its own to emit."""


# SGLang's --quantization values epsim takes, as they are; epsim's format names that SGLang
# reaches only by a checkpoint in that format (no argument then)
_QUANTIZATION = {"fp8": "fp8", "w8a8_fp8": "w8a8_fp8", "modelopt_fp8": "modelopt_fp8",
                 "modelopt_fp4": "modelopt_fp4"}


def _quantization(value, scenario, launch):
    checkpoint = scenario.model.weight_dtype
    if value is None or value == checkpoint:
        return                 # SGLang reads the checkpoint's own quantization_config
    if value == "nvfp4":
        value = "modelopt_fp4"
    if value not in _QUANTIZATION:
        _refuse("quantization", value, f"SGLang serves a checkpoint in its own format "
                f"({scenario.model.name}'s is {checkpoint}) or quantises at load to FP8 "
                f"(--quantization fp8, w8a8_fp8); {value} weights need a {value} checkpoint: set "
                f"model to one, or quantization to one of {sorted(_QUANTIZATION)}")
    launch.args += ["--quantization", _QUANTIZATION[value]]
    if value.startswith("modelopt") and not (value == "modelopt_fp4" and checkpoint == "nvfp4"):
        launch.notes.append(f"--quantization {value} loads a checkpoint NVIDIA's ModelOpt quantised "
                            f"({value.split('_')[1].upper()}) of {scenario.model.name}: --model-path "
                            f"must be one")


def _kv_cache_dtype(value, scenario, launch):
    if value != "auto":        # SGLang's names: bf16, fp8_e4m3, fp8_e5m2 (and auto)
        launch.args += ["--kv-cache-dtype", value]


def _deepep_mode(value, scenario, launch):
    if scenario.deployment.moe_a2a_backend in ("deepep", "mooncake"):
        launch.args += ["--deepep-mode", value]


def _dispatch_dtype(value, scenario, launch):
    backend = scenario.deployment.moe_a2a_backend
    if backend == "deepep" and value == "bf16":
        launch.env["SGLANG_DEEPEP_BF16_DISPATCH"] = "1"        # FP8 is DeepEP's default in SGLang
    elif value == "nvfp4":      # the spec allows it on DeepEP low-latency only (`DeploymentSpec`)
        launch.env["SGLANG_MOE_NVFP4_DISPATCH"] = "1"
    elif backend == "mooncake" and value == "bf16":
        _refuse("dispatch_dtype", value, "SGLang's Mooncake EP dispatches FP8 always "
                "(use_fp8=True in token_dispatcher/mooncake.py); set deployment.dispatch_dtype: fp8 "
                "to plan what it runs")


def _dispatch_timeout(value, scenario, launch):
    # SGLang's Mooncake EP waits a fixed 10 s (timeout_us = 10_000_000 in its dispatcher)
    if value != 10.0 and scenario.deployment.moe_a2a_backend == "mooncake":
        _refuse("moe_dispatch_timeout_s", value, "SGLang's Mooncake EP dispatch timeout is fixed at "
                "10 s (timeout_us in token_dispatcher/mooncake.py)")


def _block_kernels(value, scenario, launch):
    if value != "sglang":
        _refuse("block_kernels", value, "an SGLang server runs its own fused blocks")


def _planning_input(value, scenario, launch):
    """A number the planner prices with, not a server setting (nothing to emit)."""


def _fp4_allgather(value, scenario, launch):
    """SGLang quantises the MoE's all-gather to NVFP4 by itself under the FlashInfer CUTLASS MoE
    runner (with modelopt_fp4, DP attention, EP = DP): the runner is what to ask for."""
    if value:
        launch.args += ["--moe-runner-backend", "flashinfer_cutlass"]


def _mla_kv_splits(value, scenario, launch):
    """One split (never spread a sequence's keys) is SGLang's cutlass_mla backend's MLA decode;
    the default split kernel is the backend SGLang picks itself (nothing to emit)."""
    if value == "one":
        launch.args += ["--attention-backend", "cutlass_mla"]


def _environment_only(value, scenario, launch):
    """An environment variable of the server (SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN), not a
    launch argument (nothing to emit)."""


def _release_code_path(value, scenario, launch):
    """Which code an SGLang release runs (`mlp_sync_group: cpu` is 0.4.9.post2 and earlier),
    not a server argument (nothing to emit)."""


def _load_balance_method(value, scenario, launch):
    """`--load-balance-method` where not SGLang's auto (0.5.8: a prefill's bootstrap room, any
    other server round-robin; `follow_bootstrap_room` is what a 0.5.6 decode did by itself)."""
    if value != "auto":
        launch.args += ["--load-balance-method", value]


def _disaggregation(value, scenario, launch):
    if value != "null":
        launch.args += ["--disaggregation-mode", value]


def _eplb_only(rule: Rule) -> Rule:
    """An EPLB setting: given only with EPLB on (or redundant slots to dispatch over)."""
    def wrapped(value, scenario, launch):
        d = scenario.deployment
        if d.enable_eplb or d.ep_num_redundant_experts:
            rule(value, scenario, launch)
    return wrapped


def _init_expert_location(value, scenario, launch):
    if value == "trivial":
        launch.args += ["--init-expert-location", "trivial"]
        return
    if value == "from_skew":
        _refuse("init_expert_location", value, "from_skew is epsim's placement for the scenario's "
                "skew model; write a placement from recorded loads with `epsim eplb LOADS --out DIR` "
                "and pass DIR/expert_location.json")
    path = Path(scenario.resolve_path(value))
    if path.suffix not in (".json", ".pt"):
        _refuse("init_expert_location", value, "SGLang reads a .json or .pt holding "
                "physical_to_logical_map or logical_count; `epsim eplb FILE --out DIR` writes "
                "DIR/expert_location.json from this file")
    launch.args += ["--init-expert-location", str(path)]


def _stop_the_world(value, scenario, launch):
    d = scenario.deployment
    if not d.enable_eplb:
        return
    if value and d.eplb_rebalance_layers_per_chunk is not None:
        _refuse("eplb_stop_the_world", value, "SGLang moves one chunk of layers per forward pass "
                "when --eplb-rebalance-layers-per-chunk is set, never all chunks in one stall")
    if not value and d.eplb_rebalance_layers_per_chunk is None:
        _refuse("eplb_stop_the_world", value, "SGLang spreads a rebalance only by "
                "--eplb-rebalance-layers-per-chunk: set deployment.eplb_rebalance_layers_per_chunk")


def _reserved_decode_tokens(value, scenario, launch):
    if value != 512:           # SGLang's default (SGLANG_NUM_RESERVED_DECODE_TOKENS), an env var
        launch.env["SGLANG_NUM_RESERVED_DECODE_TOKENS"] = str(value)


def _speculative(value, scenario, launch):
    """The draft chain resolved (`DeploymentSpec.speculative_steps`: what epsim simulated),
    not left to SGLang's per-model defaults."""
    if value is None:
        return
    steps, topk, tokens = scenario.deployment.speculative_steps
    launch.args += ["--speculative-algorithm", value, "--speculative-num-steps", str(steps),
                    "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens",
                    str(tokens)]


def _instances(value, scenario, launch):
    if value > 1:
        launch.notes.append(f"{value} instances of this command share the workload behind "
                            f"sglang_router (round-robin), as deployment.num_instances says")


_EPLB_ALGORITHMS = {"deepseek": "auto", "deepseek_hierarchical": "deepseek_hierarchical",
                    "deepseek_global": "deepseek"}
_DISPATCH = {"static": "static", "random": "dynamic"}

# every DeploymentSpec field -> how it reaches SGLang (module doc); one row per field
SGLANG_ARGS: dict[str, Rule] = {
    "tp_size": _tp_size,
    "ep_size": _value("--ep-size"),
    "enable_dp_attention": _dp_attention,
    "dp_size": _resolved_elsewhere,          # --dp-size with enable_dp_attention's row
    "moe_tp_size": _resolved_elsewhere,      # SGLang derives tp_size / ep_size
    "quantization": _quantization,
    "kv_cache_dtype": _kv_cache_dtype,
    "moe_a2a_backend": _choice(
        "moe_a2a_backend", "--moe-a2a-backend", {"none": "none", "deepep": "deepep", "mooncake": "mooncake"},
        "torch is epsim's reference all-to-all over torch.distributed (live/); SGLang runs none, "
        "deepep or mooncake"),
    "deepep_mode": _deepep_mode,
    "dispatch_dtype": _dispatch_dtype,
    "disaggregation_mode": _disaggregation,
    "load_balance_method": _load_balance_method,
    "enable_two_batch_overlap": _flag("--enable-two-batch-overlap"),
    "disable_cuda_graph": _flag("--disable-cuda-graph"),
    "disable_overlap_schedule": _flag("--disable-overlap-schedule"),
    "mlp_sync_group": _release_code_path,
    "disable_shared_experts_fusion": _flag("--disable-shared-experts-fusion"),
    "fp8_gemm_backend": _value("--fp8-gemm-backend"),
    # SGLang 0.5.7+ also turns it on by itself for DeepSeek-V3/R1 and Qwen3-MoE on Hopper and
    # Blackwell (one node, no DP attention, moe_a2a_backend none), and has no flag to turn it off
    "enable_flashinfer_allreduce_fusion": _flag("--enable-flashinfer-allreduce-fusion"),
    "cuda_graph_max_bs": _value("--cuda-graph-max-bs"),
    "max_running_requests": _value("--max-running-requests", per_server=True),
    "chunked_prefill_size": _value("--chunked-prefill-size", per_server=True),
    # each DP rank's scheduler keeps the whole budget (SGLang divides only the chunk by DP)
    "max_prefill_tokens": _value("--max-prefill-tokens"),
    "scheduler_recv_interval": _value("--scheduler-recv-interval"),
    "enable_mixed_chunk": _flag("--enable-mixed-chunk"),
    "mem_fraction_static": _value("--mem-fraction-static"),
    "max_total_tokens": _value("--max-total-tokens"),        # a GPU's pool: SGLang divides nothing
    "num_reserved_decode_tokens": _reserved_decode_tokens,
    "speculative_algorithm": _speculative,
    "speculative_num_steps": _resolved_elsewhere,            # resolved in speculative_algorithm's
    "speculative_eagle_topk": _resolved_elsewhere,
    "speculative_num_draft_tokens": _resolved_elsewhere,
    "speculative_accept_length": _planning_input,            # SGLang measures it, never takes it
    "schedule_policy": _value("--schedule-policy"),
    # what the server compiles inside a run is a consequence of its kernels, not a setting
    "first_use_compile": _planning_input,
    # how the eager prefill's host time is priced: a modelling choice, not a server setting
    "eager_prefill_host": _planning_input,
    # the clock a busy GPU holds under its power limit: the hardware's, not a server setting
    "sustained_clock": _planning_input,
    # whether the client sends text (the server tokenises it) is the workload's, not a flag
    "server_tokenize": _planning_input,
    "enable_eplb": _flag("--enable-eplb"),
    "ep_num_redundant_experts": _value("--ep-num-redundant-experts"),
    "eplb_rebalance_num_iterations": _eplb_only(_value("--eplb-rebalance-num-iterations")),
    "expert_distribution_recorder_buffer_size": _eplb_only(
        _value("--expert-distribution-recorder-buffer-size")),
    "eplb_rebalance_layers_per_chunk": _eplb_only(_value("--eplb-rebalance-layers-per-chunk")),
    "eplb_algorithm": _eplb_only(_choice(
        "eplb_algorithm", "--eplb-algorithm", _EPLB_ALGORITHMS,
        "sticky is epsim's move-aware algorithm; SGLang runs the DeepSeek algorithms")),
    "eplb_stop_the_world": _stop_the_world,
    "ep_dispatch_algorithm": _eplb_only(_choice(
        "ep_dispatch_algorithm", "--ep-dispatch-algorithm", _DISPATCH,
        "SGLang picks a replica statically or at random per token (dynamic); round_robin is "
        "epsim's")),
    "init_expert_location": _init_expert_location,
    "failures": _simulation_only("rank failures are an experiment epsim simulates, not a setting"),
    "elastic_recovery": _simulation_only("elastic recovery is simulated; SGLang's elastic EP "
                                         "settings are not mapped"),
    "reload_gbps": _simulation_only("the expert reload bandwidth is a simulation input"),
    "moe_dispatch_timeout_s": _dispatch_timeout,
    "num_instances": _instances,
    "failures_per_gpu_hour": _planning_input,
    "failure_repair_s": _planning_input,
    "block_kernels": _block_kernels,
    "moe_served_tiles": _planning_input,      # SGLang picks its tables itself
    # SGLang takes the FP4 all-gather itself under flashinfer_cutlass (DP attention, EP = DP)
    "moe_fp4_allgather": _fp4_allgather,
    "nvfp4_fp8_q_b": _environment_only,
    "mla_kv_splits": _mla_kv_splits,
}


def check_known(scenario) -> None:
    """Refuse a deployment with a field the table lacks (before minutes of simulating)."""
    unknown = [name for name in type(scenario.deployment).model_fields if name not in SGLANG_ARGS]
    if unknown:
        raise EmitError(f"--emit sglang: deployment.{unknown[0]} has no entry in "
                        f"epsim.plan.sglang_args.SGLANG_ARGS; it must say which SGLang server "
                        f"argument it is (or that it has none) before it is emitted")


def launch(scenario) -> Launch:
    """One instance of `scenario`'s deployment as SGLang launch arguments.

    Raises:
        EmitError: a field with no entry, or a value SGLang has no setting for.
    """
    check_known(scenario)
    out = Launch(args=["--model-path", f"<weights of {scenario.model.name}>"])
    d = scenario.deployment
    for name, rule in SGLANG_ARGS.items():       # the table's order: the instance's size first
        rule(getattr(d, name), scenario, out)
    out.notes = list(dict.fromkeys(out.notes))
    return out


def router(num_prefill: int, num_decode: int) -> list[str]:
    """The router of a prefill/decode pair of pools (`sglang_router`), one URL per instance."""
    return (ROUTER + [a for i in range(num_prefill) for a in ("--prefill", f"<prefill-{i} URL>")]
            + [a for i in range(num_decode) for a in ("--decode", f"<decode-{i} URL>")])


def transfer_backend(kv_path: str) -> str:
    """`--disaggregation-transfer-backend` of epsim's KV path (`--kv-transfer`)."""
    if kv_path != "mooncake":
        raise EmitError(f"--emit sglang: --kv-transfer ({kv_path!r}) has no SGLang transfer "
                        f"backend (SGLang's: mooncake, nixl); plan with --kv-transfer mooncake")
    return "mooncake"
