"""A plan's results table read back: `results.csv` of `epsim plan --out`, chosen among again.

The table holds every point's swept values, derived columns and metrics, so new constraints,
objectives or Pareto axes need no simulation: `load_results` rebuilds a `PlanResult` from the
file and picks the feasible points, the frontier and the best point as `run_plan` does.

    result = load_results("plans/qwen235b/results.csv", constraints=["tpot_ms.p99<=40"])
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from epsim.errors import SpecError
from epsim.io import decode_text, read_bytes
from epsim.io.rundir import check_complete
from epsim.plan.choice import PlanResult, check_numeric_keys, choose_rows
from epsim.plan.columns import COST_COLUMNS, DERIVED_COLUMNS, METRIC_COLUMNS
from epsim.plan.select import (DEFAULT_OBJECTIVES, DEFAULT_PARETO, KEEP_UP_METRIC, SLO_MARGIN,
                               parse_constraint, parse_objective)
from epsim.plan.sweep import SweepAxis, parse_value

REQUIRED_COLUMNS = ("point", "point_id", "num_gpus", "error")
_FLAGS = ("feasible", "marginal", "pareto", "best")
_NOT_KEYS = set(("point", "point_id", "error", SLO_MARGIN) + _FLAGS
                + DERIVED_COLUMNS + COST_COLUMNS + METRIC_COLUMNS)


def _number(text: str, where: str) -> float:
    if text == "":
        return math.nan             # write_csv leaves NaN and None empty
    try:
        return float(text)
    except ValueError:
        raise SpecError(f"{where} ({text[:40]!r}) must be a number") from None


def read_rows(path: str | Path) -> tuple[list[dict], list[str], list[str]]:
    """Rows of a results.csv with numbers as numbers.

    Returns:
        (rows, columns in file order, swept keys: the columns that are not derived, metric,
        id or flag columns).
    Raises:
        SpecError: unreadable, not CSV, missing the id, GPU or error columns, a non-number in
            a numeric column, or no rows.
    """
    path = Path(path)
    text = decode_text(read_bytes(path, "results table"), path.name, "results table")
    lines = text.splitlines()
    try:
        reader = csv.reader(lines)
        header = next(reader, [])
        body = list(reader)
    except csv.Error as exc:
        raise SpecError(f"{path.name}: not valid CSV ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise SpecError(f"{path.name}: columns ({', '.join(missing)} missing) must include "
                        f"{', '.join(REQUIRED_COLUMNS)}; is it the results.csv of `epsim plan --out`?")
    keys = [c for c in header if c not in _NOT_KEYS]
    rows = []
    for lineno, cells in enumerate(body, 2):
        if not cells:
            continue
        if len(cells) != len(header):
            raise SpecError(f"{path.name}:{lineno}: cells ({len(cells)}) must match the header's "
                            f"{len(header)} columns")
        row: dict = {}
        for name, cell in zip(header, cells):
            where = f"{path.name}:{lineno}: {name}"
            if name in ("point_id", "error"):
                row[name] = cell
            elif name in _FLAGS:
                row[name] = cell == "True"
            elif name in keys:
                value = parse_value(cell) if cell != "" else None
                # lists and mappings stay JSON text, as `run_plan` keeps them in its rows
                row[name] = cell if isinstance(value, (list, dict)) else value
            elif name == "point":
                row[name] = int(_number(cell, where))
            else:
                row[name] = _number(cell, where)
        rows.append(row)
    if not rows:
        raise SpecError(f"{path.name}: rows (none) must hold at least one sweep point")
    return rows, header, keys


def choose(rows: list[dict], columns: list[str], keys: list[str], constraints: list[str] = (),
           objectives: list[str] = (), pareto: list[str] = (), keep_up: bool = True):
    """A `PlanResult` of finished rows (as `run_plan` or `read_rows` give them), chosen among
    under `constraints`, `objectives` (default `DEFAULT_OBJECTIVES`) and `pareto` (default
    `DEFAULT_PARETO`) exactly as `run_plan` chooses. The rows' flag columns are rewritten.
    Keep-up applies when asked and the rows have its column (`keep_up.ok`).

    Raises:
        SpecError: a constraint or objective naming a column the rows lack, bad syntax.
    """
    known = [c for c in columns if c not in ("point", "point_id", "error") + _FLAGS]
    known += [] if SLO_MARGIN in known else [SLO_MARGIN]         # computed when choosing
    parsed_constraints = [parse_constraint(t, known) for t in constraints]
    parsed_objectives = [parse_objective(t, known, "--objective") for t in (objectives or DEFAULT_OBJECTIVES)]
    parsed_pareto = [parse_objective(t, known, "--pareto") for t in (pareto or DEFAULT_PARETO)]
    axes = [SweepAxis(key, tuple(dict.fromkeys(row[key] for row in rows))) for key in keys]
    check_numeric_keys(axes, parsed_constraints + parsed_objectives + parsed_pareto)
    rows = [dict(row) for row in rows]
    result = PlanResult(rows, list(columns), axes, parsed_constraints, parsed_objectives,
                        parsed_pareto, None, [], [], 0, len(rows), 0.0,
                        keep_up=keep_up and KEEP_UP_METRIC in columns)
    choose_rows(result)
    return result


def load_results(path: str | Path, constraints: list[str] = (), objectives: list[str] = (),
                 pareto: list[str] = (), keep_up: bool = True):
    """`choose` over the rows of a results.csv (or the directory holding it). A table in a
    results directory is read only from a finished run (`epsim.io.rundir.check_complete`: the
    manifest says complete and the table's sha256 matches it).

    Raises:
        SpecError: an unfinished run or a changed table, a bad table (see `read_rows`), or a
            bad constraint or objective.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    check_complete(path.parent, [path.name])
    rows, columns, keys = read_rows(path)
    return choose(rows, columns, keys, constraints, objectives, pareto, keep_up)
