"""Every shipped scenario's results as a hash, per engine: a refactor that claims "same bits"
is checked against the recorded table (`tests/benchmarks/test_scenario_hashes.py`).

The hash covers the whole `summary` a run prints with `--json` except `wall_seconds` (host
time of this machine) and `files`; floats are written with `repr`, so one changed bit in any
metric changes the hash. A change that moves numbers on purpose re-records the table in the
same commit and says why:

    python benchmarks/scenario_hashes.py --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "scenario_hashes.json"
ENGINES = ("fast", "reference")
UNSTABLE_KEYS = ("wall_seconds", "files")


def scenario_paths() -> list[Path]:
    """Every shipped scenario file, in name order."""
    return sorted((REPO / "scenarios").glob("*.yaml"))


def summary_hash(path: Path, engine: str) -> str:
    """sha256 of a run's summary (less `UNSTABLE_KEYS`), keys sorted, the checkout's path
    written as `<repo>`."""
    from epsim.report import summarize
    from epsim.sim import simulate
    from epsim.spec import load_scenario

    summary = summarize(simulate(load_scenario(path), engine=engine))
    for key in UNSTABLE_KEYS:
        summary.pop(key, None)
    text = json.dumps(summary, sort_keys=True, default=repr, allow_nan=True)
    # the summary names the profile and scenario folder by absolute path: hash the same in any
    # checkout (a worktree, CI's clone)
    text = text.replace(str(REPO), "<repo>")
    return hashlib.sha256(text.encode()).hexdigest()


def table() -> dict[str, dict[str, str]]:
    """{scenario file name: {engine: hash}} for every shipped scenario."""
    return {p.name: {engine: summary_hash(p, engine) for engine in ENGINES}
            for p in scenario_paths()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--write", action="store_true", help=f"re-record {RESULT.name}")
    args = parser.parse_args(argv)
    now = table()
    if args.write:
        tmp = RESULT.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        tmp.replace(RESULT)                     # a table is never left half-written
        print(f"wrote {RESULT.relative_to(REPO)}")
        return 0
    recorded = json.loads(RESULT.read_text())
    moved = sorted(f"{name} {engine}" for name, row in now.items() for engine, h in row.items()
                   if recorded.get(name, {}).get(engine) != h)
    print("same bits" if not moved else "moved: " + ", ".join(moved))
    return 0 if not moved else 1


if __name__ == "__main__":
    sys.exit(main())
