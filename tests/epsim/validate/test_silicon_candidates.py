"""Rows whose deployment several InferenceX groups fit: what their configuration's other rows
rule out (`config_id`), and the candidates' spread `--approximate` predicts for the rest. The
rules are checked on the real silicon sample (skipped where aiconfigurator-core is absent)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from epsim.validate.silicon import inferencex
from epsim.validate.silicon import resolve as resolving
from epsim.validate.silicon.candidates import combine, geometric_mean
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.resolve import SEVERAL_GROUPS, config_deployments, deployment, resolve
from epsim.validate.silicon.rows import default_csv_path, read_rows
from epsim.validate.silicon.scoreboard import RowTask, row_task, select

FIXTURE = Path(__file__).resolve().parent / "data" / "silicon_fixture.csv"
H200_MTP_OR_NOT = "dsr1_h200_sglang_fp8_disagg_8192x1024_c256_cfg434"


@pytest.fixture(scope="module")
def sample():
    path = default_csv_path()
    if path is None:
        pytest.skip("aiconfigurator-core (its silicon_sample.csv) is not installed")
    return {row.id: row for row in select(read_rows(path))[0]}


def test_rows_of_one_config_id_are_peers(sample):
    row = sample["dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455"]
    assert row.config_id == "455"
    assert sorted((p.concurrency, p.isl, p.source.split("measured=")[1][:10]) for p in row.peers) == [
        (4, 8192, "2026-02-07"), (32, 8192, "2026-02-07"), (64, 8192, "2026-02-07")]
    assert not any(p.peers for p in row.peers)
    assert not [r for r in sample.values() if r.config_id is None and r.peers]


def test_a_config_ids_other_rows_rule_out_the_mtp_group(sample):
    # config 455 (P 1 x TEP8 / D 1 x TEP8) ran 1024/1024 at 4 clients on 2026-03-18, when push
    # #907 swept the B200 FP8 key and its -mtp twin: both ran that layout at 4 clients. Its rows
    # of 2026-02-07 (8192/1024 at 4, 32, 64 clients) were swept when only the base key was: the
    # configuration has no MTP, so neither has this row
    row = sample["dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455"]
    own = resolving._own_groups(resolving._as_stated(row).row)[1]
    assert {g.speculative for g in own} == {"none", "mtp"}
    ran = resolve(row)
    assert ran.error is None and not ran.speculative
    assert any(a.startswith("config_id 455 is one deployment") for a in ran.assumptions)
    assert plan_row(row).expressible


def test_the_config_rule_never_contradicts_a_row_one_group_fits(sample):
    checked = 0
    for row in sample.values():
        if not row.peers or row.mode == "agg" and row.system not in resolving.DISAGG_ONLY:
            continue
        own = resolving._own_groups(resolving._as_stated(row).row if row.workers_stated else row)[1]
        mine = {deployment(g, row.system) for g in own}
        if len(mine) != 1:
            continue
        allowed = config_deployments(row)
        assert allowed is not None and mine <= allowed, row.id
        checked += 1
    assert checked >= 75                # 78 rows on aiconfigurator-core 0.12's sample


def test_the_image_tag_tells_the_b200_fp4_key_from_its_mtp_twin(sample):
    # 2026-02-11 saw two B200 FP4 pushes: the base key (01:17Z, `v0.5.8.post1-cu130-runtime`)
    # and its -mtp twin (22:38Z, `v0.5.8.post1-cu130`). A row dated by that day fits both by
    # their build; its tag names the base key's
    row = sample["dsr1_b200_sglang_fp4_disagg_8192x1024_c64_cfg535"]
    found = [g for g in resolving._own_groups(row)[0] if resolving._fits(row, g)]
    assert {(g.key, g.image.rsplit(":", 1)[1]) for g in found} == {
        ("dsr1-fp4-b200-dynamo-sglang", "v0.5.8.post1-cu130-runtime"),
        ("dsr1-fp4-b200-dynamo-sglang-mtp", "v0.5.8.post1-cu130")}
    ran = resolve(row)
    assert ran.error is None and not ran.speculative
    assert any("is the tag of 1 of the 2 InferenceX groups" in a for a in ran.assumptions)


def test_every_row_one_deployment_fits_names_its_groups_tag(sample):
    checked = 0
    for row in sample.values():
        if row.mode == "agg" and row.system not in resolving.DISAGG_ONLY or not row.image:
            continue
        evidence = resolving._as_stated(row).row if row.workers_stated else row
        fitting = [g for g in resolving._own_groups(evidence)[0] if resolving._fits(evidence, g)]
        if len({deployment(g, row.system) for g in fitting}) != 1 or not fitting[0].image:
            continue
        assert any(inferencex.same_tag(row.image, g.image) for g in fitting), row.id
        checked += 1
    assert checked >= 290               # 297 rows on aiconfigurator-core 0.12's sample


def test_a_config_whose_rows_all_fit_both_stays_ambiguous(sample):
    # config 434's rows (64, 128, 256 clients, one sweep) fit the H200 groups with and without
    # MTP alike: nothing in the configuration tells them apart
    row = sample[H200_MTP_OR_NOT]
    assert len(row.peers) == 2
    ran = resolve(row)
    assert ran.error_class == SEVERAL_GROUPS
    assert [a.speculative for a in ran.alternatives] == [False, True]


def test_ambiguous_rows_plan_every_candidate_only_when_approximating():
    row = next(r for r in read_rows(FIXTURE) if r.id == H200_MTP_OR_NOT)
    assert not plan_row(row).expressible and not plan_row(row).candidates
    plan = plan_row(row, approximate=True)
    assert plan.expressible and not plan.instances and len(plan.candidates) == 2
    assert plan.approximations[0].startswith("deployment ambiguous: InferenceX recipe groups")
    drafts = [[i.data["deployment"].get("speculative_algorithm") for i in c.instances]
              for c in plan.candidates]
    assert drafts == [[None, None], [None, "NEXTN"]]         # the draft runs on the decode side
    # several worker counts: one candidate per layout, each a whole plan
    b200 = next(r for r in read_rows(FIXTURE) if r.id.endswith("_515"))
    several = plan_row(b200, approximate=True)
    assert len(several.candidates) >= 2
    decodes = {next(i for i in c.instances if i.role == "decode").num_workers
               for c in several.candidates}
    assert len(decodes) == len(several.candidates)


def test_combine_is_the_geometric_mean_with_the_spread():
    row = next(r for r in read_rows(FIXTURE) if r.id == H200_MTP_OR_NOT)
    plan = plan_row(row, approximate=True)
    entries = [{"status": "predicted", "ttft_ms": 2000.0, "tpot_ms": 40.0, "wall_s": 1.0,
                "shares": {"decode": {"measured": 0.6}}, "reasons": [], "approximations": []},
               {"status": "predicted", "ttft_ms": 4500.0, "tpot_ms": 10.0, "wall_s": 2.0,
                "shares": {"decode": {"measured": 0.8}}, "reasons": [], "approximations": []}]
    entry = combine(plan, entries)
    assert entry["status"] == "approximated"
    assert math.isclose(entry["ttft_ms"], 3000.0) and math.isclose(entry["tpot_ms"], 20.0)
    assert entry["spread"]["tpot_ms"] == [10.0, 40.0] and entry["spread"]["ttft_ms"] == [2000.0, 4500.0]
    assert [c["deployment"].split(",")[0] for c in entry["spread"]["candidates"]] == [
        "without MTP", "with MTP"]
    assert entry["shares"] == {"decode": {"measured": 0.7}} and entry["wall_s"] == 3.0
    # a candidate that fails is listed but not averaged; none predicting fails the row
    entries[1] = {**entries[1], "status": "failed", "ttft_ms": None, "tpot_ms": None,
                  "reasons": ["ran out of memory simulating this row"]}
    assert combine(plan, entries)["tpot_ms"] == 40.0
    entries[0] = entries[1]
    assert combine(plan, entries)["status"] == "failed"
    assert geometric_mean([1.0, 100.0]) == pytest.approx(10.0)


@pytest.mark.slow
def test_an_ambiguous_row_under_approximate_is_its_candidates_mean():
    row = next(r for r in read_rows(FIXTURE) if r.id == H200_MTP_OR_NOT)
    exact = row_task(RowTask(row, approximate=False, peer=False))["epsim"]
    assert exact["status"] == "cannot_express" and exact["reason_class"] == SEVERAL_GROUPS
    ours = row_task(RowTask(row, approximate=True, peer=False))["epsim"]
    assert ours["status"] == "approximated"
    spread = ours["spread"]
    assert [c["status"] for c in spread["candidates"]] == ["predicted", "predicted"]
    for metric in ("ttft_ms", "tpot_ms"):
        low, high = spread[metric]
        assert low <= ours[metric] <= high
        assert ours[metric] == pytest.approx(geometric_mean([c[metric] for c in spread["candidates"]]))
