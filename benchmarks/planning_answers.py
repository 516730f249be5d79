"""The full-size answers of the scenario scripts, as docs/planning.md quotes them.

Runs every `scenarios/*.py` at full size, keeps each answer line in
`benchmarks/results/planning_answers.json` (with the command, the machine, the seconds each
script took), copies its figure to `docs/img/planning_<name>.png` and puts the line in the
docs' **Answer** block of the section that names `python scenarios/<name>.py`. A test checks
that the docs quote the recorded lines; a change that moves an answer re-records them:

    python benchmarks/planning_answers.py --write [--only NAME ...] [--workers 2]

The prose and tables around each answer are the docs' own: reread them when an answer moves.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"
RESULT = REPO / "benchmarks" / "results" / "planning_answers.json"
DOC = REPO / "docs" / "planning.md"
IMG = REPO / "docs" / "img"
COMMAND = "python benchmarks/planning_answers.py --write"


def script_names() -> list[str]:
    """The scenario scripts, by stem: `[name, ...]` sorted."""
    return sorted(p.stem for p in SCENARIOS.glob("*.py"))


def _main_of(name: str):
    spec = importlib.util.spec_from_file_location(f"scenario_script_{name}", SCENARIOS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _block(doc: str, name: str) -> tuple[int, int]:
    """(start, end) of the answer line inside the code block after `python scenarios/NAME.py`'s
    **Answer** heading."""
    at = doc.index(f"`python scenarios/{name}.py`")
    match = re.compile(r"\*\*Answer\*\*[^\n]*\n\n```\n(answer: [^\n]*)\n```").search(doc, at)
    if match is None:
        raise ValueError(f"docs/planning.md: no **Answer** block after python scenarios/{name}.py")
    return match.start(1), match.end(1)


def quoted(doc: str, name: str) -> str:
    """The answer line docs/planning.md quotes for scenario script `name`."""
    start, end = _block(doc, name)
    return doc[start:end]


def with_answers(doc: str, answers: dict[str, str]) -> str:
    """`doc` with each named script's answer block holding `answers[name]`."""
    for name, line in answers.items():
        start, end = _block(doc, name)
        doc = doc[:start] + line + doc[end:]
    return doc


def run(names: list[str], workers: int, img: Path | None) -> tuple[dict[str, str], dict[str, float]]:
    """Each script at full size in a scratch directory; its figure copied to `img` (None: kept
    nowhere, a dry run leaves the docs as they are).

    Returns:
        ({name: answer line}, {name: wall seconds}).
    """
    answers, seconds = {}, {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            result = _main_of(name)(["--out", tmp, "--workers", str(workers), "--no-progress"])
            seconds[name] = round(time.perf_counter() - started, 1)
            answers[name] = result["answer"]
            figure = Path(tmp) / f"planning_{name}.png"
            if img is not None and figure.exists():
                shutil.copyfile(figure, img / figure.name)
    return answers, seconds


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--write", action="store_true", help="record the answers, figures and docs")
    parser.add_argument("--only", nargs="+", choices=script_names(), metavar="NAME",
                        help="rerun these scripts only (the others keep their recorded answers)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    names = args.only or script_names()
    answers, seconds = run(names, args.workers, IMG if args.write else None)
    for name in names:
        print(f"{name} ({seconds[name]:.0f} s): {answers[name]}")
    if args.write:
        recorded = json.loads(RESULT.read_text()) if RESULT.exists() else {"answers": {}, "seconds": {}}
        recorded["answers"].update(answers)
        recorded["seconds"].update(seconds)
        recorded["answers"] = {n: recorded["answers"][n] for n in script_names() if n in recorded["answers"]}
        recorded["seconds"] = {n: recorded["seconds"][n] for n in recorded["answers"]}
        recorded["meta"] = {"command": COMMAND, "workers": args.workers,
                            "machine": f"{platform.node()}: {os.cpu_count()} CPUs, "
                                       f"Python {platform.python_version()}"}
        _write_atomic(RESULT, json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        _write_atomic(DOC, with_answers(DOC.read_text(), recorded["answers"]))
        print(f"wrote {RESULT.relative_to(REPO)} and {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
