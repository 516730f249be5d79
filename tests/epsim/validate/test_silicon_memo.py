"""A row that repeats another's simulations takes the kept answer (`epsim.validate.silicon.memo`):
the same entry as simulating it, from this process and from another worker's file."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

from epsim.errors import SpecError
from epsim.validate.silicon import memo
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.rows import read_rows
from epsim.validate.silicon.scoreboard import RowTask, row_task

FIXTURE = Path(__file__).resolve().parent / "data" / "silicon_fixture.csv"
ROW = "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"


def _row():
    return next(r for r in read_rows(FIXTURE) if r.id == ROW)


def _ours(entry: dict) -> dict:
    """An entry's epsim part but its wall and CPU seconds (a kept answer costs none)."""
    return {k: v for k, v in entry["epsim"].items() if k not in ("wall_s", "cpu_s")}


def test_the_key_is_the_instances_but_the_rows_name():
    row = _row()
    instances = plan_row(row).instances
    renamed = plan_row(dataclasses.replace(row, id="another_row")).instances
    assert instances[0].data["name"] != renamed[0].data["name"]
    assert memo.key(instances, row.osl) == memo.key(renamed, row.osl)
    reseeded = (dataclasses.replace(instances[0], data={**instances[0].data, "seed": 8}),)
    assert memo.key(reseeded, row.osl) != memo.key(instances, row.osl)
    assert memo.key(instances, row.osl + 1) != memo.key(instances, row.osl)
    fewer = (dataclasses.replace(instances[0], clients=instances[0].clients - 1),)
    assert memo.key(fewer, row.osl) != memo.key(instances, row.osl)


def test_a_repeated_row_takes_the_kept_answer_bit_for_bit(tmp_path):
    row = _row()
    twin = dataclasses.replace(row, id="twin_of_cfg81")
    simulated = row_task(RowTask(twin, True, False))
    first = row_task(RowTask(row, True, False, str(tmp_path)))
    # this process's answer
    again = row_task(RowTask(twin, True, False, str(tmp_path)))
    assert _ours(again) == _ours(simulated) and again["id"] == "twin_of_cfg81"
    assert _ours(first) == _ours(simulated)
    # another worker's: the folder's file alone
    memo._KEPT.clear()
    assert len(list(tmp_path.glob("*.json"))) == 1
    kept = memo.Memo(tmp_path)
    out, notes = kept.couple(_fails, plan_row(twin).instances, twin.osl)
    assert kept.hits == 1 and out["tpot_ms"] == simulated["epsim"]["tpot_ms"]
    assert notes == simulated["epsim"]["notes"]


def test_a_memo_of_another_run_or_unshared_keeps_nothing_of_it(tmp_path):
    row = _row()
    instances = plan_row(row).instances
    calls = []

    def couple(instances, osl):
        calls.append(osl)
        return {"ttft_ms": 1.0, "tpot_ms": 2.0}

    unshared = memo.Memo(tmp_path / "run1", shared=False)
    assert unshared.couple(couple, instances, row.osl)[0] == {"ttft_ms": 1.0, "tpot_ms": 2.0}
    unshared.couple(couple, instances, row.osl)
    assert calls == [row.osl] and not (tmp_path / "run1").exists()
    memo.Memo(tmp_path / "run2").couple(couple, instances, row.osl)      # another run: anew
    assert calls == [row.osl, row.osl]


def test_an_error_keeps_nothing_and_passes_its_warnings_on(tmp_path):
    row = _row()

    def couple(instances, osl):
        warnings.warn("raised before the error", stacklevel=2)
        raise SpecError(f"deployment ({row.id}) does not fit")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SpecError, match="does not fit"):
            memo.Memo(tmp_path).couple(couple, plan_row(row).instances, row.osl)
    assert [str(w.message) for w in caught] == ["raised before the error"]
    assert not list(tmp_path.glob("*.json"))


def _fails(instances, osl):
    raise AssertionError("a kept answer must not simulate again")
