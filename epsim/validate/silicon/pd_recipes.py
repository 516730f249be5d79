"""The server flags a disaggregated silicon row ran with: the srt-slurm recipes InferenceX names.

InferenceX's Dynamo P/D groups name their launch recipe in `additional-settings`
(`CONFIG_FILE=recipes/gb200-fp4/1k1k/low-latency.yaml`), a file of srt-slurm
(github.com/ishandhanani/srt-slurm, branch `sa-submission-q1-2026`, cloned by
`runners/launch_gb200-nv.sh`) that sets each side's SGLang server arguments. The ones the rows'
latencies depend on, as `DeploymentSpec` fields:

- `--scheduler-recv-interval` (the low-latency GB200/GB300 recipes: 10 on both sides): the
  decode server takes in new requests every 10 decode iterations (`epsim.sim.recv`), so a
  request's bootstrap -- and with it the prefill, which waits for the decode's KV indices --
  waits for that receive (`epsim.validate.silicon.handoff`);
- `--chunked-prefill-size` and `--max-running-requests`, divided by the DP size under DP
  attention as SGLang 0.5.8 does (`server_args.py` 1937: `chunked_prefill_size //= dp_size`;
  `model_runner_kv_cache_mixin.py` 288: a rank's requests `max_running_requests // dp_size`);
- `--kv-cache-dtype`, `--mem-fraction-static`, `--cuda-graph-max-bs` (the largest of a
  `--cuda-graph-bs` list);
- the MTP recipes' `--speculative-num-steps 2 --speculative-eagle-topk 1
  --speculative-num-draft-tokens 3` (not SGLang's DeepSeek default of 3 / 1 / 4).

Not carried: `--ep-num-redundant-experts` (the mid-curve recipes' 32; the row's layout keeps
the mapping's), and, having no `DeploymentSpec` field, `--max-total-tokens`, `--max-prefill-tokens`,
`--stream-interval` (SGLang 0.5.8 streams a request's first token at once whatever the interval:
`scheduler_output_processor_mixin.py` 915, `len(output_ids) % interval == 1`), the transfer
backend (`nixl` in every recipe here; `epsim.cost.kv_transfer` prices Mooncake's RDMA path).

`RECIPES` holds the recipes of the groups the flags were read for, keyed by the InferenceX
master-config version (commit) and the group's layout, so a group of another version or layout
keeps SGLang's defaults (`for_group` returns None). The recipe texts are
the versions the code index holds (repository and commit in `source`); the branch InferenceX
cloned is not stored, so that the flags match the branch's at the run's date is an assumption
each row states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epsim.validate.silicon import dynamo_scripts
from epsim.validate.silicon.inferencex import Group
from epsim.validate.silicon.rows import SiliconRow

# srt-slurm recipe copies the flags were read from (repository@commit)
_ISHAN_LL = "ishandhanani/srt-slurm@f64d2b9fc879"
_ISHAN = "ishandhanani/srt-slurm@ab586514235f"
_QICHING = "qiching/srt-slurm@5063eb432640"
_MTP = {"speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
# the DEP8 prefill of the GB200 FP8 8k/1k wide-EP recipes (max_tpt.yaml and mid-curve.yaml alike)
_WIDE_PREFILL_8K = {"chunked_prefill_size": 131072 // 8, "max_running_requests": 30000 // 8,
                    "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.80}
_LOW_LATENCY = {"scheduler_recv_interval": 10, "chunked_prefill_size": 8192,
                "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95, "cuda_graph_max_bs": 256}


@dataclass(frozen=True)
class PDRecipe:
    """One group's recipe: its file, where it was read, and each side's `DeploymentSpec` fields
    (per DP rank, as the spec counts them; `max_running_requests` is a cap)."""

    config_file: str
    source: str
    prefill: dict = field(default_factory=dict)
    decode: dict = field(default_factory=dict)


# (InferenceX key, master-config commit prefix, isl, osl, (P workers, tp, ep, dp-attn),
#  (D workers, tp, ep, dp-attn), MTP) -> the recipe its CONFIG_FILE names
RECIPES: dict[tuple, PDRecipe] = {
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 1024, 1024, (1, 4, 1, False), (2, 4, 1, False),
     False): PDRecipe("recipes/gb200-fp4/1k1k/low-latency.yaml", _ISHAN_LL,
                      {**_LOW_LATENCY, "max_running_requests": 512}, dict(_LOW_LATENCY)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 1024, 1024, (1, 4, 1, False), (2, 4, 1, False),
     False): PDRecipe("recipes/gb300-fp4/1k1k/low_latency.yaml", _ISHAN,
                      {**_LOW_LATENCY, "max_running_requests": 512}, dict(_LOW_LATENCY)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 1024, 1024, (4, 4, 4, True), (1, 48, 48, True),
     False): PDRecipe("recipes/gb300-fp4/1k1k/max_tpt.yaml", _ISHAN,
                      {"chunked_prefill_size": 65536 // 4, "max_running_requests": 30000 // 4,
                       "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.84},
                      {"chunked_prefill_size": 786432 // 48, "max_running_requests": 67584 // 48,
                       "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.83,
                       "cuda_graph_max_bs": 1024}),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 8192, 1024, (1, 4, 1, False), (1, 4, 1, False),
     False): PDRecipe("recipes/gb300-fp8/8k1k/stp/low-latency.yaml", _ISHAN_LL,
                      {"scheduler_recv_interval": 10, "chunked_prefill_size": 32768,
                       "max_running_requests": 128, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.95, "cuda_graph_max_bs": 128},
                      # the decode's `--scheduler-recv-interval 1` is SGLang's default
                      {"max_running_requests": 128, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.85, "cuda_graph_max_bs": 128}),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 8192, 1024, (5, 8, 8, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb300-fp8/8k1k/stp/mid.yaml", _ISHAN_LL,
                      {"chunked_prefill_size": 131072 // 8, "max_running_requests": 30000 // 8,
                       "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.75},
                      {"chunked_prefill_size": 36864 // 32, "max_running_requests": 45000 // 32,
                       "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.82,
                       "cuda_graph_max_bs": 768}),
    # the GB200 FP8 8k/1k wide-EP recipes: no cap binds at the rows' clients (a decode rank's
    # 341 / 256 requests, CUDA graphs to 512 / 256, beside 6144 clients' 256 / 192 a rank)
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 8192, 1024, (6, 8, 8, True), (1, 24, 24, True),
     False): PDRecipe("recipes/gb200-fp8/8k1k/max_tpt.yaml", _ISHAN_LL, _WIDE_PREFILL_8K,
                      {"chunked_prefill_size": 36864 // 24, "max_running_requests": 8192 // 24,
                       "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.82,
                       "cuda_graph_max_bs": 512}),
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 8192, 1024, (5, 8, 8, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb200-fp8/8k1k/mid-curve.yaml", _ISHAN_LL, _WIDE_PREFILL_8K,
                      {"chunked_prefill_size": 36864 // 32, "max_running_requests": 8192 // 32,
                       "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.82,
                       "cuda_graph_max_bs": 256}),
    ("dsr1-fp4-b200-dynamo-sglang-mtp", "84b7df683", 1024, 1024, (1, 4, 4, True), (6, 8, 8, False),
     True): PDRecipe("recipes/b200-fp4/1k1k/mtp/low-latency-dep4-1p-tep8-6d.yaml", _QICHING,
                     {"chunked_prefill_size": 32768 // 4, "max_running_requests": 512 // 4,
                      "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85},
                     {"chunked_prefill_size": 32768, "max_running_requests": 512,
                      "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85,
                      "cuda_graph_max_bs": 512, **_MTP}),
    ("dsr1-fp8-h100-dynamo-sglang", "78d48618f", 1024, 1024, (1, 16, 1, False), (2, 16, 1, False),
     True): PDRecipe("recipes/h100/1k1k/mtp/h100-fp8-1p2d-max-tp-mtp.yaml", _QICHING,
                     {"chunked_prefill_size": 2048, "max_running_requests": 2,
                      "mem_fraction_static": 0.6},
                     {"max_running_requests": 128, "cuda_graph_max_bs": 128,
                      "mem_fraction_static": 0.9, **_MTP}),
}


def _side(recipe) -> tuple:
    return (recipe.workers, recipe.tp, recipe.ep, recipe.dp_attn)


def for_group(group: Group | None) -> PDRecipe | None:
    """The recipe of an InferenceX P/D group, or None where its flags were not read: an
    srt-slurm recipe of `RECIPES`, or the ai-dynamo TP launch script a December 2025 GB200 group
    names by `SCRIPT_MODE` (`epsim.validate.silicon.dynamo_scripts`)."""
    if group is None:
        return None
    script = dynamo_scripts.tp_script(group.prefill.script) if group.prefill.tp_launch else None
    if script is not None:
        source, prefill, decode = dynamo_scripts.TP_SCRIPTS[script]
        return PDRecipe(f"scripts/{group.prefill.script}.sh", source, dict(prefill), dict(decode))
    for (key, commit, isl, osl, prefill, decode, mtp), recipe in RECIPES.items():
        if (group.key == key and group.commit.startswith(commit) and (group.isl, group.osl) ==
                (isl, osl) and _side(group.prefill) == prefill and _side(group.decode) == decode
                and (group.speculative == "mtp") == mtp):
            return recipe
    return None


def servers(run: SiliconRow, group: Group | None, assumptions: list[str]) -> dict[str, dict]:
    """A P/D row's (`run`: its sides as run) per-role server flags from its group's recipe, each
    side's `max_running_requests` capped by a rank's share of the clients; said in
    `assumptions` (the flags' line replaces the first, the unstated KV-cache dtype's, where the
    recipe sets it). No recipe known: none (the row keeps SGLang's defaults)."""
    recipe = for_group(group)
    if recipe is None:
        return {}
    out = {}
    for role, side in (("prefill", run.prefill), ("decode", run.decode)):
        clients = -(-run.concurrency // (side.num_workers or 1))
        out[role] = fields(recipe, role, -(-clients // max(side.attention_dp_size, 1)))
    said = "; ".join(f"{role[0].upper()} " + ", ".join(f"{k} {v}" for k, v in flags.items())
                     for role, flags in out.items())
    kind = "srt-slurm" if recipe.config_file.startswith("recipes/") else "ai-dynamo"
    line = (f"server flags of {kind} {recipe.config_file} ({recipe.source}, as InferenceX "
            f"{group.key} at {group.commit[:9]} names it; the recipe as the index holds it): "
            f"{said}")
    if any("kv_cache_dtype" in flags for flags in out.values()):
        assumptions[0] = line
    else:
        assumptions.append(line)
    return out


def fields(recipe: PDRecipe, role: str, clients_per_rank: int) -> dict:
    """`role`'s `DeploymentSpec` fields; the recipe's `max_running_requests` caps the rank's
    share of the clients (a rank never holds more requests than it is sent)."""
    out = dict(recipe.prefill if role == "prefill" else recipe.decode)
    if "max_running_requests" in out:
        out["max_running_requests"] = max(min(out["max_running_requests"], clients_per_rank), 1)
    return out
