"""The host-term bench runs on a CPU at a tiny size and writes records the fit reads."""

from __future__ import annotations

import json

from epsim.calibrate.inputs import load_records
from epsim.calibrate.rebalance_host import fit_rebalance_host
from live.bench.eplb_host import _functions, main


def test_quick_run_writes_cpu_timed_records_the_fit_reads(tmp_path):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    raw, _ = load_records([tmp_path / "eplb_host_records.jsonl"])
    keys = {s.record.extra["key"] for s in raw}
    assert {"deepseek", "deepseek_global", "sticky", "plan", "gloo_message"} <= keys
    assert all(s.record.extra["clock"] == "thread_time" for s in raw)
    barrier = next(s for s in raw if s.record.extra["key"] == "gloo_message")
    assert 0 < barrier.record.extra["uncontended_us"] <= barrier.record.median_us
    component = fit_rebalance_host(raw)
    assert component.params["plan_us_per_unit"] > 0
    summary = json.loads((tmp_path / "eplb_host_summary.json").read_text())
    assert summary["records"] == len(raw)


def test_bad_roots_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path), "--sglang-root", str(tmp_path)]) == 2
    assert "must hold an unpacked sglang/ package" in capsys.readouterr().err


def test_functions_are_compiled_without_the_files_imports(tmp_path):
    source = tmp_path / "engine.py"
    source.write_text("from engine.internal import thing\n\ndef double(x):\n    return 2 * helper(x)\n"
                      "\ndef helper(x):\n    return x\n")
    assert _functions(source)["double"](3) == 6
