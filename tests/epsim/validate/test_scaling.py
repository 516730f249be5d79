"""Scaling predictions (`epsim.validate.scaling`, command line benchmarks/scaling_predict.py): the
bench's counts redrawn in numpy (checked against the shipped 2x H200 records), predictions equal
to `predict_record` on measured records, the committed prediction file, and `--compare`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from epsim.calibrate.grid import GPU_MODELS, GPU_TOKENS
from epsim.calibrate.inputs import default_record_paths
from epsim.cost.record import predict_record
from epsim.errors import RecordError, SpecError
from epsim.profile import Profile, default_profile_path
from epsim.records import read_records, read_text
from epsim.validate import scaling as sc

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from benchmarks import scaling_predict as sp  # noqa: E402  (a script folder, not a package)

HOTSET = {"kind": "hotset", "num_hot": 16, "hot_frac": 0.5, "shuffle_per_layer": False}


@pytest.fixture(scope="module")
def shipped_dispatch() -> list:
    """The shipped EP-2 dispatch records of the grid's backends and skews (uniform, hot set)."""
    path = next(p for p in default_record_paths() if p.name == "bench.jsonl.gz")
    return [r for r in read_records(path) if r.kind == "dispatch"
            and r.backend in ("torch", "mooncake") and r.skew["kind"] in ("uniform", "hotset")]


def test_counts_equal_the_shipped_gpu_records_for_both_dedups(shipped_dispatch):
    """The numpy redraw gives exactly the counts the 2x H200 bench recorded: torch copies per
    (token, rank), mooncake per (token, expert), pairs per local expert."""
    checked = {"torch": 0, "mooncake": 0}
    for r in shipped_dispatch[::3]:
        shape = sc.Shape(r.model, r.hidden_size, r.moe_intermediate_size, r.num_experts, r.top_k)
        c = sc.bench_counts(r.skew, shape, r.ep_size, r.num_tokens_per_rank, r.backend, r.seed)
        assert c.send_tokens_per_rank == r.send_tokens_per_rank, r
        assert c.recv_tokens_per_rank == r.recv_tokens_per_rank, r
        assert c.expert_tokens_per_rank == r.expert_tokens_per_rank, r
        assert c.local_expert_tokens == r.local_expert_tokens, r
        checked[r.backend] += 1
    assert checked["torch"] >= 20 and checked["mooncake"] >= 40


def test_prediction_equals_predict_record_on_the_measured_record(shipped_dispatch):
    """A predicted line holds what `predict_record` gives for the record the bench then wrote."""
    profile = Profile.load(default_profile_path())
    measured = {(r.backend, r.dispatch_dtype, r.num_tokens_per_rank, r.skew["kind"], r.model): r
                for r in shipped_dispatch}
    record = measured[("mooncake", "fp8", 256, "hotset", "Qwen3-235B-A22B")]
    shape = sc.zoo_shape("Qwen3-235B-A22B")
    counts = sc.bench_counts(HOTSET, shape, 2, 256, "mooncake")
    for kind in sc.KINDS:
        mine = sc.point_record(shape, "mooncake", "fp8", HOTSET, 256, 2, kind, counts, "H200")
        theirs = record.model_copy(update={"kind": kind})
        assert predict_record(mine, profile) == pytest.approx(predict_record(theirs, profile), rel=1e-12)


def test_count_invariants_on_the_tiny_shape(tiny):
    shape = sc.Shape("tiny", tiny.hidden_size, tiny.moe_intermediate_size, tiny.num_experts, tiny.top_k)
    hot = {"kind": "hotset", "num_hot": 2, "hot_frac": 0.5, "shuffle_per_layer": False}
    for skew in ({"kind": "uniform"}, hot):
        pairs = sc.bench_counts(skew, shape, tiny.num_ranks, 64, "mooncake")
        dedup = sc.bench_counts(skew, shape, tiny.num_ranks, 64, "torch")
        # every link copy is sent once and received once; pairs are conserved
        for c in (pairs, dedup):
            assert sum(c.send_tokens_per_rank) == sum(c.recv_tokens_per_rank)
            assert sum(c.expert_tokens_per_rank) == tiny.num_ranks * 64 * tiny.top_k
        assert np.all(np.array(dedup.send_tokens_per_rank) <= pairs.send_tokens_per_rank)
        assert dedup.local_expert_tokens == pairs.local_expert_tokens
    hot_counts = sc.bench_counts(hot, shape, tiny.num_ranks, 64, "torch")
    assert int(np.argmax(hot_counts.expert_tokens_per_rank)) == 0      # the hot set lives on rank 0


@pytest.mark.parametrize("call, message", [
    (lambda s: sc.bench_counts({"kind": "uniform"}, s, 3, 4, "torch"),
     r"ep_size \(3\) must be >= 2 and divide num_experts \(8\)"),
    (lambda s: sc.bench_counts({"kind": "uniform"}, s, 4, 4, "none"),
     r"backend \('none'\) must be 'torch' or 'mooncake'"),
    (lambda s: sc.read_predictions(Path("/nonexistent/p.jsonl")),
     r"predictions \(/nonexistent/p.jsonl\) must be a file"),
])
def test_bad_input_names_the_value(tiny, call, message):
    shape = sc.Shape("tiny", tiny.hidden_size, tiny.moe_intermediate_size, tiny.num_experts, tiny.top_k)
    with pytest.raises((SpecError, RecordError), match=message):
        call(shape)


def test_cli_errors_are_one_line(capsys):
    assert sp.main(["--tokens", "1,x", "--out", "/tmp/never.jsonl"]) == 2
    assert "--tokens ('1,x') must be a comma list of integers" in capsys.readouterr().err
    assert sp.main(["--models", "Qwen3-8B", "--out", "/tmp/never.jsonl"]) == 2
    assert "--models (['Qwen3-8B']) must be among" in capsys.readouterr().err


def test_committed_predictions_cover_the_grid_and_say_they_extrapolate():
    preds = [json.loads(line) for line in sp.RESULTS.read_text().splitlines()]
    keys = {sc.key_of(p) for p in preds}
    assert len(keys) == len(preds) == (len(GPU_MODELS) * len(sp.CASES) * len(sp.SKEWS)
                                      * len(GPU_TOKENS) * len(sp.EP_SIZES) * len(sc.KINDS))
    for p in preds:
        assert p["extrapolated_ep"] == (p["ep_size"] != 2) and p["predicted_us"] > 0
        assert len(p["counts"]["expert_tokens_per_rank"]) == p["ep_size"]
        assert ("local_expert_tokens" in p["counts"]) == (p["kind"] == "dispatch")
    shipped = Profile.load(default_profile_path())
    if preds[0]["profile"]["sha256"] != sc.profile_provenance(default_profile_path())["profile"]["sha256"]:
        pytest.skip("the shipped profile was refitted after the predictions were committed")
    assert preds[0]["profile"]["name"] == shipped.name
    # a slice regenerates exactly from the recorded profile
    again = sc.predict_grid(default_profile_path(), [sc.zoo_shape("Qwen3-235B-A22B")],
                            [("mooncake", "fp8")], [HOTSET], [1, 4096], [8])
    by_key = {sc.key_of(p): p for p in preds}
    for p in again:
        old = by_key[sc.key_of(p)]
        assert (old["predicted_us"], old["counts"]) == (p["predicted_us"], p["counts"])


def test_compare_on_the_shipped_ep2_records_and_a_tampered_copy(tmp_path, capsys):
    """`--compare` matches measured EP-2 records to the EP-2 reference predictions with equal
    counts; a record whose counts were changed is reported and makes the exit code 1."""
    preds = tmp_path / "p.jsonl"
    sp.write_predictions(sc.predict_grid(default_profile_path(), [sc.zoo_shape("Qwen3-30B-A3B")],
                                         [("torch", "bf16")], list(sp.SKEWS), [16, 256], [2]), preds)
    source = next(p for p in default_record_paths() if p.name == "bench.jsonl.gz")
    lines = [line for line in read_text(source).splitlines()
             if '"backend":"torch"' in line and '"model":"Qwen3-30B-A3B"' in line
             and ('"num_tokens_per_rank":16,' in line or '"num_tokens_per_rank":256,' in line)]
    measured = tmp_path / "bench.jsonl"
    measured.write_text("\n".join(lines) + "\n")
    assert sp.main(["--compare", str(measured), "--predictions", str(preds)]) == 0
    out = capsys.readouterr().out
    assert "| 2 | torch | bf16 | moe_layer | 4 |" in out          # 2 tokens x 2 skews, passes merged
    assert "counts equal to the predicted ones: 16/16 records" in out
    assert "with no record: 0" in out and "measured records with no prediction: 8" in out  # zipf

    tampered = json.loads(lines[0])
    tampered["recv_tokens_per_rank"][0] += 1
    measured.write_text(json.dumps(tampered) + "\n")
    assert sp.main(["--compare", str(measured), "--predictions", str(preds)]) == 1
    assert "counts equal to the predicted ones: 0/1 records (first differing:" in capsys.readouterr().out

    # another shape, and the launched-ahead (`graph`) timing of a predicted eager point
    measured.write_text(lines[0].replace('"model":"Qwen3-30B-A3B"', '"model":"other"') + "\n"
                        + lines[0].replace('"mode":""', '"mode":"graph"') + "\n")
    assert sp.main(["--compare", str(measured), "--predictions", str(preds)]) == 2
    assert "match none of the predictions" in capsys.readouterr().err
