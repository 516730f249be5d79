"""The dense SwiGLU MLP (`any/dense/graph`): cuBLAS's tile- but not wave-quantised FLOPs, and a
fit carried to another GPU at its efficiencies (issue 37's hold-outs)."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.experts import TILE_M, TILE_N, ExpertGemm, carried_rates, dense_gemm, dense_us
from epsim.cost.record import predict_record
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.zoo import get_hardware

PARAMS = {"base_us": 7.0, "per_expert_us": 0.0, "hbm_gbps": 2800.0, "tflops": 750.0,
          "wave_us": 0.05}


def test_split_k_counts_tiles_not_filled_waves():
    """3 row tiles on 4 SMs: the gate+up GEMM (N 256: 2 column tiles) runs 6 tiles in 2 waves;
    split K spreads the last wave's 2 tiles over the idle SMs, so 6 tiles of FLOPs, not 8."""
    waved = ExpertGemm(hidden_size=256, intermediate_size=128, weight_bytes=1e6, num_sms=4)
    split = ExpertGemm(hidden_size=256, intermediate_size=128, weight_bytes=1e6, num_sms=4,
                       split_k=True)
    tile = 2.0 * TILE_M * TILE_N * 1e-6           # MFLOP per unit of K
    # gate+up: 6 tiles over K 256; down (N 256, K 128): 6 tiles over K 128
    assert split.quantized_mflops(np.array(3.0)) == pytest.approx(6 * tile * 256 + 6 * tile * 128)
    assert waved.quantized_mflops(np.array(3.0)) == pytest.approx(8 * tile * 256 + 8 * tile * 128)
    np.testing.assert_array_equal(split.waves(np.array(3.0)), waved.waves(np.array(3.0)))   # 2 + 2


def test_dense_mlp_is_split_k_and_closer_to_linear_in_tokens():
    """`dense_gemm` is cuBLAS's (split K): compute-bound, 4x the rows cost 4x the FLOPs (no
    partial wave inflating the smaller batch), where wave-filled tiles make it less than 4x."""
    gemm = dense_gemm(2048, 768, 2.0, "H100")      # 1024 rows: 192 + 256 tiles on 132 SMs
    assert gemm.split_k
    waved = ExpertGemm(2048, 768, gemm.weight_bytes, gemm.num_sms)
    rows = np.array([1024.0, 4096.0])
    tiles = np.ceil(rows / TILE_M)
    split_ratio = np.divide(*gemm.quantized_mflops(tiles)[::-1])
    waved_ratio = np.divide(*waved.quantized_mflops(tiles)[::-1])
    assert split_ratio == pytest.approx(4.0) and waved_ratio == pytest.approx(3.27, abs=0.01)


def test_carried_rates_keep_efficiencies_and_fixed_costs():
    h100, h200, b200 = get_hardware("H100"), get_hardware("H200"), get_hardware("B200")
    assert carried_rates(PARAMS, h100, h100) == PARAMS
    on_h200 = carried_rates(PARAMS, h100, h200)
    assert on_h200["hbm_gbps"] == pytest.approx(2800.0 * h200.hbm_gbps / h100.hbm_gbps)
    assert on_h200["tflops"] == pytest.approx(750.0)          # the same BF16 peak
    on_b200 = carried_rates(PARAMS, h100, b200)
    assert on_b200["tflops"] / b200.bf16_tflops == pytest.approx(750.0 / h100.bf16_tflops)
    assert {k: on_b200[k] for k in ("base_us", "wave_us")} == {"base_us": 7.0, "wave_us": 0.05}


def _record(gpu: str, tokens: int) -> MeasurementRecord:
    return MeasurementRecord(kind="dense_mlp", timing="device", backend="local", mode="", ep_size=1,
                             num_tokens_per_rank=tokens, hidden_size=7168, intermediate_size=2048,
                             median_us=100.0, provenance=Provenance(device=gpu, hardware=gpu))


@pytest.mark.parametrize("tokens", [1, 16384])
def test_a_record_on_another_gpu_is_priced_at_the_fit_carried(tokens):
    """A dense_mlp record of an H200 priced with an H100-fitted profile (the system hold-out):
    the H100 fit's rates carried to the H200's datasheet, as an H200 profile holding them."""
    h100 = Profile(name="h100", hardware="H100",
                   components={"any/dense/graph": Component(params=PARAMS, source="fit")})
    h200 = Profile(name="h200", hardware="H200", components={"any/dense/graph": Component(
        params=carried_rates(PARAMS, get_hardware("H100"), get_hardware("H200")), source="fit")})
    record = _record("H200", tokens)
    assert predict_record(record, h100) == pytest.approx(predict_record(record, h200))
    # on its own GPU a record takes the fit as it is
    gemm = dense_gemm(7168, 2048, 2.0, "H100")
    assert predict_record(_record("H100", tokens), h100) == pytest.approx(
        float(dense_us(np.array([float(tokens)]), gemm, PARAMS)[0]))
    if tokens == 1:                                 # memory-bound: the H200's faster HBM
        assert predict_record(record, h100) < predict_record(_record("H100", tokens), h100)
