"""A disaggregated row that states its workers takes the recipe of the InferenceX group whose
key, measured time, client count, stated layout and draft it fits (`resolve._stated_group`):
never its measured TTFT / TPOT; several groups with different flags, none."""

from __future__ import annotations

from dataclasses import replace

from epsim.validate.silicon import mapping, pd_recipes, resolve
from epsim.validate.silicon.inferencex import Group, Recipe
from epsim.validate.silicon.rows import Side, SiliconRow

# the database dump's row of config 457 as it states itself (silicon_sample.csv): P 1 x DEP8 /
# D 1 x DEP8 on B200, 8k/1k at 128 clients, measured on 2026-02-07
_DEP8 = Side(tp_size=1, pp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8,
             batch_size=None, num_workers=1)
CFG457 = SiliconRow(
    id="dsr1_b200_sglang_fp8_disagg_8192x1024_c128_cfg457",
    source="db-dump/2026-04-27; config_id=457; silicon_concurrency=128; "
           "measured=2026-02-07T00:00:00.000Z; workflow_run_id=263; "
           "lmsysorg/sglang:v0.5.8.post1-cu130-amd64",
    backend="sglang", backend_version="0.5.8.post1", model_path="deepseek-ai/DeepSeek-V3",
    system="b200_sxm", precision="fp8", mode="disagg", isl=8192, osl=1024, gemm_quant_mode="fp8",
    moe_quant_mode="fp8_block", concurrency=128, agg=None, prefill=_DEP8, decode=_DEP8,
    ttft_ms=1.0, tpot_ms=1.0)


def test_cfg457_takes_the_8k1k_stp_recipe_s_flags():
    ran = resolve.resolve(CFG457)
    assert ran.error is None and not ran.from_recipe and not ran.speculative
    recipe = pd_recipes.for_group(ran.group)
    assert recipe.config_file == "recipes/b200-fp8/8k1k-stp.yaml"
    plan = mapping.plan_row(CFG457, approximate=True)
    for instance in plan.instances:
        deployment = instance.data["deployment"]
        # JIT DeepGEMM off, FP8 KV, the 32768 chunk over DP 8
        assert (deployment["fp8_gemm_backend"], deployment["kv_cache_dtype"],
                deployment["chunked_prefill_size"]) == ("flashinfer_trtllm", "fp8_e4m3", 4096)
    assert any("8k1k-stp.yaml" in said for said in plan.assumptions)


def test_the_measurement_never_picks_the_group():
    timed = replace(CFG457, ttft_ms=2934.0, tpot_ms=7.0)
    assert resolve.resolve(timed).group == resolve.resolve(CFG457).group


def test_a_layout_the_row_does_not_state_takes_no_recipe():
    # the same cells with two decode workers: no group of that day ran 1 x DEP8 / 2 x DEP8 STP
    ran = resolve.resolve(replace(CFG457, decode=replace(_DEP8, num_workers=2)))
    assert ran.group is None


def test_groups_with_different_flags_leave_sglang_s_defaults_and_say_so():
    ran = resolve.resolve(CFG457)
    other = replace(ran.group, key="dsr1-fp8-gb300-dynamo-sglang", commit="3282fdeba" + "0" * 31,
                    isl=1024, prefill=Recipe(1, 8, 8, True), decode=Recipe(1, 8, 8, True))
    assert pd_recipes.for_group(other) is None          # a group whose flags were not read
    stated = replace(ran, group=None, assumptions=())
    alone = resolve._stated_group(stated, [ran.group])
    assert alone.group == ran.group
    both = resolve._stated_group(stated, [ran.group, other])
    assert both.group is None
    assert any("different recipes" in said for said in both.assumptions)
    # a group with the same flags (the STP recipe at another of its commits) keeps them
    twin: Group = replace(ran.group, commit="8a02464b8" + "f" * 31)
    assert resolve._stated_group(stated, [ran.group, twin]).group == ran.group
