"""Tests of the benchmark scripts and their recorded results."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str):
    """`benchmarks/<name>.py` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_refused(run, out: Path, cases) -> None:
    """Each `(args, says)` of `cases`, run as `run("--out", out, *args)`, exits 2 with one
    `error:` line that holds `says`, and `out` is never made (the checks come before any work)."""
    for args, says in cases:
        done = run("--out", str(out), *args)
        assert done.returncode == 2, args
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and says in errors[0], (args, done.stderr)
    assert not out.exists()
