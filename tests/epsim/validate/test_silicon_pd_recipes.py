"""A P/D group's srt-slurm recipe flags (`epsim.validate.silicon.pd_recipes`): only the group
they were read for takes them, per DP rank as SGLang divides them, capped by the clients."""

from __future__ import annotations

from dataclasses import replace

import pytest

from epsim.errors import SpecError

from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon import dynamo_scripts, inferencex, pd_recipe_flags, pd_recipes
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
    assert pd_recipes.for_group(replace(MAX_TPT, decode=Recipe(1, 16, 16, True))) is None
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
    """Each side's flags build a scenario (the spec accepts every field and value), the ai-dynamo
    scripts' too."""
    scripts = [pd_recipe_flags.PDRecipe(name, *flags) for name, flags in dynamo_scripts.TP_SCRIPTS.items()]
    scripts += [pd_recipes.for_group(_fp8_2025(commit, isl))
                for commit, isl in dynamo_scripts.UNNAMED_FP8]
    for recipe in [*pd_recipe_flags.RECIPES.values(), *scripts]:
        for role in ("prefill", "decode"):
            flags = pd_recipes.fields(recipe, role, 1 << 20)
            deployment = {"disaggregation_mode": role, "tp_size": 8, "ep_size": 8, **flags}
            if "speculative_num_steps" in flags:
                deployment["speculative_algorithm"] = "NEXTN"
            scenario_from_dict({"name": "r", "model": "DeepSeek-V3",
                                "cluster": {"gpu": "B200", "num_nodes": 1},
                                "deployment": deployment,
                                "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0}}})


def test_the_gb200_fp8_8k1k_wide_ep_recipes_cap_a_decode_rank_above_the_rows_clients():
    # recipes/gb200-fp8/8k1k/max_tpt.yaml: --max-running-requests 8192 over DP 24 = 341 a rank,
    # above the 256 a rank that 6144 clients send (the cap binds only from 342 on)
    group = replace(MAX_TPT, key="dsr1-fp8-gb200-dynamo-sglang", commit="37f353be2" + "0" * 31,
                    isl=8192, prefill=Recipe(6, 8, 8, True), decode=Recipe(1, 24, 24, True))
    recipe = pd_recipes.for_group(group)
    assert recipe.config_file == "recipes/gb200-fp8/8k1k/max_tpt.yaml"
    assert pd_recipes.fields(recipe, "decode", 6144 // 24)["max_running_requests"] == 256
    assert pd_recipes.fields(recipe, "decode", 400)["max_running_requests"] == 341
    assert pd_recipes.fields(recipe, "decode", 1)["cuda_graph_max_bs"] == 512
    mid = pd_recipes.for_group(replace(group, prefill=Recipe(5, 8, 8, True),
                                       decode=Recipe(1, 32, 32, True)))
    assert pd_recipes.fields(mid, "decode", 1 << 20)["max_running_requests"] == 256
    assert pd_recipes.fields(mid, "prefill", 1 << 20)["chunked_prefill_size"] == 16384


def test_a_december_low_latency_group_takes_its_ai_dynamo_scripts_flags():
    script = "gb200-fp8/disagg/8k1k-low-latency"
    group = replace(MAX_TPT, key="dsr1-fp8-gb200-dynamo-sglang", commit="c4cde0370" + "0" * 31,
                    isl=8192, prefill=Recipe(1, 1, 1, True, 1, script),
                    decode=Recipe(1, 1, 1, True, 1, script))
    recipe = pd_recipes.for_group(group)
    assert recipe.config_file == f"scripts/{script}.sh" and recipe.source.startswith("ai-dynamo/")
    assert pd_recipes.fields(recipe, "prefill", 64) == {
        "scheduler_recv_interval": 10, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95,
        "max_running_requests": 64, "moe_a2a_backend": "none", "chunked_prefill_size": 24576,
        "cuda_graph_max_bs": 512, "disable_shared_experts_fusion": True,   # flashinfer_trtllm MoE
        "fp8_gemm_backend": "flashinfer_trtllm"}                  # SGLANG_ENABLE_FLASHINFER_GEMM=1
    # the FP4 key's script of the same name: TP4 with flashinfer_trtllm MoE, its decode with no
    # --max-running-requests and graphs up to 256 requests
    fp4_script = "gb200-fp4/disagg/8k1k-low-latency"
    fp4 = pd_recipes.for_group(replace(group, key="dsr1-fp4-gb200-dynamo-sglang",
                                       prefill=Recipe(1, 1, 1, True, 1, fp4_script)))
    assert fp4.config_file == f"scripts/{fp4_script}.sh" and fp4.source.startswith("wxsms/")
    assert pd_recipes.fields(fp4, "decode", 64) == {
        "scheduler_recv_interval": 10, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95,
        "moe_a2a_backend": "none", "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256,
        "disable_shared_experts_fusion": True}                # NVFP4 linears: no FP8 GEMM backend
    # a wide-EP script of the FP8 key was not read: SGLang's defaults
    wide = replace(group, prefill=Recipe(1, 1, 1, True, 1, "gb200-fp8/disagg/8k1k-max-tpt"))
    assert pd_recipes.for_group(wide) is None


def _december_fp4(isl: int, mode: str) -> Group:
    """The 2025-12-19 `dsr1-fp4-gb200-dynamo-sglang` group of `isl` whose SCRIPT_MODE is `mode`."""
    version = next(v for v in inferencex.versions()["dsr1-fp4-gb200-dynamo-sglang"]
                   if v.date.startswith("2025-12-19"))
    return next(g for g in version.groups
                if g.isl == isl and g.prefill.script == f"gb200-fp4/disagg/{mode}")


def test_a_december_fp4_wide_ep_group_takes_its_scripts_flags():
    """1k1k-max-tpt (P 4 x DEP4 / D 1 x DEP32): the decode's DeepEP low-latency with 32
    redundant experts and NVFP4 dispatch, its chunk and requests over DP 32; the prefill's no
    all-to-all and no redundant experts. 8k1k-middle-curve's decode (DEP48) divides by 48."""
    recipe = pd_recipes.for_group(_december_fp4(1024, "1k1k-max-tpt"))
    assert recipe.config_file == "scripts/gb200-fp4/disagg/1k1k-max-tpt.sh"
    decode = pd_recipes.fields(recipe, "decode", 1 << 20)
    assert decode["moe_a2a_backend"] == "deepep" and decode["deepep_mode"] == "low_latency"
    assert decode["ep_num_redundant_experts"] == 32 and decode["dispatch_dtype"] == "nvfp4"
    assert (decode["chunked_prefill_size"], decode["max_running_requests"]) == (786432 // 32,
                                                                                67584 // 32)
    prefill = pd_recipes.fields(recipe, "prefill", 1 << 20)
    assert prefill["moe_a2a_backend"] == "none" and "ep_num_redundant_experts" not in prefill
    assert prefill["chunked_prefill_size"] == 65536 // 4
    mid = pd_recipes.fields(pd_recipes.for_group(_december_fp4(8192, "8k1k-middle-curve")),
                            "decode", 1 << 20)
    assert (mid["chunked_prefill_size"], mid["cuda_graph_max_bs"]) == (24576 // 48, 512)


def test_every_side_states_its_moe_path_and_only_the_fp8_wide_prefills_run_deepep_normal():
    """The FP4 DEP4 prefills set no `--moe-a2a-backend` (SGLang's `none`: all-gather and reduce
    over the DP-attention ranks); the FP8 DEP8 prefills run DeepEP normal; every wide-EP
    decode but the H200 DEP8's DeepEP low-latency; the B200 FP8 1k/1k recipe names no backend on
    either side (`pd_recipes_b200_fp8`: SGLang's `none` with DP attention)."""
    for recipe in pd_recipe_flags.RECIPES.values():
        for role in ("prefill", "decode"):
            assert "moe_a2a_backend" in pd_recipes.fields(recipe, role, 1), (recipe.config_file, role)
    for (key, _, _, _, prefill, decode, _), recipe in pd_recipe_flags.RECIPES.items():
        named = "-b200-" not in key or "-fp8-" not in key   # the B200 FP8 recipe names none
        wide_prefill = prefill[3] and prefill[2] > 1 and named   # DP attention, EP > 1
        expected = ("deepep", "normal") if wide_prefill and "-fp8-" in key else ("none", None)
        assert (recipe.prefill["moe_a2a_backend"], recipe.prefill.get("deepep_mode")) == expected, \
            recipe.config_file
        wide_decode = decode[3] and decode[2] > 1
        # the H200 DEP8 decode (bs128-1p1d-dep-mtp.yaml) sets no `--moe-a2a-backend`
        deepep = wide_decode and "-h200-" not in key and named
        assert recipe.decode["moe_a2a_backend"] == ("deepep" if deepep else "none"), recipe.config_file
        # the FP4 wide-EP decodes' SGLANG_MOE_NVFP4_DISPATCH=1: DeepEP LL packs NVFP4
        nvfp4 = wide_decode and "-fp4-" in key
        assert (recipe.decode.get("dispatch_dtype") == "nvfp4") == nvfp4, recipe.config_file
    by_file = {r.config_file: r for r in pd_recipe_flags.RECIPES.values()}
    for name in ("recipes/gb200-fp4/1k1k/mid-curve.yaml", "recipes/gb200-fp4/1k1k/max-tpt.yaml",
                 "recipes/gb300-fp4/1k1k/mid_curve.yaml", "recipes/gb300-fp4/1k1k/max_tpt.yaml",
                 "recipes/b200-fp4/1k1k/mtp/low-latency-dep4-1p-tep8-6d.yaml"):
        assert by_file[name].prefill["moe_a2a_backend"] == "none", name
    for name in ("recipes/gb200-fp4/1k1k/max-tpt.yaml", "recipes/gb200-fp8/8k1k/mid-curve.yaml"):
        assert by_file[name].decode["deepep_mode"] == "low_latency"
        assert by_file[name].decode["disable_shared_experts_fusion"] is True


def test_the_hopper_8k1k_mtp_groups_take_their_recipes_two_step_draft():
    """The H100 and H200 8k/1k MTP recipes state `--speculative-num-steps 2` (not SGLang's
    default 3 for DeepSeek) and their decodes' caps: H100 TP16 128, H200 TP8 16, H200 DEP8 192
    over its DP 8."""
    h100 = Group(key="dsr1-fp8-h100-dynamo-sglang", commit="78d48618f" + "0" * 31,
                 date="2026-02-12", image="", isl=8192, osl=1024, concurrencies=(1, 128),
                 prefill=Recipe(1, 16, 1, False), decode=Recipe(1, 16, 1, False),
                 speculative="mtp")
    h200 = replace(h100, key="dsr1-fp8-h200-dynamo-sglang", commit="fcc04aaa2" + "0" * 31,
                   prefill=Recipe(1, 8, 1, False))
    for group, decode, cap, graph_bs in ((h100, Recipe(1, 16, 1, False), 128, 128),
                                         (h200, Recipe(6, 8, 1, False), 16, 16),
                                         (h200, Recipe(1, 8, 8, True), 24, 192)):
        recipe = pd_recipes.for_group(replace(group, decode=decode))
        fields = pd_recipes.fields(recipe, "decode", 1 << 20)
        assert (fields["speculative_num_steps"], fields["speculative_num_draft_tokens"]) == (2, 3)
        assert (fields["max_running_requests"], fields["cuda_graph_max_bs"]) == (cap, graph_bs)
        assert fields["moe_a2a_backend"] == "none"
    # the same layouts without MTP keep SGLang's defaults (their STP recipes were not read)
    assert pd_recipes.for_group(replace(h100, speculative="none")) is None


def test_the_b200_fp4_1k1k_stp_groups_take_the_mtp_recipe_s_flags_less_its_draft():
    """recipes/b200-fp4/1k1k/stp/low-latency-dep4-1p-tep8-{5,6}d.yaml (srt-slurm's
    `1k1k-stp.yaml` low-latency variants): the MTP recipe's sides without `--speculative-*`."""
    stp = Group(key="dsr1-fp4-b200-dynamo-sglang", commit="46e0b5ff0" + "0" * 31,
                date="2026-02-10", image="", isl=1024, osl=1024, concurrencies=(32, 64, 256),
                prefill=Recipe(1, 4, 4, True), decode=Recipe(6, 8, 8, False))
    mtp = pd_recipes.for_group(replace(stp, key="dsr1-fp4-b200-dynamo-sglang-mtp",
                                       commit="84b7df683" + "0" * 31, speculative="mtp"))
    for workers in (5, 6):
        recipe = pd_recipes.for_group(replace(stp, decode=Recipe(workers, 8, 8, False)))
        assert recipe.config_file == f"recipes/b200-fp4/1k1k/stp/low-latency-dep4-1p-tep8-{workers}d.yaml"
        assert recipe.prefill == mtp.prefill
        # --chunked-prefill-size 32768 and --max-running-requests 512 over the prefill's DP 4
        assert (recipe.prefill["chunked_prefill_size"], recipe.prefill["max_running_requests"]) == \
            (8192, 128)
        assert recipe.decode == {k: v for k, v in mtp.decode.items() if not k.startswith("speculative")}
        assert recipe.decode["cuda_graph_max_bs"] == 512
    assert pd_recipes.for_group(replace(stp, decode=Recipe(4, 8, 8, False))) is None


def test_the_gb300_fp4_1k1k_mid_curve_group_takes_its_16k_chunk():
    # recipes/gb300-fp4/1k1k/mid_curve.yaml: --chunked-prefill-size 65536 over DP 4 (not the
    # 8192 of SGLang's default), DEP32 decode's 67584 requests and 786432 chunk over DP 32
    mid = pd_recipes.for_group(replace(MAX_TPT, decode=Recipe(1, 32, 32, True)))
    assert mid.config_file == "recipes/gb300-fp4/1k1k/mid_curve.yaml"
    assert pd_recipes.fields(mid, "prefill", 1 << 20)["chunked_prefill_size"] == 16384
    decode = pd_recipes.fields(mid, "decode", 1 << 20)
    assert (decode["max_running_requests"], decode["chunked_prefill_size"]) == (2112, 24576)
    assert decode["num_reserved_decode_tokens"] == 112


def _scenario(deployment: dict):
    return scenario_from_dict({"name": "r", "model": "DeepSeek-V3",
                               "cluster": {"gpu": "GB200", "num_nodes": 8},
                               "deployment": deployment,
                               "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0}}})


def test_wide_ep_sides_keep_sglang_s_trivial_replicas_and_the_busiest_rank_pays_them():
    """Every DeepEP side of a recipe runs `--ep-num-redundant-experts 32` with no EPLB and no
    `--init-expert-location`: SGLang's trivial placement (slot p holds expert p mod 256), so at
    uniform routing a DEP32 rank without replicas takes 9 experts' tokens against the mean's 8."""
    from epsim.eplb import Placement
    from epsim.eplb.replicas import replica_fractions
    from epsim.sim.initial_placement import initial_placement

    for recipe in pd_recipe_flags.RECIPES.values():
        for role in ("prefill", "decode"):
            flags = pd_recipes.fields(recipe, role, 1)
            wide = flags["moe_a2a_backend"] == "deepep"
            assert (flags.get("ep_num_redundant_experts"), flags.get("init_expert_location")) == (
                (32, "trivial") if wide else (None, None)), (recipe.config_file, role)
    by_file = {r.config_file: r for r in pd_recipe_flags.RECIPES.values()}
    recipe = by_file["recipes/gb200-fp8/1k1k/max-tpt.yaml"]
    assert recipe.prefill["ep_dispatch_algorithm"] == "random"       # the prefill's `dynamic`
    decode = {"disaggregation_mode": "decode", "tp_size": 32, "ep_size": 32, "dp_size": 32,
              "enable_dp_attention": True, **pd_recipes.fields(recipe, "decode", 128)}
    scenario = _scenario(decode)
    p2l = initial_placement(scenario, None)
    assert p2l.shape == (58, 288) and (p2l[:, 256:] == range(32)).all()
    placement = Placement.on_cluster(p2l[:1], 256, 32, 4)
    per_rank = replica_fractions(placement, "static").reshape(32, 9).sum(axis=1)
    assert per_rank.max() == 9.0 and per_rank.mean() == 8.0
    # the trivial placement must be stated: left to the default, replicas without EPLB are refused
    del decode["init_expert_location"]
    with pytest.raises(SpecError, match="needs deployment.enable_eplb: true"):
        _scenario(decode)


def test_the_fp4_8k1k_tp4_and_low_latency_prefills_hold_a_pool_under_two_chunks():
    """`--max-total-tokens` a GPU beside the chunk a rank: the FP4 8k/1k TP4 prefills' pool is
    their 131072 chunk, the low-latency TP prefills' 8192 (1k/1k) or 32768 (8k/1k) beside an
    8192, 24576 or 32768 chunk (`epsim.sim.prefill_pool` then holds each forward for its KV);
    the FP4 1k/1k DEP4 prefills hold 8 chunks, the GB200 FP8 8k/1k DEP8 prefills 32; the
    low-latency decodes set none."""
    from epsim.sim.prefill_pool import prefill_hold
    one_chunk = set()
    for recipe in pd_recipe_flags.RECIPES.values():
        flags = pd_recipes.fields(recipe, "prefill", 1 << 20)
        if "max_total_tokens" not in flags:
            continue
        sc = scenario_from_dict({"name": "r", "model": "DeepSeek-V3", "cluster": {"gpu": "GB200"},
                                 "deployment": {"disaggregation_mode": "prefill", "ep_size": 4,
                                                **flags}})
        if prefill_hold(sc, flags["max_total_tokens"]) is not None:
            one_chunk.add(recipe.config_file)
    low_latency = {f"recipes/{name}.yaml" for name in (
        "gb200-fp4/1k1k/low-latency", "gb300-fp4/1k1k/low_latency", "gb200-fp4/8k1k/low-latency",
        "gb300-fp4/8k1k/low_latency", "gb200-fp8/1k1k/low-latency", "gb200-fp8/8k1k/low-latency",
        "gb300-fp8/1k1k/stp/low-latency", "gb300-fp8/8k1k/stp/low-latency")}
    assert one_chunk == low_latency | {f"recipes/{gpu}-fp4/8k1k/{name}.yaml" for gpu, name in (
        ("gb200", "mid-curve"), ("gb200", "max-tpt"), ("gb300", "mid_curve"), ("gb300", "max_tpt"))}
    by_file = {r.config_file: r for r in pd_recipe_flags.RECIPES.values()}
    assert not any("max_total_tokens" in by_file[f].decode for f in low_latency)
    assert by_file["recipes/gb200-fp4/8k1k/max-tpt.yaml"].decode["max_total_tokens"] == 524288
    assert by_file["recipes/gb200-fp4/1k1k/mid-curve.yaml"].decode["max_total_tokens"] == 3122380


def _fp8_2025(commit: str, isl: int) -> Group:
    """The wide-EP group of `dsr1-fp8-gb200-dynamo-sglang` at `commit` for `isl` that names no
    script (the 1k/1k DEP48 one: 3 prefill workers; the 8k/1k one: 6)."""
    version = next(v for v in inferencex.versions()["dsr1-fp8-gb200-dynamo-sglang"]
                   if v.groups[0].commit.startswith(commit))
    return next(g for g in version.groups
                if g.isl == isl and g.prefill.workers == (3 if isl == 1024 else 6))


def test_a_2025_fp8_wide_ep_group_naming_no_script_takes_the_script_its_date_ran():
    """The fork's gb200-fp8.sh (every group from 2025-09-25, the 8k/1k one to 2025-12-18): KV
    cache dtype unset (auto), decode graphs to 512 and 36864 requests over DP 24, and -- no
    --use-init-location for 12 / 6 / 6 / 1 nodes and workers -- SGLang's trivial slots; the
    1k/1k DEP48 group's sides place theirs from recorded loads. From 2025-12-01 the 1k/1k groups
    ran ai-dynamo's default.sh: an FP8 KV cache, graphs to 768, 45000 requests over the DP."""
    fork = pd_recipes.for_group(_fp8_2025("93e1b3ca1", 8192))
    assert fork.config_file.endswith("components/backends/sglang/slurm_jobs/scripts/gb200-fp8.sh")
    decode = pd_recipes.fields(fork, "decode", 1 << 20)
    assert (decode["kv_cache_dtype"], decode["cuda_graph_max_bs"]) == ("auto", 512)
    assert decode["max_running_requests"] == 36864 // 24
    assert decode["mla_kv_splits"] == "one"             # --attention-backend cutlass_mla
    assert decode["init_expert_location"] == "trivial" and decode["ep_num_redundant_experts"] == 32
    prefill = pd_recipes.fields(fork, "prefill", 1 << 20)
    assert prefill["max_total_tokens"] == 524288 and prefill["chunked_prefill_size"] == 131072 // 8
    assert "mem_fraction_static" not in prefill
    nov = pd_recipes.for_group(_fp8_2025("c2fe824e0", 1024))
    assert nov.config_file == fork.config_file
    for role in ("prefill", "decode"):
        assert pd_recipes.fields(nov, role, 1 << 20)["init_expert_location"] == "from_skew"
    assert pd_recipes.fields(nov, "decode", 1 << 20)["chunked_prefill_size"] == 36864 // 48
    december = pd_recipes.for_group(_fp8_2025("175fe5364", 1024))
    assert december.config_file.endswith("scripts/gb200-fp8/disagg/default.sh")
    decode = pd_recipes.fields(december, "decode", 1 << 20)
    assert (decode["kv_cache_dtype"], decode["cuda_graph_max_bs"]) == ("fp8_e4m3", 768)
    assert decode["max_running_requests"] == 45000 // 48
    assert "mla_kv_splits" not in decode                # trtllm_mla: the profile's kernel
    # the same layout under another key, or naming a script, is not one of these groups
    group = _fp8_2025("c2fe824e0", 8192)
    assert dynamo_scripts.unnamed_wide_ep_fp8(replace(group, key="dsr1-fp4-gb200-dynamo-sglang")) is None
    named = replace(group, prefill=replace(group.prefill, script="gb200-fp8/disagg/8k1k-max-tpt"))
    assert dynamo_scripts.unnamed_wide_ep_fp8(named) is None


def test_the_tp_low_latency_sides_run_flashinfer_trtllm_the_wide_ep_ones_do_not():
    """Every Blackwell TP side (MoE EP 1, srt-slurm low-latency recipes and the ai-dynamo TP
    scripts) runs --moe-runner-backend flashinfer_trtllm, so its shared expert is unfused; the
    FP8 ones run their linears on FlashInfer's trtllm GEMM; no wide-EP FP8 recipe sets it."""
    tp, wide = [], []
    for (key, *_, prefill, decode, _mtp), recipe in pd_recipe_flags.RECIPES.items():
        if key.startswith(("dsr1-fp8-gb", "dsr1-fp4-gb")):
            for side, flags in ((prefill, recipe.prefill), (decode, recipe.decode)):
                (tp if side[2] == 1 and not side[3] else wide).append((key, flags))
    tp += [(name, flags) for name, (_, *sides) in dynamo_scripts.TP_SCRIPTS.items()
           for flags in sides]
    # 8 low-latency recipes and 4 scripts, both sides, and the FP4 8k/1k wide-EP recipes' TP4 prefills
    assert len(tp) == 16 + 8 + 4 and len(wide) == 30
    for name, flags in tp:
        assert flags["disable_shared_experts_fusion"] is True, name
        assert flags.get("fp8_gemm_backend") == ("flashinfer_trtllm" if "fp8" in name else None), name
    assert all("fp8_gemm_backend" not in flags for _, flags in wide)


def test_a_tp_row_says_its_gemm_and_its_unfused_shared_expert_a_wide_ep_row_neither():
    group = replace(MAX_TPT, key="dsr1-fp8-gb300-dynamo-sglang", commit="37f353be2" + "0" * 31,
                    isl=8192, osl=1024, prefill=Recipe(1, 4, 1, False), decode=Recipe(1, 4, 1, False))
    tp4 = Side(tp_size=4, pp_size=1, attention_dp_size=1, moe_tp_size=4, moe_ep_size=1,
               batch_size=None, num_workers=1)
    row = replace(_row(), system="gb300", precision="fp8", gemm_quant_mode="fp8",
                  moe_quant_mode="fp8_block", isl=8192, concurrency=8, prefill=tp4, decode=tp4)
    assumptions = ["kv_cache_dtype auto (not stated)", "lengths"]
    servers = pd_recipes.servers(row, group, assumptions)
    assert servers["decode"]["fp8_gemm_backend"] == "flashinfer_trtllm"
    assert any(a.startswith("prefill and decode: FP8-block linears on FlashInfer's trtllm GEMM")
               for a in assumptions)
    assert "prefill and decode: shared expert unfused at MoE EP 1" in " ".join(assumptions)
    # the FP4 max_tpt row: DEP4 prefill (its recipe states the flag) and DEP48 decode, EP > 1
    wide = ["kv_cache_dtype auto (not stated)", "lengths"]
    pd_recipes.servers(_row(), MAX_TPT, wide)
    assert not any("unfused" in a or "trtllm GEMM" in a for a in wide)


def test_the_b200_fp8_1k1k_groups_take_the_recipe_their_variants_match():
    # recipes/b200-fp8/1k1k.yaml (`pd_recipes_b200_fp8`): STP low-latency tep8-1p-3d at 16-256
    # clients, max-tpt dep8-1p-5d with DP attention over 8 on both sides
    tep = replace(MAX_TPT, key="dsr1-fp8-b200-dynamo-sglang", commit="8a02464b8" + "0" * 31,
                  prefill=Recipe(1, 8, 8, False), decode=Recipe(3, 8, 8, False))
    recipe = pd_recipes.for_group(tep)
    assert recipe.config_file == "recipes/b200-fp8/1k1k.yaml" and recipe.matched
    assert pd_recipes.fields(recipe, "prefill", 1 << 20) == {
        "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85, "moe_a2a_backend": "none",
        "disable_shared_experts_fusion": True,                    # flashinfer_trtllm MoE runner
        "fp8_gemm_backend": "flashinfer_trtllm",                  # SGLANG_ENABLE_JIT_DEEPGEMM=false
        "chunked_prefill_size": 32768, "max_running_requests": 512, "disable_cuda_graph": True}
    assert pd_recipes.fields(recipe, "decode", 86)["max_running_requests"] == 86
    dep = pd_recipes.for_group(replace(tep, prefill=Recipe(1, 8, 8, True),
                                       decode=Recipe(5, 8, 8, True)))
    assert pd_recipes.fields(dep, "prefill", 1 << 20)["chunked_prefill_size"] == 32768 // 8
    assert pd_recipes.fields(dep, "decode", 1 << 20)["max_running_requests"] == 1024 // 8
    # the MTP twin's 1p-2d variant drafts one step; no 8k/1k variant has three decodes
    mtp = pd_recipes.for_group(replace(tep, key="dsr1-fp8-b200-dynamo-sglang-mtp",
                                       commit="ee032b37f" + "0" * 31, speculative="mtp",
                                       prefill=Recipe(1, 8, 8, True), decode=Recipe(2, 8, 8, True)))
    assert pd_recipes.fields(mtp, "decode", 1)["speculative_num_draft_tokens"] == 2
    assert pd_recipes.for_group(replace(tep, isl=8192)) is None


def test_the_b200_fp8_8k1k_groups_take_the_stp_and_mtp_files():
    """recipes/b200-fp8/8k1k-stp.yaml and 8k1k-mtp.yaml (`pd_recipes_b200_fp8`): one base for
    every variant (JIT DeepGEMM off: the trtllm FP8 GEMM; a 32768 chunk, 512 requests), the
    `max-tpt-dep8` groups laid out DEP8 as InferenceX states them, the flags over DP 8."""
    stp = replace(MAX_TPT, key="dsr1-fp8-b200-dynamo-sglang", commit="8a02464b8" + "0" * 31,
                  isl=8192, prefill=Recipe(1, 8, 8, False), decode=Recipe(6, 8, 8, False))
    mtp = replace(stp, key="dsr1-fp8-b200-dynamo-sglang-mtp", commit="ee032b37f" + "0" * 31,
                  speculative="mtp", prefill=Recipe(2, 8, 8, True), decode=Recipe(1, 8, 8, True))
    for group, name, dp in ((stp, "8k1k-stp", 1), (mtp, "8k1k-mtp", 8)):
        recipe = pd_recipes.for_group(group)
        assert recipe.config_file == f"recipes/b200-fp8/{name}.yaml" and recipe.matched
        prefill = pd_recipes.fields(recipe, "prefill", 1 << 20)
        assert (prefill["chunked_prefill_size"], prefill["max_running_requests"],
                prefill["fp8_gemm_backend"], prefill["kv_cache_dtype"]) == (
            32768 // dp, 512 // dp, "flashinfer_trtllm", "fp8_e4m3")
        decode = pd_recipes.fields(recipe, "decode", 1 << 20)
        assert decode["cuda_graph_max_bs"] == 512
        assert ("speculative_num_steps" in decode) == (group.speculative == "mtp")
    # the STP file has no 1p2d variant; March's MoE-EP-1 DEP8 prefills ran another recipe
    assert pd_recipes.for_group(replace(mtp, key=stp.key, commit=stp.commit, speculative="none",
                                        prefill=Recipe(1, 8, 8, True),
                                        decode=Recipe(2, 8, 8, True))) is None
    assert pd_recipes.for_group(replace(stp, commit="593fb431a" + "0" * 31,
                                        prefill=Recipe(1, 8, 1, True))) is None


def test_a_matched_recipe_says_it_was_matched_not_named():
    group = replace(MAX_TPT, key="dsr1-fp8-b200-dynamo-sglang", commit="8a02464b8" + "0" * 31,
                    prefill=Recipe(1, 8, 8, False), decode=Recipe(3, 8, 8, False))
    row = replace(_row(), system="b200_sxm", precision="fp8", concurrency=64,
                  prefill=replace(_row().prefill, attention_dp_size=1, num_workers=1),
                  decode=replace(_row().decode, attention_dp_size=1, num_workers=3))
    assumptions = ["kv_cache_dtype auto (not stated)"]
    pd_recipes.servers(row, group, assumptions)
    assert "whose variants' layouts and client counts are those of InferenceX" in assumptions[0]
    # JIT DeepGEMM off on Blackwell: SGLang's auto FP8 GEMM is FlashInfer's trtllm, said once
    assert sum("FP8-block linears on FlashInfer's trtllm GEMM" in a for a in assumptions) == 1
    assert "names it" not in assumptions[0]


def test_only_the_fp4_wide_ep_recipes_gather_fp4_and_run_q_b_fp8():
    """`moe_fp4_allgather` on the FP4 1k/1k DEP4 prefills alone (flashinfer_cutlass, DP
    attention, EP = DP 4); `nvfp4_fp8_q_b` on both sides of every FP4 wide-EP recipe (each sets
    SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN=1), on no low-latency or B200 recipe."""
    gather, q_b = set(), set()
    for recipe in pd_recipe_flags.RECIPES.values():
        if recipe.prefill.get("moe_fp4_allgather"):
            gather.add(recipe.config_file)
        if recipe.prefill.get("nvfp4_fp8_q_b") and recipe.decode.get("nvfp4_fp8_q_b"):
            q_b.add(recipe.config_file)
        assert not recipe.decode.get("moe_fp4_allgather")
    assert gather == {f"recipes/{gpu}-fp4/1k1k/{name}.yaml" for gpu, name in (
        ("gb200", "mid-curve"), ("gb200", "max-tpt"), ("gb300", "mid_curve"), ("gb300", "max_tpt"))}
    assert q_b == gather | {f"recipes/{gpu}-fp4/8k1k/{name}.yaml" for gpu, name in (
        ("gb200", "mid-curve"), ("gb200", "max-tpt"), ("gb300", "mid_curve"), ("gb300", "max_tpt"))}
    for recipe in pd_recipe_flags.RECIPES.values():        # each builds a valid deployment
        flags = pd_recipes.fields(recipe, "prefill", 1 << 20)
        if flags.get("moe_fp4_allgather"):
            scenario_from_dict({"name": "r", "model": "DeepSeek-V3", "cluster": {"gpu": "GB200"},
                                "deployment": {"disaggregation_mode": "prefill", "ep_size": 4,
                                               "tp_size": 4, **flags}})
