"""What a silicon row ran where its cells do not say it: InferenceX's recipe groups (the master
config's and the GB200 launch script's), the version in effect when the row was measured, and
the rows' tp x ep products and total-GPU `tp_size` read back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from epsim.validate.silicon import dynamo_scripts, inferencex
from epsim.validate.silicon.inferencex_extract import launch_groups
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.resolve import recipe_side, resolve
from epsim.validate.silicon.rows import Side, read_rows

FIXTURE = Path(__file__).resolve().parent / "data" / "silicon_fixture.csv"
# the form of runners/launch_gb200-nv.sh's SGLang branch (its arguments: prefill nodes and
# workers, decode nodes and workers, frontends), written here to test the parser
LAUNCH = """
if [[ $FRAMEWORK == "dynamo-trtllm" ]]; then
    if [ "$ISL" = "1024" ] && [ "$OSL" = "1024" ]; then
        ./submit_disagg.sh "mtp=off" "tep" 1 4 8 128 128 "0.9" 0 0 "1 2 4"
    fi
else
    if [ "$ISL" = "1024" ] && [ "$OSL" = "1024" ]; then
        top_list="4096"
        low_list="2x4x8"
        bash ./submit_disagg.sh 4 2 8 1 9 $ISL $OSL $top_list inf
        bash ./submit_disagg.sh 1 1 4 4 9 $ISL $OSL $low_list inf 1p_4d
    elif [ "$ISL" = "8192" ] && [ "$OSL" = "1024" ]; then
        concurrency_list="128x256"
        bash ./submit_disagg.sh 12 6 6 1 8 $ISL $OSL $concurrency_list inf
    fi
fi
"""


@pytest.fixture(scope="module")
def rows():
    return {row.id: row for row in read_rows(FIXTURE)}


def test_launch_script_groups_are_its_sglang_submissions():
    groups = launch_groups(LAUNCH)
    assert [(g["isl"], g["osl"], g["concurrencies"]) for g in groups] == [
        (1024, 1024, [4096]), (1024, 1024, [2, 4, 8]), (8192, 1024, [128, 256])]
    assert groups[0]["prefill"] == {"workers": 2, "tp": 1, "ep": 1, "dp_attn": True, "nodes": 4}
    assert groups[2]["decode"] == {"workers": 1, "tp": 1, "ep": 1, "dp_attn": True, "nodes": 6}
    top = inferencex.Recipe(**groups[0]["decode"])
    assert top.wide_ep and top.gpus_per_worker("gb200") == 32
    # the bottom of the curve names its script variant, which runs TP over each 4-GPU worker
    low = inferencex.Recipe(**groups[1]["decode"])
    assert low.script == "gb200-fp8/disagg/1p_4d" and low.tp_launch and not low.wide_ep
    assert "script" not in groups[0]["prefill"] and not top.tp_launch


def test_stored_recipes_hold_the_launch_script_before_the_master_config():
    found = inferencex.versions()["dsr1-fp8-gb200-dynamo-sglang"]
    assert [v.date for v in found] == sorted((v.date for v in found), key=inferencex.moment)
    first = found[0]
    assert first.groups[0].commit.startswith("c2fe824e0")          # [GB200] Adds DS-R1 FP8 SGLang
    middle = next(g for g in first.groups if g.isl == 1024)
    assert (middle.prefill.workers, middle.prefill.nodes, middle.decode.workers,
            middle.decode.nodes) == (3, 6, 1, 12)
    assert middle.total_gpus("gb200") == 72


def test_version_in_effect_by_time_or_by_day():
    found = [inferencex.Version("k", d, ()) for d in
             ("2025-09-25T07:39:31Z", "2025-12-01T20:32:46Z", "2025-12-05T20:51:47Z")]
    assert [v.date for v in inferencex.in_effect(found, "2025-12-01T21:00:00Z")] == [found[1].date]
    assert [v.date for v in inferencex.in_effect(found, "2025-12-01T20:30:00Z")] == [found[0].date]
    assert [v.date for v in inferencex.in_effect(found, "2025-12-01T20:32:10Z")] == [found[1].date]  # a push
    # starts the sweep it changes: a run 36 s before the commit ran it (SLACK_S)
    # a day-dated run may have started before or after that day's commit
    assert [v.date for v in inferencex.in_effect(found, "2025-12-01T00:00:00.000Z")] == [
        found[0].date, found[1].date]


def test_agg_tp72_on_gb200_is_the_launch_scripts_pd_pair(rows):
    ran = resolve(rows["2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43"])
    assert ran.error is None and ran.row.mode == "disagg"
    p, d = ran.row.prefill, ran.row.decode
    assert (p.num_workers, p.attention_dp_size, p.moe_ep_size, p.tp_size) == (3, 8, 8, 1)
    assert (d.num_workers, d.attention_dp_size, d.moe_ep_size) == (1, 48, 48)
    assert ran.redundant_experts == {"prefill": 32, "decode": 32}
    assert "the row says agg with tp_size 72" in ran.assumptions[1]
    plan = plan_row(rows["2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43"])
    decode = next(i for i in plan.instances if i.role == "decode")
    assert (decode.data["deployment"]["ep_size"], decode.data["deployment"]["ep_num_redundant_experts"],
            decode.num_workers, decode.dp_ranks) == (48, 32, 1, 48)
    assert not [m for m in plan.missing if m.need.path.startswith("deployment.")]


def test_tp_times_ep_product_read_back(rows):
    ran = resolve(rows["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"])
    assert (ran.row.agg.tp_size, ran.row.agg.moe_tp_size, ran.row.agg.moe_ep_size) == (4, 1, 4)
    assert ran.assumptions == ("agg: tp_size 16 = moe_tp_size 4 x moe_ep_size 4 read as "
                               "InferenceX's tp 4, ep 4 (4 GPUs)",)
    plan = plan_row(rows["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"])
    deployment = plan.instances[0].data["deployment"]
    assert plan.instances[0].data["cluster"] == {"gpu": "B300", "num_nodes": 1}
    assert (deployment["tp_size"], deployment["ep_size"], deployment["quantization"]) == (4, 4, "nvfp4")
    assert not [m for m in plan.missing if not m.need.path.startswith("workload.")]


def test_unstated_workers_from_the_group_that_ran_them(rows):
    # measured 4 s after the commit that made the H100 key MTP-only: its MTP groups ran it, and
    # two of them ran 1024/8192 at 16 clients (TP16 or DEP16 decode; the row does not say)
    h100 = rows["2026_03_25_deepseek_r1_h100_sxm_sglang_fp8_disagg_1024x8192_c16_tp16_0_ep1_0_695"]
    refused = resolve(h100)
    assert refused.error.startswith("2 InferenceX recipe groups of dsr1-fp8-h100-dynamo-sglang fit")
    assert "P 1 x TP16 / D 2 x TP16 MTP; P 1 x TP16 / D 1 x DEP16 MTP" in refused.error
    # at 1024/1024 and 128 clients only the TP16 group ran
    ran = resolve(replace(h100, isl=1024, osl=1024, concurrency=128))
    assert ran.error is None and ran.speculative
    assert ran.assumptions == ("workers and layout from InferenceX dsr1-fp8-h100-dynamo-sglang at "
                               "78d48618f (2026-02-12): P 1 x TP16 / D 2 x TP16, MTP",)
    assert (ran.row.decode.num_workers, ran.row.decode.tp_size, ran.row.decode.moe_tp_size) == (2, 16, 16)
    plan = plan_row(replace(h100, isl=1024, osl=1024, concurrency=128))
    decode = next(i for i in plan.instances if i.role == "decode")
    assert (decode.clients, decode.num_workers, decode.data["cluster"]["num_nodes"]) == (64, 2, 2)
    need = "deployment.speculative_algorithm"
    assert need in {m.need.path for m in plan.missing} or decode.data["deployment"].get(
        "speculative_algorithm") == "NEXTN"


def test_a_row_no_group_or_several_groups_fit_is_refused_with_the_reason(rows):
    plan = plan_row(rows["2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_disagg_1024x1024_c512_tp8_0_ep8_0_515"])
    assert not plan.expressible and not plan.instances
    assert "InferenceX recipe group" in plan.error and "dsr1-fp8-b200-dynamo-sglang" in plan.error


def test_mtp_twin_key_and_the_sweep_that_ran_a_row():
    # #907 (593fb431, 2026-03-18T21:01:02Z) names the B200 FP8 key and its -mtp twin: a row
    # measured 3 s later may come from either; the push of 2026-02-13T19:05:35Z named only the twin
    keys = inferencex.keys_for("fp8", "b200_sxm")
    assert keys == ("dsr1-fp8-b200-dynamo-sglang", "dsr1-fp8-b200-dynamo-sglang-mtp")
    assert inferencex.swept(keys, "2026-03-18T21:01:05Z") == keys
    assert inferencex.swept(keys, "2026-02-13T19:05:38Z") == keys[1:]
    assert inferencex.swept(keys, "2026-02-07T07:09:01Z") == keys[:1]
    assert inferencex.swept(keys, "2026-02-13T00:00:00.000Z") == keys[1:]     # its day's push
    assert inferencex.swept(keys, None) == keys
    # every group of the twin key runs the draft, whatever it states
    twin = [g for v in inferencex.versions()[keys[1]] for g in v.groups]
    assert twin and {g.speculative for g in twin} == {"mtp"}
    # only the twin ran 1024/1024 at 512 clients then: the row finds its groups there
    found = inferencex.candidates("fp8", "b200_sxm", 1024, 1024, 512, "2026-03-18T21:01:05Z", None)
    assert found and {g.key for g in found} == {keys[1]}


def test_a_day_dated_row_is_held_to_its_days_push():
    # H100 rows dated 2026-02-13 by day: the key's push that day (78d48618, 03:10 UTC) made it
    # MTP-only; the version before the day (76fa582, no MTP) did not run them
    found = inferencex.candidates("fp8", "h100_sxm", 1024, 1024, 16, "2026-02-13T00:00:00.000Z", None)
    assert found and {g.commit[:8] for g in found} == {"78d48618"}
    assert {g.speculative for g in found} == {"mtp"}


def test_a_side_states_the_total_only_where_every_side_does(rows):
    # GB300 FP4 at 2026-02-12T00:44:37Z: 4 x DEP4 prefills beside a DEP32 decode (16 + 32 = 48
    # GPUs) or a DEP48 one; a row writing prefill 4 and decode 48 states widths per worker
    # (Dynamo rows writing the total write it on both sides: 48 and 48)
    row = rows["dsr1_gb300_sglang_fp8_disagg_8192x1024_c1024_cfg505"]
    row = replace(row, precision="fp4", isl=1024, osl=1024, concurrency=2048, moe_quant_mode="nvfp4",
                  source="measured=2026-02-12T00:44:37Z",
                  prefill=replace(row.prefill, tp_size=4, attention_dp_size=1, moe_tp_size=1,
                                  moe_ep_size=4, num_workers=None),
                  decode=replace(row.decode, tp_size=48, attention_dp_size=1, moe_tp_size=12,
                                 moe_ep_size=4, num_workers=None))
    ran = resolve(row)
    assert ran.error is None, ran.error
    assert "P 4 x DEP4 / D 1 x DEP48" in ran.assumptions[0]
    # the same row writing 48 on both sides states the total: the DEP32 pair's (DEP48's is 64)
    total = replace(row, prefill=replace(row.prefill, tp_size=48, moe_tp_size=12))
    assert "P 4 x DEP4 / D 1 x DEP32" in resolve(total).assumptions[0]


def test_a_row_stating_its_workers_but_not_the_draft(rows):
    # the H200 sweep of 2026-02-07 ran P 1 x TP8 / D 1 x DEP8 at 8192/1024 with and without MTP
    h200 = rows["dsr1_h200_sglang_fp8_disagg_8192x1024_c256_cfg434"]
    refused = resolve(h200)
    assert refused.error_class == "deployment not known: several InferenceX recipe groups fit the row"
    assert "with and without MTP" in refused.error
    # at 512 clients only the MTP group ran that layout: the row runs the draft
    ran = resolve(replace(h200, concurrency=512))
    assert ran.error is None and ran.speculative
    # a client count no group ran: the row as it states itself
    alone = resolve(replace(h200, concurrency=3))
    assert alone.error is None and not alone.speculative


def _gb200_fp8_low_latency(rows, **cells):
    """A December 2025 GB200 FP8 P/D row as the database dump writes one (config 227): 1k/1k,
    the placeholders `tp: 1, ep: 1, dp-attn: true` over 4 GPUs a side, 4 decode workers."""
    base = rows["2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43"]
    side = Side(1, 1, 4, 4, 1, None, 1)
    fields = dict(id="low_latency", mode="disagg", agg=None, concurrency=128,
                  source="db-dump; measured=2025-12-21T00:00:00.000Z; lmsysorg/sglang:v0.5.5.post2",
                  prefill=side, decode=replace(side, num_workers=4))
    return replace(base, **{**fields, **cells})


def test_a_low_latency_script_runs_tp_over_the_worker(rows):
    # InferenceX's 1k/1k bottom-of-curve group (SCRIPT_MODE=1k1k-low-latency, 2025-12-19 on)
    # states DEP4 placeholders; its ai-dynamo script runs --tensor-parallel-size 4
    # --data-parallel-size 1 --expert-parallel-size 1: TP4 attention and MoE, no redundant experts
    ran = resolve(_gb200_fp8_low_latency(rows))
    assert ran.error is None and ran.group.prefill.script == "gb200-fp8/disagg/1k1k-low-latency"
    assert ran.row.prefill == Side(4, 1, 1, 4, 1, None, 1)
    assert ran.row.decode == Side(4, 1, 1, 4, 1, None, 4)
    assert ran.redundant_experts is None
    assert "P 1 x TP4 / D 4 x TP4" in ran.assumptions[0]
    assert any("1k1k-low-latency.sh: TP over the worker" in a for a in ran.assumptions)
    # the script's flags: its --max-running-requests 512 capped by a rank's clients (128 / 4)
    decode = next(i for i in plan_row(_gb200_fp8_low_latency(rows)).instances if i.role == "decode")
    deployment = decode.data["deployment"]
    assert (deployment["ep_size"], deployment.get("enable_dp_attention"), deployment["tp_size"]) == (
        1, False, 4)
    assert (deployment["max_running_requests"], deployment["scheduler_recv_interval"],
            deployment["kv_cache_dtype"], deployment["cuda_graph_max_bs"]) == (32, 10, "fp8_e4m3", 128)


def test_the_1p_4d_script_before_the_rename_and_the_wide_ep_scripts_beside_it(rows):
    # 2025-12-05 by day: the launch script's `submit_disagg.sh 1 1 4 4 ... inf 1p_4d` (Dynamo
    # rows write the total, 4 + 16 = 20 GPUs, on both sides)
    total = Side(20, 1, 1, 20, 1, None, None)
    row = _gb200_fp8_low_latency(rows, source="measured=2025-12-05T00:00:00.000Z", prefill=total,
                                 decode=total)
    ran = resolve(row)
    assert ran.error is None and ran.group.prefill.script == "gb200-fp8/disagg/1p_4d"
    assert (ran.row.decode.tp_size, ran.row.decode.moe_ep_size, ran.row.decode.num_workers) == (4, 1, 4)
    assert any("renamed 1k1k-low-latency" in a for a in ran.assumptions)
    # the same day's top of curve (4096 clients: 2 x DEP8 prefills, a DEP32 decode) stays wide EP
    top = resolve(replace(row, concurrency=4096, prefill=Side(48, 1, 1, 48, 1, None, None),
                          decode=Side(48, 1, 1, 48, 1, None, None)))
    assert top.error is None and top.redundant_experts == {"prefill": 32, "decode": 32}
    assert (top.row.decode.attention_dp_size, top.row.decode.moe_ep_size) == (32, 32)


def test_the_tp_scripts_are_the_low_latency_ones_of_both_precisions():
    # the FP4 key names its scripts by the same SCRIPT_MODE under gb200-fp4/: the low-latency
    # ones run TP4 too (the group's `tp: 1, dp-attn: true` placeholders read as DEP4 before)
    assert dynamo_scripts.tp_script("gb200-fp4/disagg/1k1k-low-latency") is not None
    assert dynamo_scripts.tp_script("gb200-fp4/disagg/1k1k-max-tpt") is None
    assert dynamo_scripts.tp_script("gb200-fp8/disagg/8k1k-max-tpt") is None
    fp4 = [g for v in inferencex.versions()["dsr1-fp4-gb200-dynamo-sglang"] for g in v.groups
           if g.prefill.script]
    low = [g for g in fp4 if g.prefill.script.endswith("low-latency")]
    assert low and all(g.prefill.tp_launch and not g.decode.wide_ep for g in low)
    assert all(g.decode.wide_ep for g in fp4 if g not in low)
    # the December 1k/1k low-latency group: P 1 x TP4 / D 2 x TP4, not DEP4
    side = recipe_side(next(g for g in low if g.isl == 1024).decode, "gb200")
    assert (side.tp_size, side.attention_dp_size, side.moe_ep_size, side.num_workers) == (4, 1, 1, 2)


def test_the_fp4_8k1k_wide_ep_scripts_run_their_prefill_tp4_whatever_dp_attn_says():
    """8k1k-max-tpt states `dp-attn: true` on its prefill, 8k1k-middle-curve `false`; both
    scripts launch the prefill `--tp-size TOTAL_GPUS --dp-size 1 --ep-size 1` and the decode
    wide EP. The 1k/1k scripts' prefill stays DP attention over 4 GPUs."""
    version = next(v for v in inferencex.versions()["dsr1-fp4-gb200-dynamo-sglang"]
                   if v.date.startswith("2025-12-19"))
    for group in version.groups:
        if group.prefill.script not in dynamo_scripts.WIDE_EP_FP4:
            continue
        prefill = recipe_side(group.prefill, "gb200")
        tp = group.isl == 8192
        assert group.prefill.tp_launch == tp and group.decode.wide_ep, group.prefill.script
        assert (prefill.tp_size, prefill.attention_dp_size) == ((4, 1) if tp else (1, 4))


def test_a_december_fp4_8k1k_max_tpt_row_runs_its_scripts_layout_and_flags(rows):
    """A row as the database dump writes config 254 (8k/1k, 8192 clients, 2025-12-21): the
    8k1k-max-tpt script's TP4 prefills (the group says `dp-attn: true`) and DEP32 decode, whose
    32 redundant experts and NVFP4 dispatch are the script's flags, not resolve's from-skew slots."""
    base = rows["dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483"]
    row = replace(base, id="cfg254", isl=8192, concurrency=8192,
                  source="db-dump; measured=2025-12-21T00:00:00.000Z; lmsysorg/sglang:v0.5.5.post2",
                  prefill=Side(1, 1, 4, 4, 1, None, 10), decode=Side(1, 1, 32, 32, 1, None, 1))
    ran = resolve(row)
    assert ran.error is None and ran.group.prefill.script == "gb200-fp4/disagg/8k1k-max-tpt"
    assert ran.row.prefill == Side(4, 1, 1, 4, 1, None, 10)
    assert (ran.row.decode.attention_dp_size, ran.row.decode.moe_ep_size) == (32, 32)
    assert ran.redundant_experts is None
    plan = {i.role: i.data["deployment"] for i in plan_row(row).instances}
    assert (plan["decode"]["ep_num_redundant_experts"], plan["decode"]["init_expert_location"],
            plan["decode"]["dispatch_dtype"]) == (32, "trivial", "nvfp4")
    assert plan["prefill"].get("ep_num_redundant_experts", 0) == 0
    assert (plan["prefill"]["tp_size"], plan["prefill"]["chunked_prefill_size"]) == (4, 131072)
