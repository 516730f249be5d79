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
    for r in (r for path in SHIPPED for r in read_records(path)):
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
    the public layer cost (`CostModel.layer`, `CostModel.step`'s own arithmetic): at EP 1 what
    the step charges, at EP 8 the rank's own work (no dispatch, combine, backend layout or
    sync), plus the per-layer overhead, is the composition's price -- with the attention ops of
    transformers' block, the one the bench times (`epsim.cost.attention_ops`)."""
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
            ep_size=ep, moe_a2a_backend=backend, dispatch_dtype="bf16"), profile,
            engine="transformers")                 # the bench's block, not SGLang's
        tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, ep), 128, ep, 8))
        batch = BatchCounts.uniform_decode(ep, row.num_seqs, row.context_len)
        loads = np.asarray(record.local_expert_tokens).reshape(1, -1)
        step = cost.step(batch, loads, tables)
        layer = cost.layer(batch, loads, tables)
        assert layer.layer_us[0] == pytest.approx(step.layer_us[0], rel=1e-12)
        charged = sum(p.us for p in layer.parts if p.charged)
        assert charged[0] == pytest.approx(step.layer_us[0], rel=1e-9)  # the parts add up
        per_layer = profile.components["any/step_overhead"].params["per_layer_us"] \
            if "any/step_overhead" in profile.components else 3.0       # datasheet
        priced = row.priced[backend]
        if ep == 1:            # nothing crosses a GPU: no dispatch, combine or sync charged
            assert priced.comm_us == priced.sync_us == priced.layout_us == 0.0
            assert priced.layer_us == pytest.approx(step.layer_us[0] + per_layer, rel=1e-12)
        else:
            assert priced.layer_us == pytest.approx(layer.compute_us[0] + per_layer, rel=1e-12)
            assert priced.comm_us > 0                  # priced, and left out of the rank's work
        assert priced.components["experts"] == "any/experts/graph"
        assert priced.components["attention_ops"] == "any/attention_ops/graph"


def test_every_backend_prices_a_rank_alike(comp):
    """One cost path per stage: at EP 1 and at virtual EP n, the layer a rank runs is priced
    the same whatever the backend's name."""
    for row in comp.layers:
        first = row.priced[comp.backends[0]].layer_us
        assert all(p.layer_us == pytest.approx(first, rel=1e-9) for p in row.priced.values())


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
    assert "**Stack**" in text and "**Parts, every backend**" in text
    assert "**Against the baselines**" in text and "constant MAPE %" in text
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
    """Validation data: the calibration's default records hold the layer run's op-level parts
    and none of its whole layers or stacks (they ship in their own file)."""
    assert SHIPPED and all("h200_layer" not in p.parts for p in default_record_paths())
    parts = [p for p in default_record_paths() if p.name == "layer_parts_run1.jsonl.gz"]
    assert parts and parts[0] in SHIPPED
    assert {r.kind for r in read_records(parts[0])}.isdisjoint({"decoder_layer", "layer_stack"})
    wholes = [p for p in SHIPPED if "h200_layer" in p.parts]
    assert {r.kind for p in wholes for r in read_records(p)} == {"decoder_layer", "layer_stack"}


def test_fitting_ignores_whole_layers_even_when_given_them(small, tmp_path):
    """Give the fitter the layer run's wholes beside its parts: the profile is the same as
    without them (`epsim.calibrate.layer_parts.judged_only`)."""
    from epsim.calibrate import calibrate
    records = read_records(small)
    parts = tmp_path / "parts.jsonl"
    write_records([r for r in records if r.kind not in ("decoder_layer", "layer_stack")], parts,
                  append=False)
    with_wholes = calibrate([small]).profile.components
    without = calibrate([parts]).profile.components
    assert with_wholes.keys() == without.keys() and "any/attention_ops/graph" in without
    for key, comp in without.items():
        assert with_wholes[key].params == comp.params, key


def test_composition_meets_its_target_and_beats_both_baselines():
    """The shipped whole layers and stacks against the shipped profile: <= 10 % MAPE at EP 1
    and at virtual EP 2-16 for every backend, below both baselines."""
    comp = compose_files(SHIPPED, load_profile())
    stacks = [r for r in comp.stacks if r.one_us]
    best = {what: min(mape_pct([b[i] for b in base], [r.measured_us for r in rows])
                      for i in (0, 1))
            for what, rows, base in (("layer", comp.layers, comp.layer_baselines),
                                     ("stack", comp.stacks, comp.stack_baselines))}
    for b in comp.backends:
        for rows in ([r for r in comp.layers if r.ep_size == 1],
                     [r for r in comp.layers if r.ep_size > 1]):
            assert mape_pct([r.priced[b].layer_us for r in rows], [r.measured_us for r in rows]) <= 10.0
        layer = mape_pct([r.priced[b].layer_us for r in comp.layers],
                         [r.measured_us for r in comp.layers])
        stack = mape_pct([r.priced_us[b] for r in stacks], [r.measured_us for r in stacks])
        assert stack <= 10.0 and layer < best["layer"] and stack < best["stack"]
    # the attention block's ops refitted on one shape judge the other two as well
    held = comp.held_out_layers
    assert comp.held_out.fit_shape == "Qwen3-30B-A3B" and held
    assert mape_pct([r.priced["none"].layer_us for r in held], [r.measured_us for r in held]) <= 10.0


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
