"""The composition axis: whole layers measured on one GPU against the simulator's layer, priced as
`epsim simulate` prices one layer of a decode step; stacks against N x one layer; the command and
the documented tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from epsim.calibrate import default_record_paths
from epsim.cli import main
from epsim.cost import BatchCounts, CostModel, build_tables, contiguous_placement
from epsim.eplb import Placement
from epsim.profile import load_profile
from epsim.records import read_records, write_records
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.validate.composition import compose_files, default_composition_paths, simulator_model
from epsim.validate.composition_table import DOC_MARKERS, mape_pct, markdown
from epsim.zoo import get_model

SHIPPED = default_composition_paths()
POINTS = ((8, 8192), (64, 512))                    # the two points, Qwen3-30B-A3B


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A small set cut from the shipped records: Qwen3-30B-A3B at EP 1 and 8, the issue's two
    points, their parts and stacks, device and eager time."""
    if not SHIPPED:
        pytest.skip("no shipped whole-layer records")
    keep = []
    for r in read_records(SHIPPED[0]):
        if r.timing == "host" or r.model not in ("Qwen3-30B-A3B", "Qwen3-30B-A3B/shared_expert"):
            continue
        b = r.num_seqs or r.num_tokens_per_rank
        if r.ep_size in (1, 8) and b in (8, 64) and r.context_len in (0, *dict(POINTS).values()):
            if r.context_len and (b, r.context_len) not in POINTS:
                continue
            keep.append(r)
    path = tmp_path_factory.mktemp("composition") / "small.jsonl"
    write_records(keep, path, append=False)
    return path


@pytest.fixture(scope="module")
def comp(small):
    return compose_files([small], load_profile())


def test_the_small_set_holds_layers_stacks_and_parts(comp):
    assert sorted((r.ep_size, r.num_seqs, r.context_len) for r in comp.layers) == [
        (1, 8, 8192), (1, 64, 512), (8, 8, 8192), (8, 64, 512)]
    assert sorted((r.ep_size, r.num_layers, r.num_seqs) for r in comp.stacks) == [
        (ep, n, b) for ep in (1, 8) for n in (4, 8) for b in (8, 64)]
    for r in comp.layers:        # every part of the point measured in the same run
        assert all(r.parts_us[p] for p in ("attention_block", "attention_kernel", "moe_block",
                                           "experts_module", "experts_kernel", "router",
                                           "block_ops"))
        assert r.parts_us["shared_expert"] is None                     # Qwen3: none
    assert comp.backends == ("none", "torch", "deepep", "mooncake")


@pytest.mark.filterwarnings("ignore::UserWarning")     # fits outside their EP range: judged here
@pytest.mark.parametrize("backend", ["none", "mooncake"])
def test_a_layer_is_priced_as_a_decode_step_prices_it(comp, small, backend):
    """The zoo's model in a one-GPU (or EP 8) deployment, one decode step of the point through
    `CostModel.step`: its layer (less dispatch and combine at EP 8), plus the per-layer
    overhead, is the composition's price."""
    profile = load_profile()
    records = {(r.ep_size, r.num_seqs, r.context_len): r for r in read_records(small)
               if r.kind == "decoder_layer"}
    for row in comp.layers:
        record = records[(row.ep_size, row.num_seqs, row.context_len)]
        ep = row.ep_size
        model = get_model("Qwen3-30B-A3B")
        # the zoo's layer (the dense FFN width, layers and vocabulary price no MoE layer)
        skip = {"name", "num_layers", "vocab_size", "intermediate_size"}
        assert simulator_model(record).model_dump(exclude=skip) == model.model_dump(exclude=skip)
        cost = CostModel(model, ClusterSpec(gpu="H200"), DeploymentSpec(
            ep_size=ep, moe_a2a_backend=backend, dispatch_dtype="bf16"), profile)
        tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, ep), 128, ep, 8))
        step = cost.step(BatchCounts.uniform_decode(ep, row.num_seqs, row.context_len),
                         np.asarray(record.local_expert_tokens).reshape(1, -1), tables)
        comm = step.dispatch_us[0] + step.combine_us[0]
        expected = step.layer_us[0] - (comm if ep > 1 else 0.0) + 3.0   # per_layer_us, datasheet
        priced = row.priced[backend]
        assert priced.layer_us == pytest.approx(expected, rel=1e-12)
        assert priced.layer_us == pytest.approx(
            priced.attention_us + priced.experts_us + priced.block_ops_us + priced.shared_us
            + (priced.comm_us if ep == 1 else 0.0) + priced.sync_us + priced.per_layer_us)
        if backend == "mooncake":               # communication is priced, and left out at EP 8
            assert priced.comm_us > 0


def test_stacks_are_judged_against_n_times_one_layer(comp):
    layers = {(r.ep_size, r.num_seqs, r.context_len): r for r in comp.layers}
    for s in comp.stacks:
        one = layers[(s.ep_size, s.num_seqs, s.context_len)]
        assert s.one_us == one.measured_us
        assert s.priced_us == {b: s.num_layers * p.layer_us for b, p in one.priced.items()}
        assert 0.9 < s.measured_us / (s.num_layers * s.one_us) < 1.1    # the GPU composes


def test_tables_hold_the_mape_of_each_backend(comp):
    text = markdown(comp)
    ep1 = [r for r in comp.layers if r.ep_size == 1]
    mape = mape_pct([r.priced["none"].layer_us for r in ep1], [r.measured_us for r in ep1])
    row = next(line for line in text.splitlines() if line.startswith("| Qwen3-30B-A3B | 1 |"))
    cells = [c.strip() for c in row.split("|")]        # shape, EP, points, measured, none, ...
    assert cells[3] == "2" and cells[5].startswith(f"{mape:.1f} (")
    assert "**Stack**" in text and "**Parts, backend `none`**" in text
    assert "**The issue's points**" in text and "| 8 | 8192 |" in text


def test_command_writes_the_tables_and_names_bad_records(small, tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["validate", "--composition", "--records", str(small), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "measured     1x NVIDIA H200: 4 layers, 8 stacks (device time)" in printed
    assert (out / "composition.md").read_text().startswith("- measured: 1x NVIDIA H200")
    header = (out / "composition.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["model", "ep_size", "num_seqs", "context_len", "measured_us"]
    assert main(["validate", "--composition", "--records", str(small), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["layers"]) == 4 and set(data["layers"][0]["priced"]) == set(data["backends"])
    parts_only = tmp_path / "parts.jsonl"
    write_records([r for r in read_records(small) if r.kind != "decoder_layer"], parts_only,
                  append=False)
    assert main(["validate", "--composition", "--records", str(parts_only)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must hold decoder_layer records timed 'device'" in err[0]


def test_whole_layer_records_are_never_fitted():
    """Validation data: the calibration's default records do not include them."""
    assert SHIPPED and all("h200_layer" not in p.parts for p in default_record_paths())


def test_shipped_records_reproduce_the_documented_tables():
    """docs/validation.md's composition section is what `epsim validate --composition` prints
    on the shipped whole-layer records and profile."""
    doc = Path(__file__).resolve().parents[3] / "docs" / "validation.md"
    text = doc.read_text()
    section = text[text.index(DOC_MARKERS[0]) + len(DOC_MARKERS[0]):text.index(DOC_MARKERS[1])]
    cwd = os.getcwd()
    os.chdir(doc.parents[1])                  # record paths print relative to the repo root
    try:
        expected = markdown(compose_files(SHIPPED, load_profile()))
    finally:
        os.chdir(cwd)
    assert section == "\n\n" + expected + "\n"


def test_eager_records_are_priced_as_an_eager_step(small, comp):
    """`--timing eager`: the eager timings of the same run against eager steps (device time
    plus the fitted host overhead), not against CUDA-graph prices."""
    eager = compose_files([small], load_profile(), timing="eager")
    assert len(eager.layers) == len(comp.layers) and eager.timing == "eager"
    for e, d in zip(eager.layers, comp.layers):
        assert e.measured_us > d.measured_us                       # the host's gaps added
        assert e.priced["mooncake"].layer_us > d.priced["mooncake"].layer_us
    assert "eager time" in markdown(eager).splitlines()[0]
