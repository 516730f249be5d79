"""The silicon sample read as written, its rows mapped to scenarios in SGLang's names (each need
applied where the spec has the field, else reported missing with its reason, never dropped), and
the rule that no fitting code can read the silicon data."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from epsim.errors import EpsimError
from epsim.validate.silicon.mapping import plan_row, spec_error
from epsim.validate.silicon.rows import out_of_scope, read_rows

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "epsim" / "validate" / "data" / "silicon_fixture.csv"


@pytest.fixture(scope="module")
def rows():
    return {row.id: row for row in read_rows(FIXTURE)}


def test_rows_read_as_written(rows):
    row = rows["dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483"]
    assert (row.mode, row.system, row.isl, row.osl, row.concurrency) == ("disagg", "gb200", 1024, 1024, 8192)
    assert (row.prefill.attention_dp_size, row.prefill.moe_ep_size, row.prefill.num_workers) == (4, 4, 4)
    assert (row.decode.attention_dp_size, row.decode.moe_ep_size, row.decode.batch_size) == (32, 32, 256)
    assert row.ttft_ms == pytest.approx(25436.715804690302) and row.tpot_ms == pytest.approx(22.663722965605693)
    assert row.image == "lmsysorg/sglang:v0.5.8-cu130"
    qwen = rows["qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_sglang_agg_1000x100_c8_tp4_epnone_1"]
    assert (qwen.agg.tp_size, qwen.agg.attention_dp_size, qwen.agg.moe_tp_size, qwen.agg.moe_ep_size) == (4, 1, 4, 1)
    assert not rows["2026_03_25_deepseek_r1_h100_sxm_sglang_fp8_disagg_1024x8192_c16_tp16_0_ep1_0_695"].workers_stated
    assert [out_of_scope(r) for r in rows.values()].count(None) == 11


def test_bad_csv_is_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,mode\nx,agg\n")
    with pytest.raises(EpsimError, match=r"lacks the column\(s\) silicon_data_source"):
        read_rows(bad)
    with pytest.raises(EpsimError, match="must be a readable CSV file"):
        read_rows(tmp_path / "none.csv")
    text = FIXTURE.read_text().splitlines()
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join([text[0], text[3].replace(",1024,1024,", ",x,1024,", 1)]) + "\n")
    with pytest.raises(EpsimError, match=r"broken.csv:2: isl \('x'\) must be an integer"):
        read_rows(broken)


def _needs_applied_or_missing(plan, role: str, needs: dict) -> None:
    """Each need is in the role's scenario when the spec has the field, else listed missing."""
    instance = next(i for i in plan.instances if i.role == role)
    missing = {m.need.path: m.need.value for m in plan.missing}
    for path, value in needs.items():
        node = instance.data
        for key in path.split("."):
            node = node.get(key, {}) if isinstance(node, dict) else {}
        assert node == value or missing.get(path) == value, (path, value, missing)


def test_mapping_agg_tp_attention_moe_tp(rows):
    plan = plan_row(rows["dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"])
    (agg,) = plan.instances
    assert (agg.role, agg.clients, agg.num_workers, agg.dp_ranks) == ("agg", 4, 1, 1)
    assert agg.data["model"] == "DeepSeek-V3"
    assert agg.data["cluster"] == {"gpu": "H200", "num_nodes": 1}
    assert {k: agg.data["deployment"][k] for k in ("ep_size", "enable_dp_attention", "moe_a2a_backend",
                                                   "disaggregation_mode")} == {
        "ep_size": 1, "enable_dp_attention": False, "moe_a2a_backend": "none", "disaggregation_mode": "null"}
    # an InferenceX sweep ran it: the harness draws lengths uniform in [0.8 L, L]
    ratio = {"kind": "random", "value": 1024, "range_ratio": 0.8}
    assert agg.data["workload"]["input_len"] == ratio == agg.data["workload"]["output_len"]
    assert any("uniform in [0.8 L, L]" in a for a in plan.assumptions)
    # SGLang's Triton fused MoE compiles on first use inside the run, after InferenceX's warm-up
    # of two batches of 4 copies of one prompt (`epsim.validate.silicon.first_use`)
    assert agg.data["deployment"]["first_use_compile"]["warmup_batches"] == [4, 4]
    assert any(a.startswith("first-use compiles") for a in plan.assumptions)
    _needs_applied_or_missing(plan, "agg", {
        "deployment.tp_size": 8, "deployment.moe_tp_size": 8, "deployment.quantization": "fp8_block",
        "workload.arrivals": {"kind": "concurrency", "clients": 4}})
    # attention TP, MoE-TP and block-FP8 weights (issue 37) with closed-loop clients (issue
    # 38): the row runs as stated, nothing missing
    assert plan.expressible and plan.reasons == []


def test_mapping_dp_attention_over_attention_tp_groups(rows):
    # attention DP 2 groups of TP 4 (8 GPUs), MoE-TP 8: SGLang's --tp 8 --dp 2 --enable-dp-attention
    row = rows["dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"]
    row = replace(row, agg=replace(row.agg, tp_size=4, attention_dp_size=2, moe_tp_size=8, moe_ep_size=1))
    (agg,) = plan_row(row).instances
    deployment = agg.data["deployment"]
    assert {k: deployment.get(k) for k in ("tp_size", "dp_size", "moe_tp_size", "ep_size",
                                           "enable_dp_attention", "moe_a2a_backend")} == {
        "tp_size": 8, "dp_size": 2, "moe_tp_size": 8, "ep_size": 1, "enable_dp_attention": True,
        "moe_a2a_backend": "none"}
    assert agg.dp_ranks == 2 and spec_error(agg.data) is None


def test_mapping_disagg_wide_ep_with_workers(rows):
    plan = plan_row(rows["dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483"])
    prefill, decode = plan.instances
    assert (prefill.role, prefill.clients, prefill.num_workers, prefill.dp_ranks) == ("prefill", 2048, 4, 4)
    assert (decode.role, decode.clients, decode.num_workers, decode.dp_ranks) == ("decode", 8192, 1, 32)
    # the 4 prefill workers share the row's clients through the spec's router where it has one
    # (deployment.num_instances), else the busiest instance runs its share directly
    shared = prefill.data["deployment"].get("num_instances") == 4
    assert prefill.routed_clients == (8192 if shared else 2048) and decode.routed_clients == 8192
    assert decode.data["cluster"] == {"gpu": "GB200", "num_nodes": 1}
    assert {k: decode.data["deployment"][k] for k in ("ep_size", "enable_dp_attention", "moe_a2a_backend",
                                                      "disaggregation_mode", "max_running_requests")} == {
        "ep_size": 32, "enable_dp_attention": True, "moe_a2a_backend": "deepep",
        "disaggregation_mode": "decode", "max_running_requests": 256}
    # its recipe (recipes/gb200-fp4/1k1k/mid-curve.yaml) sets no all-to-all on the DEP4 prefill:
    # SGLang's `none`, not DeepEP normal; a 65536-token chunk over DP 4
    assert {k: prefill.data["deployment"][k] for k in ("moe_a2a_backend", "chunked_prefill_size")} == {
        "moe_a2a_backend": "none", "chunked_prefill_size": 16384}
    _needs_applied_or_missing(plan, "decode", {"deployment.quantization": "nvfp4",
                                               "workload.arrivals.think_time_s": 0.0})
    # DP attention over every GPU, EP over every GPU: nothing to say beyond what the spec has
    assert not {m.need.path for m in plan.missing} & {"deployment.tp_size", "deployment.moe_tp_size",
                                                      "deployment.dp_size"}


def test_mapping_unstated_workers_and_b300(rows):
    # workers come from InferenceX's recipe group (test_silicon_resolve.py); two fit this row
    plan = plan_row(rows["2026_03_25_deepseek_r1_h100_sxm_sglang_fp8_disagg_1024x8192_c16_tp16_0_ep1_0_695"])
    assert not plan.instances and "the row does not say which ran" in plan.reasons[0]
    b300 = plan_row(rows["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"])
    assert b300.instances[0].data["cluster"]["gpu"] == "B300"
    assert "cluster.gpu" not in {m.need.path for m in b300.missing}
    odd = plan_row(rows["dsr1_gb300_sglang_fp8_disagg_8192x1024_c1024_cfg505"])
    assert ("prefill: 1024 clients over 5 instances = 204.80, simulated as 205 (the busiest "
            "instance)") in odd.assumptions


def test_an_mtp_row_sends_random_ids_in_the_chat_template_where_it_decodes(rows):
    # both candidate layouts of this H100 row run MTP (InferenceX's harness, --use-chat-template)
    from epsim.sim.accept_sources import SOURCES
    from epsim.validate.silicon.mapping import MTP_PROMPTS
    plan = plan_row(rows["2026_03_25_deepseek_r1_h100_sxm_sglang_fp8_disagg_1024x8192_c16_tp16_0_ep1_0_695"],
                    approximate=True)
    assert plan.candidates
    for candidate in plan.candidates:
        prefill, decode = candidate.instances
        assert decode.data["deployment"]["speculative_algorithm"] == "NEXTN"
        assert decode.data["workload"]["prompt_kind"] == "random_chat"
        assert "prompt_kind" not in prefill.data["workload"]        # no draft there
        assert MTP_PROMPTS in candidate.assumptions
    assert SOURCES["random_chat"].text in MTP_PROMPTS
    # a row without MTP says nothing of its prompts
    agg = plan_row(rows["dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"])
    assert MTP_PROMPTS not in agg.assumptions
    assert all("prompt_kind" not in i.data["workload"] for i in agg.instances)


@pytest.mark.parametrize("row_id, part", [
    ("dsr1_gb300_sglang_fp8_disagg_8192x1024_c1024_cfg505", "0.5.9"),        # 0.5.8.post1
    ("dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717", "0.5.10"),             # 0.5.10.post1
    ("dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81", "0.5.9"),                # 0.5.9
    ("2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43", ""),  # not stated
])
def test_the_row_version_chooses_the_profile_part_and_says_so(rows, row_id, part):
    plan = plan_row(rows[row_id])
    assert {i.profile_part for i in plan.instances} == {part}
    stated = [a for a in plan.assumptions if a.startswith("profile ")]
    assert len(stated) == 1
    assert (f"+ its sglang {part} part" in stated[0]) == bool(part)


def test_approximate_tags_and_refusals(rows):
    plan = plan_row(rows["dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"], approximate=True)
    # closed-loop clients (issue 38), attention TP 8, MoE-TP 8 x EP 1 and block-FP8 weights
    # (issue 37) are all the spec's own: the row runs as stated, nothing approximated
    assert plan.expressible and plan.instances[0].closed_loop
    assert plan.instances[0].data["workload"]["arrivals"] == {"kind": "concurrency", "clients": 4}
    deployment = plan.instances[0].data["deployment"]
    assert (deployment["tp_size"], deployment["moe_tp_size"], deployment["ep_size"]) == (8, 8, 1)
    assert deployment["enable_dp_attention"] is False and deployment["quantization"] == "fp8_block"
    assert plan.approximations == ()
    assert spec_error(plan.instances[0].data) is None
    # the GB200 "agg tp 72" row is the launch script's P/D pair (test_silicon_resolve.py)
    tp72 = plan_row(rows["2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43"],
                    approximate=True)
    assert tp72.expressible and [i.role for i in tp72.instances] == ["prefill", "decode"]
    assert set(tp72.approximations) <= {"closed-loop clients as Poisson arrivals at the loop's rate "
                                        "(Little's law)"}
    unknown = replace(rows["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"], system="a100_sxm")
    assert [m.need.path for m in plan_row(unknown, approximate=True).missing] == ["cluster.gpu"]  # no GPU
    # stands in for another


# -- the fitting code cannot read the silicon data --------------------------------------------
FIT_CODE = [*sorted((ROOT / "epsim" / "calibrate").rglob("*.py")),
            *sorted((ROOT / "epsim" / "cost").rglob("*.py")), ROOT / "epsim" / "profile.py"]
FORBIDDEN = ("silicon", "epsim.validate", "aiconfigurator", "published")
# the op-table importer (`epsim/calibrate/aic*.py`) names the package whose op tables it reads
# (calibration data, the design contract); what it may open is an allowlist of record files
# and op tables (`aic_tables.check_calibration_input`, tests/epsim/calibrate/test_aic.py)
IMPORTER_MAY_NAME = ("aiconfigurator",)


def _code_strings(tree: ast.AST) -> list[str]:
    """Imported module names and string constants that are not docstrings."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(node.module or "")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings):
            out.append(node.value)
    return out


@pytest.mark.parametrize("path", FIT_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_fit_code_references_no_validation_data(path):
    strings = _code_strings(ast.parse(path.read_text()))
    forbidden = [w for w in FORBIDDEN
                 if not (path.name.startswith("aic") and w in IMPORTER_MAY_NAME)]
    hits = [s for s in strings for word in forbidden if word in s.lower()]
    assert not hits, f"{path.relative_to(ROOT)} references validation data or code: {hits}"


def test_a_fit_opens_no_silicon_file(tmp_path):
    """A fit in a fresh interpreter, every file it opens recorded by an audit hook."""
    code = f"""
import json, pathlib, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
from tests.epsim.calibrate_fixtures import write_synthetic
from epsim.calibrate import calibrate
cal = calibrate([write_synthetic(pathlib.Path({str(tmp_path)!r}) / "r.jsonl")])
print(json.dumps({{"components": len(cal.profile.components), "opened": opened,
                  "modules": [m for m in sys.modules if m.startswith(("epsim.validate", "aiconfigurator"))]}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["components"] > 0 and any(p.endswith("r.jsonl") for p in out["opened"])
    # by file name (the checkout's own path may say anything): no silicon sample, no published
    # table (a folder opened is an atomic write's fsync of it: this test's folder says silicon)
    assert not [p for p in out["opened"] if not Path(p).is_dir() and (
        "silicon" in Path(p).name.lower() or "data/published" in Path(p).as_posix())]
    assert out["modules"] == []


def test_the_reference_check_sees_imports_and_strings_not_docstrings():
    tree = ast.parse('"""Fits; the silicon rows are not read."""\nfrom epsim.validate import x\n'
                     'def f():\n    """silicon here is prose."""\n    return "silicon_sample.csv"\n')
    assert _code_strings(tree) == ["epsim.validate", "silicon_sample.csv"]


def test_mapping_routes_deepseek_with_recorded_loads(rows):
    """DeepSeek rows replay the recording of each side's phase at the nearest lengths, said in
    the assumptions; a wide-EP side places its redundant experts from the same loads; Qwen stays
    uniform, unsaid."""
    plan = plan_row(rows["dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483"])
    for instance, name in zip(plan.instances, ("prefill_in1024", "decode_in1000out1000")):
        skew = instance.data["workload"]["skew"]
        assert skew["kind"] == "trace" and Path(skew["path"]).name == f"sglang_dsv3_{name}.json.gz"
        assert Path(skew["path"]).is_file()
        said = [a for a in plan.assumptions if a.startswith(f"{instance.role}: routing replays")]
        assert len(said) == 1 and name in said[0] and "ISL 1024 / OSL 1024" in said[0]
        placed = instance.data["deployment"].get("init_expert_location") == "from_skew"
        assert said[0].endswith("from the same loads") == placed
    assert spec_error(plan.instances[1].data) is None
    b300 = plan_row(rows["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"])
    assert any(a.startswith("agg: routing replays") and "decode_in1000out1000" in a
               for a in b300.assumptions)
    qwen = plan_row(rows["qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_sglang_agg_"
                         "1000x100_c8_tp4_epnone_1"])
    assert "skew" not in qwen.instances[0].data["workload"]
    assert not any("routing replays" in a for a in qwen.assumptions)
