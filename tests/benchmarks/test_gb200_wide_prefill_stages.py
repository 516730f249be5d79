"""benchmarks/gb200_wide_prefill_stages.py: epsim's attention split into the parts the AIC tables
time separately adds up to the attention it prices, and the recorded result regenerates from
the installed aiconfigurator-core's tables (its table lines; the header names date and machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _simulation():
    from aic_stages import row_simulation
    from gb200_wide_prefill_stages import CASES

    from epsim.validate.silicon.rows import default_csv_path, read_rows
    row_id = CASES[0][1]
    return row_simulation(next(r for r in read_rows(default_csv_path()) if r.id == row_id))


def test_attention_split_adds_up_and_the_forward_is_its_layers():
    pytest.importorskip("aiconfigurator_core")      # the silicon sample ships in it
    from gb200_wide_prefill_stages import EP, MOE_LAYERS, epsim_layer
    sim = _simulation()
    assert sim.cost_model.deployment.ep_size == EP
    assert not sim.cost_model.deployment.enable_two_batch_overlap   # the recipe sets none
    ours = epsim_layer(sim, 2, 8192)
    burst = (ours["- of it: MLA kernel"] + ours["- of it: q_a/kv_a, q_b, o GEMMs"]
             + ours["- of it: kv_b up-projection"])
    # the prefill forward's sustained clock is the split's last part: GB200's ratio at 16384
    # tokens a rank, the curve's 8192-token end (`epsim.cost.sustained`)
    (name, slowed), = ((k, v) for k, v in ours.items() if k.startswith("- of it: the sustained"))
    assert name.endswith("(x1.123)")
    assert slowed == pytest.approx(0.1228 * burst, rel=1e-9)
    assert burst + slowed == pytest.approx(ours["attention (projections, kernel, block ops)"],
                                           rel=1e-9)
    # without overlap a layer is its stages in series, and the forward its MoE layers plus the
    # dense layers, LM head and overhead
    serial = sum(ours[k] for k in ("attention (projections, kernel, block ops)",
                                   "routed experts (slowest rank)", "dispatch", "combine",
                                   "shared expert", "MoE block ops"))
    assert ours["layer"] == pytest.approx(serial, rel=1e-9)
    assert ours["step (ms)"] == pytest.approx(
        ours["layer"] * MOE_LAYERS / 1e3 + ours["dense layers + LM head + overhead (ms)"], rel=1e-6)


def test_recorded_result_regenerates(tmp_path):
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / "stages.md"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/gb200_wide_prefill_stages.py"),
                    "--out", str(out)], check=True, cwd=ROOT, capture_output=True)
    rows = lambda text: [line for line in text.splitlines() if line.startswith(("|", "-"))]  # noqa: E731
    committed = rows((ROOT / "benchmarks/results/gb200_wide_prefill_stages.md").read_text())
    assert len(committed) > 40 and rows(out.read_text()) == committed
