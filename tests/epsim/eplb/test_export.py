"""`epsim eplb --out`: the placement and loads in the files SGLang's `--init-expert-location`
reads, loaded the way SGLang loads them (`sglang/srt/eplb/expert_location.py`,
`compute_initial_expert_location_metadata`: `json.loads` of a `.json` path, then
`init_by_mapping(server_args, model_config, **data)` for a placement or `init_by_eplb` on
`data["logical_count"]`), with the shipped sample loads file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from epsim.eplb import read_loads
from epsim.eplb.deepseek import rebalance_experts

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "scenarios" / "loads" / "qwen3_30b_zipf0.8.json"
ARGS = ["--replicas", "144", "--gpus", "16", "--nodes", "2", "--model", "Qwen3-30B-A3B"]


def _sglang_data(init_expert_location: str) -> dict:
    """SGLang's reading of `--init-expert-location` (the `.pt` branch aside)."""
    data = init_expert_location
    if data.endswith(".json"):
        return json.loads(Path(data).read_text())
    return json.loads(data)


def _init_by_mapping(server_args: dict, model_config: dict, physical_to_logical_map):
    """SGLang's `ExpertLocationMetadata.init_by_mapping` up to what it derives: the tensor, the
    size checks of `_init_common`, `_compute_logical_to_all_physical_map` (slots of each expert
    in slot order, padded with -1) and `logical_to_all_physical_map_num_valid`. A key other than
    `physical_to_logical_map` is a TypeError here as there."""
    p2l = torch.tensor(physical_to_logical_map)
    num_logical = model_config["num_logical_experts"]
    num_physical = num_logical + server_args["ep_num_redundant_experts"]
    assert num_physical % server_args["ep_size"] == 0
    num_layers = p2l.shape[0]
    assert p2l.shape == (model_config["num_layers"], num_physical)
    nested = [[[] for _ in range(num_logical)] for _ in range(num_layers)]
    for layer in range(num_layers):
        for slot in range(num_physical):
            nested[layer][p2l[layer, slot].item()].append(slot)
    width = max(len(inner) for outer in nested for inner in outer)
    l2all = torch.tensor([[inner + [-1] * (width - len(inner)) for inner in outer] for outer in nested])
    return p2l, l2all, torch.count_nonzero(l2all != -1, dim=-1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("eplb")
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "eplb", str(SAMPLE), *ARGS, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_sample_loads_ship_and_read_back():
    loads = read_loads(SAMPLE)
    assert loads.shape == (48, 128) and loads.sum() > 0
    assert (loads == np.round(loads)).all()


def test_sglang_loads_the_placement_as_epsim_computed_it(exported):
    out, stdout = exported
    ours = json.loads((out / "placement.json").read_text())
    data = _sglang_data(str(out / "expert_location.json"))
    server_args = {"ep_size": 16, "ep_num_redundant_experts": 16}
    model_config = {"num_layers": 48, "num_logical_experts": 128}
    p2l, l2all, num_valid = _init_by_mapping(server_args, model_config, **data)
    np.testing.assert_array_equal(p2l.numpy(), ours["phy2log"])
    np.testing.assert_array_equal(num_valid.numpy(), ours["logcnt"])
    for layer in (0, 47):                        # the same slots per expert, in slot order
        for expert in range(128):
            slots = [s for s in l2all[layer, expert].tolist() if s != -1]
            assert slots == sorted(s for s in ours["log2phy"][layer][expert] if s != -1)
    assert f"--init-expert-location {out / 'expert_location.json'}" in stdout
    assert "--ep-num-redundant-experts 16" in stdout


def test_sglang_places_the_loads_file_as_epsim_did(exported):
    """The other form: SGLang runs its EPLB (`deepseek`, hierarchical when groups divide over
    nodes, as `compute_algorithm("auto", ...)`) on `logical_count` summed over its first axis."""
    out, _ = exported
    data = _sglang_data(str(out / "logical_count.json"))
    counts = torch.tensor(data["logical_count"])
    if counts.dim() == 2:
        counts = counts.unsqueeze(0)
    weight = counts.sum(dim=0).numpy()
    np.testing.assert_array_equal(weight, read_loads(SAMPLE))
    phy2log, _, logcnt = rebalance_experts(weight, 144, 1, 2, 16)      # what SGLang computes
    ours = json.loads((out / "placement.json").read_text())
    np.testing.assert_array_equal(phy2log, ours["phy2log"])
    np.testing.assert_array_equal(logcnt, ours["logcnt"])
    assert read_loads(out / "logical_count.json").tolist() == weight.tolist()   # epsim reads it back


def test_summary_on_screen_and_placement_readable_as_previous(exported, tmp_path):
    out, stdout = exported
    assert len(stdout) < 3000 and "phy2log" not in stdout
    summary = json.loads((out / "eplb.json").read_text())
    assert "phy2log" not in summary and len(summary["balancedness_after"]) == 48
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "eplb", str(SAMPLE), *ARGS,
                           "--previous", str(out / "placement.json"), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rebalance"]["changed_slots"] == 0      # the same placement
