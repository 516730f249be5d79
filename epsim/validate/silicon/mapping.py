"""A silicon row as epsim scenarios, in SGLang's option names, or the precise reason it cannot be.

Each row becomes one instance (agg) or a prefill and a decode instance (disagg). Every fact the
row states is a *need* (`epsim.validate.silicon.needs`): a need the spec refuses is *missing*,
and the row is listed with that reason, never run without it. As fields land in the spec the rows
become expressible with no change here.

`approximate=True` (opt-in) replaces each missing need that has a nearest expressible form by that
form and tags the row "approximated: <what>"; such rows are reported apart, never in the headline.
It also plans a row whose deployment several InferenceX groups fit (`resolve.SEVERAL_GROUPS`) as
each of them (`RowPlan.candidates`), which `epsim.validate.silicon.candidates` predicts as their
geometric mean with their spread.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace

from epsim.cost import served_tiles, trtllm_fp8_gemm
from epsim.default_profile import part_for
from epsim.errors import EpsimError
from epsim.routing import recorded
from epsim.sim.accept_sources import SOURCES
from epsim.validate.silicon import (agg_recipes, allreduce_fusion, client_tokenizer, first_use,
                                   handoff, pd_recipes)
from epsim.validate.silicon.needs import (GPUS, KV_CACHE_DTYPE, MODELS, Missing, Need,
                                          approximate_need, closed_loop_needs, set_path,
                                          short_answer, side_needs, spec_error)
from epsim.validate.silicon.resolve import WIDE_EP_REDUNDANT, Resolved, resolve
from epsim.validate.silicon.rows import Side, SiliconRow
from epsim.zoo import get_hardware, get_model, hardware_names

SEED = 0
# sources of InferenceX runs: its database dump and its dated result exports
INFERENCEX_SOURCE = re.compile(r"(db-dump|source_file=\d{4}-\d{2}-\d{2}\.csv)")


@dataclass(frozen=True)
class Instance:
    """One kind of instance of a row, ready to run.

    Attributes:
        role: "agg" | "prefill" | "decode".
        data: the scenario mapping (its arrivals are set per pass by `epsim.validate.silicon.run`).
        clients: closed-loop clients one instance serves (the row's clients / workers, rounded
            up: the busiest instance).
        num_workers: instances of this kind.
        routed_clients: the clients its scenario's arrivals carry: all of this side's where the
            spec shares them over `deployment.num_instances` (its router), else `clients`.
        dp_ranks: attention-DP ranks of one instance (requests spread over them).
        closed_loop: the spec expresses closed-loop clients (else Poisson at their rate,
            only under `approximate`).
        harness: an InferenceX harness drove it (`inferencex_harness`): one benchmark run.
        requests_per_client: that run's `--num-prompts` / N where the row's runner states it
            (`agg_recipes.cold_requests_per_client`); 0: `run.RUN_REQUESTS_PER_CLIENT`.
        profile_part: the version part laid over its GPU's default profile for the row's SGLang
            version (`epsim.default_profile.part_for`; "" for the default alone).
    """

    role: str
    data: dict
    clients: int
    num_workers: int
    dp_ranks: int
    closed_loop: bool
    routed_clients: int = 0
    harness: bool = False
    profile_part: str = ""
    requests_per_client: int = 0


@dataclass(frozen=True)
class RowPlan:
    """What a row becomes: its instances, or what is missing; approximations and assumptions."""

    row: SiliconRow
    instances: tuple[Instance, ...]
    missing: tuple[Missing, ...] = ()
    error: str | None = None
    approximations: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = field(default=())
    error_class: str | None = None          # the class of `error` the tables count, if any
    # a row several deployments fit, under `approximate`: one plan per deployment (no instances)
    candidates: tuple[RowPlan, ...] = ()

    @property
    def expressible(self) -> bool:
        return not self.missing and self.error is None

    @property
    def reasons(self) -> list[str]:
        """Why the row cannot run: each missing need, else the spec's answer to the whole."""
        return [m.reason for m in self.missing] or ([self.error] if self.error else [])

def _zoo_gpu(gpu: str) -> str | None:
    return gpu if gpu in hardware_names() else None


def _dp_ranks(data: dict) -> int:
    """Attention-DP ranks of an instance as its scenario says (requests spread over them)."""
    d = data["deployment"]
    if not d.get("enable_dp_attention"):
        return 1
    return d.get("dp_size") or d.get("tp_size") or d["ep_size"]

def _base(row: SiliconRow, side: Side, role: str) -> dict:
    """The scenario every instance of `side` starts from: the row's model, GPUs, lengths,
    EP layout as the spec has it (instance = ep_size GPUs), Poisson arrivals as a placeholder.
    DeepSeek's routing replays recorded expert loads (`_recorded_skew`); `_instance` adds a
    wide-EP launch script's redundant experts (`--ep-num-redundant-experts` with a static
    placement from recorded loads, `epsim.validate.silicon.resolve`) as epsim's EPLB placement
    of those same loads (`init_expert_location: from_skew`).
    A GPU the zoo lacks stands in as H200 here, so that each other need is judged on its own
    (the `cluster.gpu` need then refuses the row's GPU)."""
    gpu = _zoo_gpu(GPUS.get(row.system, row.system)) or "H200"
    per_node = get_hardware(gpu).gpus_per_node
    # DP attention: one GPU per attention rank, or DP groups of attention TP (tp x dp GPUs)
    dp_attention = side.tp_size == 1 or side.attention_dp_size > 1
    data = {
        "name": row.id, "seed": SEED, "model": MODELS[row.model_path],
        "cluster": {"gpu": gpu, "num_nodes": -(-side.num_gpus // per_node)},
        "deployment": {
            "ep_size": side.moe_ep_size, "enable_dp_attention": dp_attention,
            # wide EP (DP attention, EP > 1) dispatches with DeepEP; otherwise SGLang's default
            # (tokens already on every rank: local experts, then a reduce)
            "moe_a2a_backend": ("deepep" if dp_attention and side.moe_ep_size > 1
                                and side.moe_tp_size == 1 else "none"),
            "disaggregation_mode": "null" if role == "agg" else role},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                     "input_len": {"kind": "fixed", "value": row.isl},
                     "output_len": {"kind": "fixed", "value": row.osl},
                     "duration_s": 10.0, "warmup_s": 0.0}}
    skew = _recorded_skew(row, role)[0]
    if skew:
        data["workload"]["skew"] = skew
    return data


def _recorded_skew(row: SiliconRow, role: str) -> tuple[dict | None, str]:
    """The routing skew of `role`'s instances and the assumption that says so: a model with
    recorded loads (`epsim.routing.recorded`: DeepSeek-V3, R1 alike) replays the recording of
    its phase at the nearest lengths (an agg server's batches: decode's); others stay uniform
    (SkewSpec's default), unsaid."""
    if MODELS[row.model_path] != recorded.MODEL:
        return None, ""
    found = recorded.nearest("prefill" if role == "prefill" else "decode", row.isl, row.osl)
    text = (f"{role}: routing replays SGLang's recorded DeepSeek-V3 expert loads {found.name} "
            f"(nearest recorded lengths to ISL {row.isl} / OSL {row.osl}; "
            f"epsim/data/routing/PROVENANCE.md)")
    return {"kind": "trace", "path": str(found.path)}, text


def _instance(row: SiliconRow, side: Side, role: str, clients: int, workers: int,
              approximate: bool, redundant_experts: int = 0, mtp: bool = False,
              server: dict | None = None) -> tuple[Instance, list[Missing], list[str]]:
    """One instance of `side`; `server`: the launch script's `DeploymentSpec` fields
    (`epsim.validate.silicon.agg_recipes`), else a rank holds every client it is sent."""
    data = _base(row, side, role)
    missing, tags = [], []
    closed = True
    if redundant_experts:
        data["deployment"].update(ep_num_redundant_experts=redundant_experts,
                                  init_expert_location="from_skew")
    # xPyD: the spec's num_instances shares the side's clients round-robin and simulates the
    # busiest instance; without the field, that instance is simulated with its share directly
    routed = clients
    trial = copy.deepcopy(data)
    trial["deployment"]["num_instances"] = workers
    if workers > 1 and spec_error(trial) is None:
        data, routed = trial, row.concurrency
    needs = side_needs(row, side) + closed_loop_needs(routed, row.mode == "disagg")
    if mtp and role != "prefill":       # the draft runs where tokens are decoded
        needs.append(Need("deployment.speculative_algorithm", "NEXTN", "MTP (DeepSeek's NEXTN draft)"))
        if inferencex_harness(row):     # its prompts set the acceptance (`MTP_PROMPTS`)
            needs.append(Need("workload.prompt_kind", "random_chat", "MTP prompts"))
    for need in needs:
        trial = copy.deepcopy(data)
        set_path(trial, need.path, need.value)
        refused = spec_error(trial)
        if refused is None:
            data = trial
            continue
        if need.neutral:
            continue
        if need.path.startswith("workload.arrivals"):
            closed = False
        tag = approximate_need(need, data, side) if approximate else None
        if tag is None:
            missing.append(Missing(need, short_answer(refused)))
        elif tag not in tags:
            tags.append(tag)
    dp_ranks = _dp_ranks(data)          # a rank may hold every client it is sent (no lower cap)
    data["deployment"]["max_running_requests"] = max(-(-clients // dp_ranks), 1)
    data["deployment"].update(server or {})
    # InferenceX's harnesses' lengths (its single-node harness and the Dynamo P/D harnesses,
    # srt-slurm's sa-bench and ai-dynamo's slurm_jobs bench.sh, all `--random-range-ratio 0.8`):
    # a benchmark run starts every client at once, and fixed lengths would keep them in
    # lockstep waves that re-burst the prefill every cycle
    harness = inferencex_harness(row)
    if harness:
        ratio = agg_recipes.HARNESS_RANGE_RATIO
        # the prompts as the server counted them (`client_tokenizer`: a mis-tokenizing client)
        scale = client_tokenizer.prompt_scale(row) or 1.0
        data["workload"].update(
            input_len={"kind": "random", "value": round(row.isl * scale), "range_ratio": ratio},
            output_len={"kind": "random", "value": row.osl, "range_ratio": ratio})
    return Instance(role, data, clients, workers, dp_ranks, closed, routed, harness), missing, tags


# what an InferenceX MTP run sends, which sets its acceptance (`epsim.sim.accept_sources`): its
# agg MTP scripts pass `--use-chat-template` to the harness (dsr1_fp8_b200_mtp.sh from the
# first, #626), and srt-slurm's sa-bench, which its Dynamo P/D runs drive, passes it on every
# run since 2026-01-21 (ishandhanani/srt-slurm #79); the harness draws random token ids
# (utils/bench_serving/benchmark_serving.py `sample_random_requests`) and wraps them
MTP_PROMPTS = ("MTP prompts: random token ids in DeepSeek-R1's chat template (InferenceX's "
               "harness with --use-chat-template: its MTP scripts, srt-slurm's sa-bench), "
               "workload.prompt_kind random_chat; acceptance from "
               + SOURCES["random_chat"].text)

# the harness posts text (`sample_random_requests` decodes its random ids), so the (prefill)
# server tokenises each prompt inside the TTFT (`epsim.cost.tokenize`, measured on our host)
SERVER_TOKENIZE = ("prompts sent as text, tokenised before the scheduler sees them "
                   "(deployment.server_tokenize; DeepSeek-V3's tokenizer timed on our host, "
                   "~1.7 ms at 1k tokens, ~18 ms at 8k): one at a time by an agg server's "
                   "tokenizer manager, each on its own thread by a P/D pair's Dynamo frontend")


def inferencex_harness(row: SiliconRow) -> bool:
    """The row is an InferenceX run (its database dump or a dated export of its results), so
    its harness's protocol is known (`epsim.validate.silicon.run`: the benchmark run); other
    rows (AIConfigurator's own gap-analysis collection) do not say how they were driven."""
    return INFERENCEX_SOURCE.match(row.source) is not None


def _served_tiles(run: SiliconRow, data: dict) -> str | None:
    """Set `deployment.moe_served_tiles` where the row's SGLang release reads its own E 257
    H200 fused-MoE tables (`epsim.cost.served_tiles`); the assumption line where its GPU is one
    they price, else None."""
    version = (allreduce_fusion.sglang_version(run.backend_version)
               if run.backend == "sglang" else None)
    if version is None or version < served_tiles.FROM_VERSION:
        return None
    data["deployment"]["moe_served_tiles"] = True
    return served_tiles.NOTE if data["cluster"]["gpu"] in served_tiles.GPUS else None


def _share(total: int, workers: int, role: str, assumptions: list[str]) -> int:
    """Clients one instance serves: the row's clients over its workers, rounded up as the
    router's round-robin leaves the busiest instance (`Scenario.one_instance`), and said so."""
    share = -(-total // workers)
    if share * workers != total:
        assumptions.append(f"{role}: {total} clients over {workers} instances = "
                           f"{total / workers:.2f}, simulated as {share} (the busiest instance)")
    return max(share, 1)


def _agg_server(run: SiliconRow, assumptions: list[str], mtp: bool = False
                ) -> tuple[SiliconRow, dict]:
    """An agg row's launch-script flags (`agg_recipes`; `mtp`: its key's MTP twin's) as
    `DeploymentSpec` fields, and the row with its sweep's EP where its cell differs; each said in
    `assumptions` (the flags' line replaces the first, the unstated KV-cache dtype's). No flags
    known: none, and said so."""
    found = agg_recipes.for_row(run, mtp)
    if found is None:
        assumptions.append("server flags not known (no InferenceX agg sweep in effect ran the "
                           "row): max_running_requests = clients, SGLang's other defaults")
        return run, {}
    server = agg_recipes.deployment_fields(found)
    assumptions[0] = (f"server flags of InferenceX {found.key} at {found.commit[:9]} "
                      f"({found.flags.source}): " + ", ".join(f"{k} {v}" for k, v in server.items()))
    assumptions[1] = (f"ISL/OSL uniform in [{agg_recipes.HARNESS_RANGE_RATIO} L, L] "
                      "(InferenceX's harness: --random-range-ratio "
                      f"{agg_recipes.HARNESS_RANGE_RATIO})")
    if server.get("fp8_gemm_backend") == "flashinfer_trtllm":
        assumptions.append("FP8-block linears on FlashInfer's trtllm GEMM (the script's "
                           "flashinfer_trtllm FP8 GEMM backend; images before SGLang 0.5.9 "
                           "assumed to run it too): " + trtllm_fp8_gemm.PROVENANCE)
    if found.flags.moe_runner_backend == "flashinfer_trtllm":
        assumptions.append(agg_recipes.UNFUSED_NOTE + (
            "" if found.ep_size == 1 else f" (at MoE EP {found.ep_size} SGLang runs it apart anyway)"))
    side = run.agg
    if found.ep_size != side.moe_ep_size:
        gpus = side.num_gpus
        run = replace(run, agg=replace(side, moe_tp_size=gpus // found.ep_size,
                                       moe_ep_size=found.ep_size))
        assumptions.append(f"MoE EP {found.ep_size} x MoE-TP {gpus // found.ep_size}, as the sweep "
                           f"ran it (the row says EP {side.moe_ep_size})")
    return run, server


def with_draft(ran: Resolved) -> Resolved:
    """`ran` (`resolve`) saying whether it ran DeepSeek's MTP draft: a P/D row's group says so
    already; an agg row's is its key's MTP twin (`agg_recipes.draft`), which may leave it
    ambiguous (both drafts ran it)."""
    if ran.error is None and ran.row.mode == "agg":
        return agg_recipes.draft(ran)
    return ran


def plan_row(row: SiliconRow, approximate: bool = False) -> RowPlan:
    """The row's instances and what the spec lacks for them (see the module doc).

    Raises:
        EpsimError: the row's model has no zoo entry (the caller keeps such rows out of scope).
    """
    if row.model_path not in MODELS:
        raise EpsimError(f"model_path ({row.model_path!r}) must be one of {sorted(MODELS)}")
    if row.concurrency is None:
        return RowPlan(row, (), error="the row states no client count (silicon_concurrency=N in "
                                      "silicon_data_source)")
    ran = with_draft(resolve(row))
    if ran.error is not None and approximate and ran.alternatives:
        return _candidates_plan(row, ran)
    if ran.error is not None:
        return RowPlan(row, (), error=ran.error, assumptions=ran.assumptions,
                       error_class=ran.error_class)
    return _plan(row, ran, approximate)


def _candidates_plan(row: SiliconRow, ran: Resolved) -> RowPlan:
    """A row several deployments fit (`ran.alternatives`), planned as each of them (those the
    spec expresses, approximated where need be); the row's reason when none is."""
    plans = [_plan(row, alternative, approximate=True) for alternative in ran.alternatives]
    kept = tuple(p for p in plans if p.expressible)
    if not kept:
        return RowPlan(row, (), error=ran.error, assumptions=ran.assumptions,
                       error_class=ran.error_class)
    return RowPlan(row, (), approximations=(
        f"deployment ambiguous: {ran.error}; predicted as the geometric mean of the "
        f"{len(kept)} candidates' predictions, their min and max in `spread`",),
        assumptions=ran.assumptions, candidates=kept)


def _plan(row: SiliconRow, ran: Resolved, approximate: bool) -> RowPlan:
    """The plan of a row resolved to one deployment (`plan_row`)."""
    assumptions = [f"kv_cache_dtype {KV_CACHE_DTYPE} (not stated)",
                   (f"ISL/OSL uniform in [{agg_recipes.HARNESS_RANGE_RATIO} L, L] (not stated: the "
                    "InferenceX harnesses' --random-range-ratio, agg and Dynamo P/D alike)"
                    if inferencex_harness(row) else
                    "fixed ISL/OSL and a steady window (not an InferenceX run: its harness is not "
                    "known)"),
                   *ran.assumptions]
    run = ran.row
    server, per_client = {}, None
    if run.mode == "agg":
        run, server = _agg_server(run, assumptions, ran.speculative)
        per_client = agg_recipes.cold_requests_per_client(run) if inferencex_harness(row) else None
        if inferencex_harness(row) and (cold := agg_recipes.cold_start_note(row, per_client)):
            assumptions.append(cold)
        if inferencex_harness(row) and (scale := client_tokenizer.prompt_scale(run)):
            assumptions.append(client_tokenizer.note(scale, run.isl))
        if inferencex_harness(row) and (
                compiles := first_use.first_use_compile(run, ran.speculative)):
            server = {**server, "first_use_compile": first_use.scenario_field(compiles)}
            assumptions.append(first_use.note(compiles))
        roles = [("agg", run.agg, 1)]
    else:
        roles = [("prefill", run.prefill, run.prefill.num_workers or 1),
                 ("decode", run.decode, run.decode.num_workers or 1)]
    servers = {"agg": server} if run.mode == "agg" else pd_recipes.servers(run, ran.group, assumptions)
    if ran.speculative and "speculative_num_steps" not in servers.get("decode",
                                                                      servers.get("agg", {})):
        assumptions.append("MTP as speculative_algorithm NEXTN with SGLang's defaults for DeepSeek "
                           "(the recipe says spec-decoding: mtp, not its steps)")
    if ran.speculative and inferencex_harness(row):
        assumptions.append(MTP_PROMPTS)
    redundant = dict(ran.redundant_experts or {})
    experts = get_model(MODELS[row.model_path]).num_experts
    instances, missing, tags = [], [], []
    for role, side, workers in roles:
        if experts % side.moe_ep_size and not redundant.get(role):
            # SGLang refuses EP that does not divide the experts unless redundant slots fill it
            redundant[role] = WIDE_EP_REDUNDANT
            assumptions.append(f"{role}: EP {side.moe_ep_size} does not divide {experts} experts: "
                               f"{WIDE_EP_REDUNDANT} redundant experts, as the Dynamo wide-EP "
                               f"recipes run them")
        clients = _share(run.concurrency, workers, role, assumptions)
        instance, lacks, approx = _instance(run, side, role, clients, workers, approximate,
                                            redundant.get(role, 0), ran.speculative,
                                            servers.get(role))
        if role != "decode" and inferencex_harness(row):
            # agg: SGLang's own HTTP server; P/D: Dynamo's frontend (srt-slurm's default)
            instance.data["deployment"]["server_tokenize"] = "serial" if role == "agg" else "parallel"
            if SERVER_TOKENIZE not in assumptions:
                assumptions.append(SERVER_TOKENIZE)
        if (fused := allreduce_fusion.apply(run, instance.data)) and fused not in assumptions:
            assumptions.append(fused)
        if (tiles := _served_tiles(run, instance.data)) and tiles not in assumptions:
            assumptions.append(tiles)
        recipe = pd_recipes.for_group(ran.group) if role == "decode" else None
        if role == "decode" and (room := handoff.room_routed_decode(
                allreduce_fusion.sglang_version(run.backend_version), instance.data["deployment"],
                recipe.decode.get("max_running_requests") if recipe else None, clients)):
            instance.data["deployment"].update(room)
            assumptions.append(handoff.DECODE_BY_ROOM)
        if said := _recorded_skew(run, role)[1]:
            placed = instance.data["deployment"].get("init_expert_location") == "from_skew"
            if placed and (ran.redundant_experts or {}).get(role):
                said += ": the wide-EP script's static placement (init_expert_location) from the same loads"
            elif placed:
                said += ": its redundant experts placed from the same loads"
            assumptions.append(said)
        instances.append(instance)
        missing += [m for m in lacks if m.reason not in {x.reason for x in missing}]
        tags += [t for t in approx if t not in tags]
    # the row's SGLang version chooses the profile's version part; the choice is stated
    part, chosen = part_for(instances[0].data["cluster"]["gpu"], row.backend_version)
    assumptions.append(chosen)
    instances = [replace(i, profile_part=part) for i in instances]
    if run.mode == "agg" and per_client:
        instances = [replace(i, requests_per_client=per_client) for i in instances]
    error = None
    if not missing:
        error = next((e for e in (spec_error(i.data) for i in instances) if e), None)
        if error is not None and tags:
            error = f"cannot express even approximately: {error}"
    return RowPlan(row, tuple(instances), tuple(missing), error, tuple(tags), tuple(assumptions))
