"""A P/D group's srt-slurm recipe flags (`epsim.validate.silicon.pd_recipes`): only the group
they were read for takes them, per DP rank as SGLang divides them, capped by the clients."""

from __future__ import annotations

from dataclasses import replace

from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon import pd_recipes
from epsim.validate.silicon.inferencex import Group, Recipe
from epsim.validate.silicon.rows import Side, SiliconRow

MAX_TPT = Group(key="dsr1-fp4-gb300-dynamo-sglang", commit="3282fdeba" + "0" * 31, date="2026-02-11",
                image="", isl=1024, osl=1024, concurrencies=(512, 2048, 4096, 8192),
                prefill=Recipe(4, 4, 4, True), decode=Recipe(1, 48, 48, True))


def _row() -> SiliconRow:
    """A GB300 row as its max_tpt group ran it: P 4 x DEP4 / D 1 x DEP48, 8192 clients."""
    prefill = Side(tp_size=1, pp_size=1, attention_dp_size=4, moe_tp_size=1, moe_ep_size=4,
                   batch_size=None, num_workers=4)
    decode = Side(tp_size=1, pp_size=1, attention_dp_size=48, moe_tp_size=1, moe_ep_size=48,
                  batch_size=None, num_workers=1)
    return SiliconRow(id="r", source="", backend="sglang", backend_version="0.5.8.post1",
                      model_path="deepseek-ai/DeepSeek-R1", system="gb300", precision="fp4",
                      mode="disagg", isl=1024, osl=1024, gemm_quant_mode="nvfp4",
                      moe_quant_mode="nvfp4", concurrency=8192, agg=None, prefill=prefill,
                      decode=decode, ttft_ms=1.0, tpot_ms=1.0)


def test_only_the_group_the_flags_were_read_for_takes_them():
    assert pd_recipes.for_group(MAX_TPT).config_file == "recipes/gb300-fp4/1k1k/max_tpt.yaml"
    assert pd_recipes.for_group(replace(MAX_TPT, commit="37f353be2" + "0" * 31)) is None
    assert pd_recipes.for_group(replace(MAX_TPT, decode=Recipe(1, 32, 32, True))) is None
    assert pd_recipes.for_group(replace(MAX_TPT, speculative="mtp")) is None
    assert pd_recipes.for_group(None) is None


def test_flags_are_per_dp_rank_and_the_cap_never_exceeds_the_clients():
    assumptions = ["kv_cache_dtype auto (not stated)", "lengths"]
    servers = pd_recipes.servers(_row(), MAX_TPT, assumptions)
    # --chunked-prefill-size 65536 over DP 4; --max-running-requests 30000 over DP 4 caps at the
    # 8192 clients over 4 workers over 4 ranks
    assert servers["prefill"]["chunked_prefill_size"] == 16384
    assert servers["prefill"]["max_running_requests"] == 512
    # 67584 over DP 48 = 1408 > the 171 clients a rank is sent
    assert servers["decode"]["max_running_requests"] == 171
    assert servers["decode"]["kv_cache_dtype"] == "fp8_e4m3"
    assert assumptions[0].startswith("server flags of srt-slurm recipes/gb300-fp4/1k1k/max_tpt.yaml")
    assert assumptions[1] == "lengths"


def test_every_recipe_s_flags_are_deployment_fields():
    """Each side's flags build a scenario (the spec accepts every field and value)."""
    for recipe in pd_recipes.RECIPES.values():
        for role in ("prefill", "decode"):
            flags = pd_recipes.fields(recipe, role, 1 << 20)
            deployment = {"disaggregation_mode": role, "tp_size": 8, "ep_size": 8, **flags}
            if "speculative_num_steps" in flags:
                deployment["speculative_algorithm"] = "NEXTN"
            scenario_from_dict({"name": "r", "model": "DeepSeek-V3",
                                "cluster": {"gpu": "B200", "num_nodes": 1},
                                "deployment": deployment,
                                "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0}}})
