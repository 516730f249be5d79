"""benchmarks/symm_mem_register_gpu.py without a GPU: its refusals, one line each."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import symm_mem_register_gpu as smr  # noqa: E402


@pytest.mark.parametrize("args, word", [(["--sizes-mb", "20,x"], "--sizes-mb"),
                                        (["--sizes-mb", "0"], "--sizes-mb"),
                                        (["--startup-mb", "0"], "--startup-mb"),
                                        (["--repeats", "0"], "--repeats")])
def test_bad_arguments_one_line_exit_2(args, word, capsys, tmp_path):
    assert smr.main(["--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(word)
    assert not (tmp_path / "symm_mem_register.jsonl").exists()


def test_the_unique_id_is_nccls_128_bytes():
    assert smr.UniqueId.internal.size == 128
