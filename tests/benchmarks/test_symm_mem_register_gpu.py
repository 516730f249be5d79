"""benchmarks/symm_mem_register_gpu.py without a GPU: its refusals, one line each, and the
arithmetic that turns its records into the term's numbers (fit, slowest rank, first waves)."""

import ctypes
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import symm_mem_driver as smd  # noqa: E402
import symm_mem_register_gpu as smr  # noqa: E402


@pytest.mark.parametrize("args, word", [(["--sizes-mb", "20,x"], "--sizes-mb"),
                                        (["--sizes-mb", "0"], "--sizes-mb"),
                                        (["--sweep-mb", "2,-1"], "--sweep-mb"),
                                        (["--startup-mb", "0"], "--startup-mb"),
                                        (["--repeats", "0"], "--repeats"),
                                        (["--local", "--ranks", "4"], "--ranks")])
def test_bad_arguments_one_line_exit_2(args, word, capsys, tmp_path):
    assert smr.main(["--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(word)
    assert not (tmp_path / "symm_mem_register.jsonl").exists()


def test_the_unique_id_is_nccls_128_bytes():
    assert smr.UniqueId.internal.size == 128


def test_driver_structs_match_cuda_h_layout():
    # cuda.h: CUmemAllocationProp is 4 + 4 + 8 (location) + 8 (pointer) + 8 (flags) = 32 bytes;
    # CUmulticastObjectProp 4 (+4 padding) + 8 + 8 + 8 = 32.
    assert ctypes.sizeof(smd.MemAllocationProp) == 32
    assert smd.MemAllocationProp.allocFlags.offset == 24
    assert ctypes.sizeof(smd.MulticastObjectProp) == 32
    assert ctypes.sizeof(smd.MemAccessDesc) == 12


def test_linear_fit_recovers_a_fixed_and_a_per_byte_cost():
    sizes = [2 * smr.MIB, 14 * smr.MIB, 128 * smr.MIB, 448 * smr.MIB]
    fixed_s, per_gib_s = 0.004, 0.030
    seconds = [fixed_s + per_gib_s * s / smr.GIB for s in sizes]
    fit = smr.linear_fit(sizes, seconds)
    assert fit["fixed_s"] == pytest.approx(fixed_s) and fit["per_gib_s"] == pytest.approx(per_gib_s)
    assert fit["rms_s"] == pytest.approx(0.0, abs=1e-12) and fit["num_calls"] == 4
    one = smr.linear_fit([sizes[0]] * 3, [0.001, 0.002, 0.003])
    assert one["per_gib_s"] is None and one["fixed_s"] == pytest.approx(0.002)


def test_a_collective_call_takes_its_slowest_rank():
    rows = [{"phase": "growth", "size_bytes": 7, "repeat": 0, "alloc_s": a, "register_s": r}
            for a, r in [(0.1, 0.5), (0.3, 0.2)]]
    assert smr.collective_calls(rows) == {("growth", 7, 0): {"alloc": 0.3, "register": 0.5}}


def test_first_wave_stall_sums_each_registration_from_the_fits():
    calls = {(ph, s * smr.MIB, 0): {"alloc": 0.001, "register": 0.010 + 0.100 * s * smr.MIB / smr.GIB}
             for ph, s in [("startup", 20), ("growth", 14), ("sweep", 448)]}
    out = smr.summarise(calls, ("alloc", "register"))
    assert out["fits"]["register"]["num_calls"] == 2          # the start-up segment is left out
    segs = smr.FIRST_WAVES["1k c4 split"]
    assert segs == [14, 14, 14, 42, 42, 42, 42]
    want = sum(0.001 + 0.010 + 0.100 * mib / 1024 for mib in segs)
    assert out["first_wave_stall_s"]["1k c4 split"] == pytest.approx(want)


def test_the_plan_runs_startup_then_growth_then_sweep():
    plan = smr.schedule(20, [14, 42], [2], 2)
    assert plan == [("startup", 20, 0), ("growth", 14, 0), ("growth", 14, 1), ("growth", 42, 0),
                    ("growth", 42, 1), ("sweep", 2, 0), ("sweep", 2, 1)]
    assert smd.align_up(14 * smr.MIB + 1, 2 * smr.MIB) == 16 * smr.MIB
