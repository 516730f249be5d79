"""benchmarks/silicon_compare.py: two records' bucket errors side by side, on small exact records."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import silicon_compare  # noqa: E402


def _row(rid, system, tpot, ttft, cold=False, peer=True):
    return {"id": rid, "bucket": {"system": system, "mode": "agg"}, "gemm_quant_mode": "fp8",
            "measured": {"tpot_ms": 10.0, "ttft_ms": 100.0},
            "epsim": {"status": "predicted", "tpot_ms": tpot, "ttft_ms": ttft,
                      "assumptions": ["benchmark without warm-up"] if cold else []},
            "peer": {"status": "predicted" if peer else "refused"}}


def _write(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump({"rows": rows}, f)
    return path


def test_bucket_errors_before_and_after_are_the_rows_mean_errors(tmp_path):
    before = _write(tmp_path / "b.json.gz", [_row("a", "h200_sxm", 11.0, 80.0),
                                             _row("b", "b200_sxm", 10.0, 100.0)])
    after = _write(tmp_path / "a.json.gz", [_row("a", "h200_sxm", 10.5, 90.0, cold=True),
                                            _row("b", "b200_sxm", 12.0, 50.0, peer=False)])
    groups = silicon_compare.buckets(silicon_compare.load(str(before)),
                                     silicon_compare.load(str(after)))
    text = silicon_compare.table(groups)
    assert "| all | 2 | 5.0 -> 12.5 % | 10.0 -> 30.0 % |" in text
    assert "| h200_sxm agg fp8 | 1 | 10.0 -> 5.0 % | 20.0 -> 10.0 % |" in text
    split = silicon_compare.warm_up_split(silicon_compare.load(str(after)))
    assert "| run without a warm-up | 1 | 10.0 % | 100 % |" in split     # b: the peer refused
    assert "warmed run" not in split


def test_a_record_that_is_neither_file_nor_revision_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "benchmarks/silicon_compare.py", "--before", "nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--before/--after (nope)" in done.stderr
