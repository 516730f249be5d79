"""The aiconfigurator-core importer on the committed fixture (a few hundred rows of h200_sxm's
tables, `aic_fixture/`, NOTICE beside it): sources, records, units, counts, the fit and what it
may read. Tests of the whole package skip when it is not installed."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from importlib.util import find_spec
from math import comb
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

from epsim.calibrate import Holdout, calibrate, load_records  # noqa: E402
from epsim.calibrate.aic import import_source, record_paths  # noqa: E402
from epsim.calibrate.aic_comm import _deepep_counts  # noqa: E402
from epsim.calibrate.aic_records import (MS_TO_US, balanced_counts, collector_counts,  # noqa: E402
                                         faster_than_hbm)
from epsim.calibrate.aic_tables import (AIC_TO_ZOO, ROOT_ENV, AicTable, aic_system,  # noqa: E402
                                        check_calibration_input,
                                        parse_source, zoo_gpu)
from epsim.cli import main  # noqa: E402
from epsim.fused_moe_config import record_default_tile  # noqa: E402
from epsim.errors import RecordError  # noqa: E402
from epsim.profile import kv_kind, load_profile  # noqa: E402

FIXTURE = Path(__file__).parent / "aic_fixture" / "systems"
HAVE_PACKAGE = find_spec("aiconfigurator_core") is not None
needs_package = pytest.mark.skipif(not HAVE_PACKAGE, reason="aiconfigurator-core not installed "
                                   "(pip install 'epsim[aic]')")
PROFILES = Path(__file__).resolve().parents[3] / "epsim" / "data" / "profiles"


@pytest.fixture
def fixture_env(monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(FIXTURE))


@pytest.fixture(scope="module")
def imported():
    return import_source(parse_source("aic:h200_sxm/sglang", root=FIXTURE))


def test_system_names_map_both_ways():
    assert zoo_gpu("h200_sxm") == "H200" and aic_system("GB300") == "gb300"
    assert zoo_gpu("b300_sxm") == "B300" and aic_system("B300") == "b300_sxm"
    assert zoo_gpu("a100_sxm") == "" and aic_system("H800") == ""
    assert all(aic_system(g) == s for s, g in AIC_TO_ZOO.items() if g)


BAD_SOURCES = {
    "aic:nope": r"aic system \('nope'\) must be one of \['h200_sxm'\]",
    "aic:h200_sxm/vllm": r"aic framework \('vllm'\) must be one of \['sglang'\]",
    "aic:h200_sxm/sglang/9.9": r"aic version \('9.9'\) of h200_sxm/sglang must be one of",
    "aic:h200_sxm//": r"must be aic:SYSTEM\[/FRAMEWORK\[/VERSION\]\]",
}


def test_bad_source_names_what_is_allowed():
    for text, match in BAD_SOURCES.items():
        with pytest.raises(RecordError, match=match):
            parse_source(text, root=FIXTURE)


def test_version_resolves_per_table_as_aic_serves_it():
    source = parse_source("aic:h200_sxm", root=FIXTURE)
    assert source.version == "0.5.14"                      # AIC's current for sglang
    versions = {t.name: t.version for t in source.tables()}
    assert versions["moe_perf"] == "0.5.14"
    assert versions["wideep_deepep_ll_perf"] == "0.5.12"   # newest not newer than 0.5.14
    assert versions["nccl_perf"] == "2.26.2"               # h200_sxm.yaml's NCCL version
    older = parse_source("aic:h200_sxm/sglang/0.5.12", root=FIXTURE)
    assert "moe_perf" not in {t.name for t in older.tables()}


def test_records_carry_provenance_and_microseconds(imported):
    moe = next(t for t in imported.tables if t.name == "moe_perf")
    frame = moe.frame()
    row = frame[(frame.moe_dtype == "bfloat16") & (frame.moe_ep_size == 1)
                & (frame.hidden_size == 4096) & (frame.num_tokens == 64)].iloc[0]
    rec = next(r for r in imported.fit if r.kind == "experts" and r.hidden_size == 4096
               and r.extra["num_tokens"] == 64)
    assert rec.median_us == pytest.approx(float(row.latency) * MS_TO_US)   # AIC: milliseconds
    prov = rec.provenance.model_extra
    assert prov["source"] == "aiconfigurator" and prov["table"] == moe.rel
    assert prov["framework"] == "sglang" and prov["framework_version"] == "0.5.14"
    assert prov["table_sha256"] == moe.sha256 and prov["package"].startswith("aiconfigurator-core")
    assert rec.provenance.hardware == "H200" and rec.timing == "device"
    ll = next(r for r in imported.fit if r.mode == "low_latency")
    assert ll.provenance.model_extra["image"].startswith("lmsysorg/sglang:")
    ll_frame = next(t for t in imported.tables if t.name == "wideep_deepep_ll_perf").frame()
    first = ll_frame.iloc[0]
    got = next(r for r in imported.fit if r.kind == "dispatch" and r.mode == "low_latency"
               and r.hidden_size == first.hidden_size and r.num_tokens_per_rank == first.num_token
               and r.num_experts == first.num_experts)
    assert got.median_us == pytest.approx(float(first.dispatch_avg_t_us))  # already µs


def test_fit_and_pending_split_by_what_a_model_exists_for(imported):
    fit = Counter(r.kind for r in imported.fit)
    pending = Counter(r.kind for r in imported.pending)
    assert set(fit) == {"experts", "dense_mlp", "attention_decode", "attention_prefill",
                        "dispatch", "combine", "allreduce", "gemm", "mla_decode"}
    assert {"gemm", "quant_experts", "mla_decode", "allreduce", "experts"} <= set(pending)
    # SGLang's custom all-reduce: the CUDA-graph rows fit the all-reduce model, eager rows wait
    custom = [r for r in imported.fit if r.kind == "allreduce" and r.extra["kernel"] != "NCCL"]
    assert custom and all(r.timing == "device" for r in custom)
    assert all(r.timing == "eager" for r in imported.pending if r.kind == "allreduce")
    assert all(r.ep_size == 1 and r.weight_dtype == "bf16" for r in imported.fit if r.kind == "experts")
    # quantised experts: the fixture holds EP 8 rows only, judged (EP axis), not fitted
    assert all(r.weight_dtype == "fp8_block" and r.ep_size == 8
               for r in imported.pending if r.kind == "quant_experts")
    # GEMMs of the fit grid and MLA kernel rows on it are fitted; the fixture's module-less MLA
    # kernel rows carry their cache dtype and the heads one GPU holds
    assert {r.weight_dtype for r in imported.fit if r.kind == "gemm"} == {"bf16", "fp8_block"}
    assert all(r.extra["scope"] == "kernel" and r.kv_cache_dtype in ("bf16", "fp8_e4m3")
               and r.num_attention_heads == 128 for r in imported.fit if r.kind == "mla_decode")
    assert any("power-law" in n for n in imported.notes)         # left out, and said so


def test_rows_faster_than_the_weights_allow_are_left_out():
    """A MoE row shorter than streaming its experts' weights at the datasheet HBM rate cannot be
    the layout its table describes (AIC's h200_sxm DeepSeek-V3 fp8_block rows at EP 1)."""
    weights_us = 256 * 3 * 7168 * 2048 * (1 + 4 / 16384) / 4800 * 1e-3      # ~2350 µs
    assert faster_than_hbm("h200_sxm", 256, 7168, 2048, "fp8_block", 1399.0)
    assert not faster_than_hbm("h200_sxm", 256, 7168, 2048, "fp8_block", weights_us * 1.01)
    assert not faster_than_hbm("a100_sxm", 256, 7168, 2048, "fp8_block", 1.0)    # no zoo GPU
    assert faster_than_hbm("b300_sxm", 256, 7168, 2048, "fp8_block", 1.0)        # B300: 8 TB/s
    assert not faster_than_hbm("h200_sxm", 256, 7168, 2048, "int4_wo", 1.0)     # not priced


def test_balanced_counts_follow_the_collector_rule():
    for tokens, experts, top_k in ((1, 128, 8), (3, 128, 8), (64, 256, 8), (1000, 160, 6)):
        counts = balanced_counts(tokens, experts, top_k)
        assert counts.sum() == tokens * top_k
        stride = -(-experts // top_k)
        expect = np.zeros(experts)
        for t in range(tokens):
            for i in range(top_k):
                e = (t + i * stride) % experts if tokens >= stride else \
                    int(t * stride / tokens + i * stride) % experts
                expect[int(e)] += 1
        assert np.array_equal(counts, expect)
    assert balanced_counts(4096, 128, 8).max() == balanced_counts(4096, 128, 8).min()


def test_deepseek_rows_of_the_grouped_collector_take_its_grouped_counts():
    """DeepSeek-V3's shape in an SGLang 0.5.14 `moe_perf` went through grouped top-k (8 groups,
    4 kept) on the balanced logits: groups 0-3 win every tie, experts 0-3 get every token; the
    0.5.10 collector, and every other shape, route the balanced logits with plain top-k."""
    def table(version):
        return AicTable("gb200", "moe", "sglang", version, "moe_perf", Path("moe_perf.parquet"))
    counts, skew = collector_counts(table("0.5.14"), 16384, 7168, 2048, 256, 8)
    assert skew == {"kind": "balanced", "routing": "grouped", "num_expert_group": 8,
                    "topk_group": 4}
    assert counts.sum() == 16384 * 8 and counts[128:].sum() == 0
    assert np.array_equal(counts[:4], [16384] * 4)
    # rank 0's share of the slots at EP 2, 4, 8: the measured time over EP 1 follows it
    # (benchmarks/results/aic_grouped_routing.md)
    assert [counts[:256 // ep].sum() / counts.sum() for ep in (2, 4, 8)] == [1.0, 0.75, 0.625]
    # at 4 tokens (< the stride of 32) 20 experts are active, where plain top-k gives 32
    small, _ = collector_counts(table("0.5.14"), 4, 7168, 2048, 256, 8)
    assert (small > 0).sum() == 20 and small.sum() == 32
    for version, shape in (("0.5.10", (7168, 2048, 256, 8)), ("0.5.14", (7168, 2048, 384, 8)),
                           ("0.5.14", (6144, 2048, 256, 8))):
        plain, skew = collector_counts(table(version), 16384, *shape)
        assert skew == {"kind": "balanced"}
        assert np.array_equal(plain, balanced_counts(16384, shape[2], 8))


def test_deepep_counts_match_uniform_routing_draws():
    """The expected counts against draws as DeepEP's test makes them (top-k of random scores)."""
    rng = np.random.default_rng(0)
    n, tokens, experts, top_k, ep = 300, 64, 32, 4, 8
    draws = np.argsort(rng.random((n, ep, tokens, experts)), axis=-1)[..., :top_k]  # [n, src, t, k]
    dest = draws // (experts // ep)                                                 # rank of each
    own = np.arange(ep)[None, :, None, None]
    pair = _deepep_counts(tokens, experts, top_k, ep, pair=True)
    assert pair["send_tokens_per_rank"][0] == pytest.approx(
        (dest != own).sum(axis=(2, 3)).mean(), rel=0.02)
    hits = dest[..., None] == np.arange(ep)                                   # [n, src, t, k, ep]
    reached = hits.any(axis=3) & ~np.eye(ep, dtype=bool)[None, :, None, :]    # other ranks hit
    rank = _deepep_counts(tokens, experts, top_k, ep, pair=False)
    assert rank["send_tokens_per_rank"][0] == pytest.approx(reached.sum(axis=(2, 3)).mean(), rel=0.02)
    assert rank["send_tokens_per_rank"][0] == pytest.approx(
        tokens * (ep - 1) * (1 - comb(experts - experts // ep, top_k) / comb(experts, top_k)))


def test_calibrate_on_aic_tags_every_component_with_its_tables(tmp_path):
    out = tmp_path / "aic.jsonl.gz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ROOT_ENV, str(FIXTURE))
        cal = calibrate(["aic:h200_sxm/sglang"], Holdout.parse("none"), records_out=out)
    profile = cal.profile
    assert profile.hardware == "H200"
    expected = {"local/experts/graph", "any/experts/graph", "any/dense/graph",
                "any/attention_decode/graph", "any/attention_prefill/graph",
                "deepep/dispatch/graph/low_latency/fp8", "deepep/combine/graph/low_latency",
                "deepep/dispatch/normal/fp8", "deepep/combine/normal",
                "any/allreduce/graph/nccl", "any/allreduce/graph/oneshot",
                "any/allreduce/graph/twoshot", "any/gemm_bf16/graph", "any/gemm_fp8_block/graph",
                *{f"any/mla_decode_{kv_kind(r.kv_cache_dtype)}/graph" for r in import_source(
                    parse_source("aic:h200_sxm/sglang", root=FIXTURE)).fit
                  if r.kind == "mla_decode"},
                # the fused Triton MoE's default large tile, where a fit row runs it
                *{"local/experts/graph/default_tile" for r in import_source(
                    parse_source("aic:h200_sxm/sglang", root=FIXTURE)).fit
                  if record_default_tile(r)}}
    # nccl-tests' all-gathers are the all-reduce model's NCCL ring (one pass): no `none/allgather`
    assert expected == set(profile.components)
    for key, comp in profile.components.items():
        assert comp.source == "fit" and comp.data_source == "aiconfigurator"
        assert comp.tables and all(t.startswith("h200_sxm/") for t in comp.tables)
    # the new kernels' throughputs are fractions of the datasheet, each <= 1
    for key in [k for k in profile.components if "gemm_" in k or "mla_" in k]:
        params = profile.components[key].params
        assert 0 < params.get("hbm_frac", 1) <= 1 and 0 < params.get("tensor_frac", 1) <= 1
    assert [r.path for r in profile.provenance.records] == [str(out)]
    aic = profile.provenance.model_extra["aic"][0]
    assert aic["source"] == "aic:h200_sxm/sglang/0.5.14" and "Apache-2.0" in aic["license"]
    assert out.is_file() and record_paths(parse_source("aic:h200_sxm", root=FIXTURE), out)[1].is_file()


def test_fit_inputs_are_op_tables_only(tmp_path):
    """No fit reads an end-to-end measurement: the importer's inputs are op tables under the
    package's systems/data, and the silicon sample or epsim's published results are refused."""
    imported = import_source(parse_source("aic:h200_sxm", root=FIXTURE))
    for table in imported.tables:
        assert table.path.suffix == ".parquet" and "/data/h200_sxm/" in table.path.as_posix()
    read = {r.provenance.model_extra["table"] for r in imported.fit + imported.pending}
    assert read == {t.rel for t in imported.tables}
    sample = tmp_path / "silicon_sample.csv"
    sample.write_text("id,silicon_ttft_ms\n")
    published = Path(__file__).resolve().parents[3] / "epsim" / "data" / "published" / "results.yaml"
    aic_sample = FIXTURE.parent / "silicon_sample.csv"            # where the package keeps it
    for path in (sample, published, aic_sample):
        with pytest.raises(RecordError, match="not a calibration input: .*end-to-end results "
                                              "are validation only"):
            check_calibration_input(path)
    for path in (sample, published):
        with pytest.raises(RecordError, match="not a calibration input"):
            load_records([path])
    for table in imported.tables:
        assert check_calibration_input(table.path) == table.path


def test_cli_aic_records(tmp_path, fixture_env, capsys):
    out = tmp_path / "p.json"
    rc = main(["calibrate", "--records", "aic:h200_sxm/sglang", "--holdout", "none",
               "--records-out", str(tmp_path / "r.jsonl.gz"), "--out", str(out)])
    assert rc == 0 and json.loads(out.read_text())["hardware"] == "H200"
    assert "source: aiconfigurator" in capsys.readouterr().out
    with gzip.open(tmp_path / "r.jsonl.gz", "rt") as fh:
        assert json.loads(fh.readline())["schema"] == "epsim.record/4"


def test_cli_bad_aic_source_exits_2_with_one_line(tmp_path, fixture_env, capsys):
    rc = main(["calibrate", "--records", "aic:b300", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "aic system ('b300') must be one of ['h200_sxm']" in err


def test_cli_package_absent_exits_2(tmp_path, monkeypatch, capsys):
    import importlib.util
    monkeypatch.delenv(ROOT_ENV, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    rc = main(["calibrate", "--records", "aic:h200_sxm", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "aiconfigurator-core is not installed; pip install 'epsim[aic]'" in err


def test_shipped_aic_profiles_name_their_source():
    """Every shipped aic_*.json component says where its data came from (no package needed)."""
    from epsim.profile import Profile
    paths = sorted(PROFILES.glob("aic_*.json"))
    assert {p.stem for p in paths} == {"aic_h100", "aic_h200", "aic_b200", "aic_b300", "aic_gb200",
                                       "aic_gb300"}
    assert "Apache License, Version 2.0" in " ".join((PROFILES / "NOTICE").read_text().split())
    for path in paths:
        profile = Profile.load(path)
        assert profile.hardware == zoo_gpu(aic_system(profile.hardware))
        for key, comp in profile.components.items():
            assert comp.data_source == "aiconfigurator" and comp.tables
            assert all(t.startswith(aic_system(profile.hardware) + "/") for t in comp.tables)
        # the parts quantised and MLA deployments need, on every system
        assert {"any/experts_fp8_block/graph", "any/gemm_fp8_block/graph",
                "any/mla_decode_bf16/graph", "any/mla_bmm_fp8/graph"} <= set(profile.components)
        for table in profile.provenance.model_extra["aic"][0]["tables"]:
            assert table["path"].startswith(aic_system(profile.hardware) + "/")


@needs_package
def test_installed_package_resolves_every_system(monkeypatch):
    for system in AIC_TO_ZOO:
        source = parse_source(f"aic:{system}/sglang")
        names = {t.name for t in source.tables()}
        assert {"moe_perf", "gemm_perf", "wideep_deepep_ll_perf", "nccl_perf"} <= names
    # a system the zoo had no GPU of (as B300 was) is surveyed, never fitted
    monkeypatch.setitem(AIC_TO_ZOO, "b300_sxm", "")
    with pytest.raises(RecordError, match="has no GPU in epsim's hardware zoo"):
        import_source(parse_source("aic:b300_sxm"))


@needs_package
def test_shipped_profiles_match_the_installed_tables():
    """A shipped profile's tables are the installed package's, byte for byte, when the package
    version is the one it was built from."""
    from epsim.calibrate.aic_tables import package_root, package_version
    from epsim.profile import Profile
    for path in sorted(PROFILES.glob("aic_*.json")):
        aic = Profile.load(path).provenance.model_extra["aic"][0]
        if aic["package"] != f"aiconfigurator-core {package_version()}":
            pytest.skip(f"{path.name} was built from {aic['package']}")
        for table in aic["tables"]:
            import hashlib
            data = (package_root() / "data" / table["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == table["sha256"]


def test_older_versions_fill_the_node_counts_the_newest_lacks(tmp_path):
    """DeepEP's low-latency table of an older version contributes the node counts the newest
    lacks, those rows alone (AIC's shape-level backward fill); the newest's rows stay whole."""
    import shutil

    import pandas as pd
    root = tmp_path / "systems"
    shutil.copytree(FIXTURE, root)
    comm = root / "data" / "h200_sxm" / "comm" / "sglang"
    newest = pd.read_parquet(comm / "0.5.12" / "wideep_deepep_ll_perf.parquet")
    (comm / "0.5.6.post2").mkdir(exist_ok=True)
    older = pd.concat([newest.assign(node_num=n) for n in (1, 2)], ignore_index=True)
    older.to_parquet(comm / "0.5.6.post2" / "wideep_deepep_ll_perf.parquet")
    tables = [t for t in parse_source("aic:h200_sxm", root=root).tables()
              if t.name == "wideep_deepep_ll_perf"]
    assert [(t.version, t.fill_nodes) for t in tables] == [("0.5.12", ()), ("0.5.6.post2", (2,))]
    assert len(tables[0].frame()) == len(newest)
    assert set(tables[1].frame().node_num) == {2} and len(tables[1].frame()) == len(newest)
    records = import_source(parse_source("aic:h200_sxm", root=root), tables).fit
    assert {r.ep_size for r in records} == {8, 16}


def test_version_parts_are_fitted_on_their_own_collection_alone(fixture_env, tmp_path, monkeypatch):
    from epsim.calibrate.aic_versions import build_part, part_tables, part_versions
    from epsim.cost.allreduce import allreduce_us
    monkeypatch.chdir(tmp_path)                       # the part's records go to runs/aic/
    assert part_versions("h200_sxm") == ["0.5.6.post2", "0.5.9", "0.5.10"]
    assert part_tables("h200_sxm", "0.5.14") == []    # the profile's own version: no part
    # H200's 0.5.6.post2 all-reduce table holds TRT-LLM's kernel: no fit record, no part
    assert build_part("h200_sxm", "0.5.6.post2") is None
    part = build_part("h200_sxm", "0.5.9")
    assert part.name == "aic_h200_sglang_0.5.9" and part.hardware == "H200"
    assert "any/allreduce/graph/oneshot" in part.components
    assert set(part.components) <= {"any/allreduce/graph/oneshot", "any/allreduce/graph/twoshot"}
    table = "h200_sxm/comm/sglang/0.5.9/custom_allreduce_perf.parquet"
    assert all(c.tables == [table] and c.source == "fit" for c in part.components.values())
    assert [t["path"] for t in part.provenance.aic[0]["tables"]] == [table]
    assert (tmp_path / "runs" / "aic" / "h200_sxm_sglang_0.5.9_part.jsonl.gz").is_file()
    # SGLang's older custom all-reduce is the slower one at a decode step's size (14 KB on 8)
    shipped = load_profile("aic_h200")
    params = {k.split("/")[-1]: c.params for k, c in shipped.components.items()
              if k.startswith("any/allreduce/graph/")}
    older = {**params, "oneshot": part.components["any/allreduce/graph/oneshot"].params}
    assert allreduce_us(14336, 8, 1, older) > 1.2 * allreduce_us(14336, 8, 1, params)


def test_blackwell_quantised_rows_at_ep_on_the_grid_are_fitted():
    """AIC's collector hands EP rank 0 the group's `num_tokens` with `E / ep` local experts
    (`EP_FIT_FORMATS`): NVFP4 and FP8-block rows of FlashInfer's TRT-LLM MoE at EP 1, 4, 16 ...
    are fitted, EP 2 (off the grid) stays pending, judged."""
    import pandas as pd
    from types import SimpleNamespace

    from epsim.calibrate.aic_records import Imported, moe_records
    from epsim.records import Provenance

    rows = [dict(moe_dtype=fmt, num_tokens=256, hidden_size=4096, inter_size=1536, topk=8,
                 num_experts=128, moe_tp_size=1, moe_ep_size=ep, distribution="balanced",
                 latency=1.0, kernel_source="sglang_flashinfer_trtllm_moe")
            for fmt, ep in (("nvfp4", 1), ("nvfp4", 2), ("nvfp4", 4), ("nvfp4", 16),
                            ("fp8_block", 1), ("fp8_block", 2), ("fp8_block", 4))]
    table = SimpleNamespace(system="gb200", framework="sglang", version="0.5.14", rel="moe")
    out = Imported(source=None)
    moe_records(table, pd.DataFrame(rows), Provenance(device="GB200", hardware="GB200"), out)
    assert sorted((r.weight_dtype, r.ep_size) for r in out.fit) == [
        ("fp8_block", 1), ("fp8_block", 4), ("nvfp4", 1), ("nvfp4", 4), ("nvfp4", 16)]
    assert sorted((r.weight_dtype, r.ep_size) for r in out.pending) == [
        ("fp8_block", 2), ("nvfp4", 2)]
    ep4 = next(r for r in out.fit if r.ep_size == 4 and r.weight_dtype == "nvfp4")
    assert ep4.extra["num_tokens"] == 256 and ep4.num_local_experts == 32
    assert sum(ep4.local_expert_tokens[0]) == 256 * 8 / 4       # rank 0's share of the slots
