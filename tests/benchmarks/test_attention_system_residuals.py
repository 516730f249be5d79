"""benchmarks/attention_system_residuals.py's helpers: a call's KV bytes, its band against the L2,
and the mean signed error per group; its systems are AIC's (argparse choices)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("attention_system_residuals",
                                               ROOT / "benchmarks/attention_system_residuals.py")
residuals = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(residuals)


def test_kv_bytes_are_keys_and_values_of_every_cached_token_in_bf16():
    record = SimpleNamespace(num_seqs=4, context_len=4096, num_kv_heads=8, head_dim=128)
    assert residuals.kv_bytes(record) == 4 * 4096 * 8 * 128 * 2 * 2


@pytest.mark.parametrize("num_bytes, band", [(10e6, "< L2/2"), (30e6, "L2/2-L2"), (50e6, "L2-2 L2"),
                                             (99e6, "L2-2 L2"), (100e6, ">= 2 L2")])
def test_l2_band_halves_and_doubles_the_l2(num_bytes, band):
    assert residuals.l2_band(num_bytes, 50e6) == band


def test_mean_errors_are_signed_per_group():
    groups = residuals.mean_errors([("a", 10.0, 12.0), ("a", 10.0, 9.0), ("b", 20.0, 10.0)])
    assert groups["a"] == (2, pytest.approx(5.0)) and groups["b"] == (1, pytest.approx(-50.0))


def test_an_unknown_system_is_refused_naming_the_argument(capsys):
    with pytest.raises(SystemExit) as exc:
        residuals.main(["--fit", "a100"])
    assert exc.value.code == 2 and "--fit" in capsys.readouterr().err
