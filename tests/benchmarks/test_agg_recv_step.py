"""benchmarks/agg_recv_step.py: the runs it reads and the variants it applies (the recorded table
itself takes ~15 min on one core to regenerate; skipped without aiconfigurator-core, which holds
the silicon sample)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("aiconfigurator_core")

import agg_recv_step as step  # noqa: E402

import epsim.cost.model as cost_model  # noqa: E402
from epsim.cost.forward_host import forward_host  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return {row.id: row for row in read_rows(default_csv_path())}


def test_picked_runs_are_the_four_fp4_series_at_4_to_32_clients():
    picked = step.picked()
    series = {(e["layout_as_run"], e["osl"]) for e in picked}
    assert len(picked) == 16 and len(series) == 4
    assert {e["precision"] for e in picked} == {"fp4"}
    assert sorted(e["concurrency"] for e in picked) == sorted(step.CLIENTS * 4)


def test_the_scripts_receive_interval_steps_at_16_clients(rows):
    # `dsr1_fp4_b200.sh`: `if [[ $CONC -ge 16 ]]` -> 30, else 10
    by_clients = {e["concurrency"]: rows[e["id"]] for e in step.picked()
                  if e["layout_as_run"].startswith("tp8") and e["osl"] == 1024}
    interval = {c: step._instance(r, {}).data["deployment"]["scheduler_recv_interval"]
                for c, r in by_clients.items()}
    assert interval == {4: 10, 8: 10, 16: 30, 32: 30}
    changed = step._instance(by_clients[16], {"scheduler_recv_interval": 10, "first_use_compile": None})
    assert changed.data["deployment"]["scheduler_recv_interval"] == 10
    assert "first_use_compile" not in changed.data["deployment"]


def test_host_what_if_is_undone_after_each_prediction(rows, monkeypatch):
    seen = []
    monkeypatch.setattr(step, "couple", lambda instances, osl: seen.append(cost_model.forward_host)
                        or {"ttft_ms": 1.0})
    row = rows[step.picked()[0]["id"]]
    assert step.predicted_ms(row, {step.HOST_LAYER: 1354.0}) == 1.0
    assert seen[0] is not forward_host and cost_model.forward_host is forward_host
    step.predicted_ms(row, {})
    assert seen[1] is forward_host
