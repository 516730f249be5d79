"""benchmarks/first_use_alloc_gpu.py without a GPU: its key syntax, its refusals, its table."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import first_use_alloc_gpu as fug  # noqa: E402


def test_keys_round_trip():
    assert fug.parse_keys(fug.format_keys(fug.DEFAULT_KEYS)) == fug.DEFAULT_KEYS
    assert fug.parse_keys("extend:4:4096:1,decode:8:-:0") == [
        ("extend", 4, 4096, True), ("decode", 8, None, False)]


@pytest.mark.parametrize("bad, word", [("extend:3:4096:1", "power of two"),
                                       ("extend:4:x:1", "TOKENS"),
                                       ("decode:4:-:2", "alignment"),
                                       ("prefill:4:4096:1", "extend|decode")])
def test_bad_keys_one_line_exit_2(bad, word, capsys, tmp_path):
    assert fug.main(["--out", str(tmp_path), "--keys", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and word in err


def test_render_tables_a_kept_record(tmp_path):
    prov = {"gpu": "GPU X", "command": "c", "torch": "t", "triton": "3", "cpus": 16, "cpu": "cpu"}
    key = {"kernel": "alloc_extend_kernel", "bs_upper": 4, "max_num_extend_tokens": 4096,
           "free_pages_aligned": False}
    recs = [{**prov, **key, "phase": "cold", "stall_ms": 812.0, "hot_ms": 0.012},
            {**prov, **key, "phase": "parallel", "stall_ms": 1500.0, "hot_ms": 0.01},
            {**prov, **key, "phase": "parallel", "stall_ms": 1700.0, "hot_ms": 0.01},
            {**prov, **key, "phase": "aot", "aot_cpu_s": 0.09, "aot_wall_s": 0.1}]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert fug.main(["--render", str(path), "--out", str(tmp_path / "t")]) == 0
    text = (tmp_path / "t" / "table.md").read_text()
    assert "| extend | 4 | 4096 | no | 812 | 1700 (1700) | 90 | 12 |" in text.replace(
        "alloc_extend_kernel", "extend")
