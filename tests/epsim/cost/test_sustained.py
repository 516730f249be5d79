"""The power-capped clock of a prefill forward (`epsim.cost.sustained`)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from epsim.cost.attention import BatchCounts
from epsim.cost.ledger import COLUMN
from epsim.cost.model import CostModel
from epsim.cost.provenance import SUSTAINED_KEY, provenance
from epsim.cost.sustained import CURVE_RATIO, CURVE_TOKENS, sustained_clock
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model
from tests.epsim.cost.test_forward_host import _even_step, _prefill

RECORDS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "sustained_clock_h100"


def _ratios(path: Path) -> dict[int, float]:
    """layer tokens -> sustained / burst of the DeepSeek-V3 layers a records.jsonl holds."""
    sizes = {"decode_layer": 64, "prefill_layer": 8192}
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        name = r["kernel"]
        if name in sizes or name.startswith("layer_"):
            out[sizes.get(name) or int(name.split("_")[1])] = r["sustained_over_burst"]
    return out


def test_the_curve_is_the_records():
    hosts = [_ratios(RECORDS / "records.jsonl"), _ratios(RECORDS / "second_host" / "records.jsonl"),
             _ratios(RECORDS / "sweep" / "records.jsonl"),
             _ratios(RECORDS / "graph_sweep" / "records.jsonl")]
    shape = hosts[-1]                      # the sweep with the layer in a CUDA graph
    level = np.mean([h[8192] for h in hosts])
    k = (level - 1) / (shape[8192] - 1)
    assert list(CURVE_TOKENS) == [float(t) for t in sorted(shape) if t <= 8192]
    for tokens, ratio in zip(CURVE_TOKENS, CURVE_RATIO):
        assert ratio == pytest.approx(1 + k * max(0.0, shape[int(tokens)] - 1), abs=5e-4)
    assert CURVE_RATIO[-1] == pytest.approx(level, abs=5e-4)


def test_the_factor_follows_the_forwards_size():
    sc = sustained_clock("H100")
    assert sc.measured and not sustained_clock("B200").measured
    assert sc.factor(0) == 1.0
    assert sc.factor(1) == pytest.approx(CURVE_RATIO[0])      # decode-sized: the full clock
    assert CURVE_RATIO[0] == pytest.approx(1.0, abs=0.01)
    assert sc.factor(CURVE_TOKENS[-1] * 4) == pytest.approx(CURVE_RATIO[-1])
    for tokens, ratio in zip(CURVE_TOKENS, CURVE_RATIO):
        assert sc.factor(tokens) == pytest.approx(ratio)
    assert sustained_clock("H100", enabled=False) is None


def _model(gpu: str, on: bool, tp: int = 8) -> CostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu=gpu),
                         DeploymentSpec(ep_size=1, tp_size=tp, moe_a2a_backend="none",
                                        enable_dp_attention=False, sustained_clock=on))


def _step(cm: CostModel, tokens: float, phase: str):
    if phase == "prefill":
        return _prefill(cm, tokens)
    z, t = np.zeros(1), np.full(1, float(tokens))
    return _even_step(cm, tokens, BatchCounts(t, t * 4096, z, z, z, t, "decode"))


@pytest.mark.parametrize("gpu", ["H100", "B200"])
def test_a_long_prefill_is_slowed_by_its_compute_alone(gpu):
    on, off = _model(gpu, True), _model(gpu, False)
    tokens = 8192.0
    slow, fast = _step(on, tokens, "prefill"), _step(off, tokens, "prefill")
    added = float(on.ledger.sums[(False, "")][COLUMN["sustained_clock"]])
    factor = on.sustained.factor(tokens)
    assert slow.step_us == pytest.approx(fast.step_us + added)
    # the compute is slowed by the factor, the TP all-reduces and the step's host are not
    assert fast.step_us < slow.step_us < fast.step_us * factor
    assert slow.combine_us.sum() == pytest.approx(fast.combine_us.sum())
    # by part: what the parts carry is what the ledger says was added
    assert (slow.layer_us.sum() + slow.dense_us) - (fast.layer_us.sum() + fast.dense_us) \
        == pytest.approx(added)
    use = [u for u in provenance(on)["components"] if u["key"] == SUSTAINED_KEY]
    assert len(use) == 1
    assert use[0]["tag"] == ("fitted" if gpu == "H100" else "extrapolated")


def test_decode_steps_keep_the_burst_clock():
    on, off = _model("H100", True), _model("H100", False)
    assert _step(on, 64, "decode").step_us == pytest.approx(_step(off, 64, "decode").step_us)
    assert float(on.ledger.sums[(True, "")][COLUMN["sustained_clock"]]) == 0.0
