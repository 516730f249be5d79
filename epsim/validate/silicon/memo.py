"""The same instances give the same prediction: a memo of `run.couple`'s answers over a run.

Many silicon rows simulate what another row (or another candidate of the same row) already
did: the same recipe run on two dates, a P/D group that fits several rows, an ambiguous row's
candidate that is another row's plan. In the whole-set record (`benchmarks/results/
silicon_rows.json.gz`) 1,240 simulated rows and candidates gave 520 distinct answers, 61 % of its
row-seconds spent on repeats. `couple(instances, osl)` depends only on its arguments (each
scenario carries its seed; the profiles and code are fixed for a run), so an answer is kept
under a hash of them (`key`) with the warnings the simulation raised (each row's `notes`), and
a repeat takes it: the same bits as simulating again.

A `Memo` belongs to one run (named by its folder): it holds that run's answers in this process
and, where `shared`, in files in the folder that the run's other worker processes read too
(`epsim.validate.silicon.scoreboard.run_rows` makes the folder and removes it after; Ray's
workers, possibly on other machines, keep their own). A process keeps one run's answers, the
latest's. Two workers that meet one key at once both simulate it and write the same file
(written whole, then renamed into place).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

_KEPT: dict[str, tuple[dict, list[str]]] = {}       # this process's answers by `key` ...
_KEPT_RUN = [""]                                     # ... of this run (its folder)
KEY_VERSION = 1      # bump when `couple`'s inputs change shape (a folder from an older run)


def key(instances, osl: int) -> str:
    """sha256 of everything `couple(instances, osl)` reads: every field of every
    `mapping.Instance` (its scenario mapping, role, clients, harness, profile part, ...) and
    the output length, as canonical JSON; all but the scenario's `name` (the row's id), which
    only the messages of errors carry (an error is raised, never kept)."""
    fields = []
    for instance in instances:
        one = dataclasses.asdict(instance)
        one["data"] = {k: v for k, v in one["data"].items() if k != "name"}
        fields.append(one)
    text = json.dumps([KEY_VERSION, osl, fields], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class Memo:
    """One run's answers of `couple` by `key`, in this process and, if `shared`, in `folder`.

    Args:
        folder: the run's folder (its name; created when first written where `shared`).
        shared: the run's workers share answers through files in `folder`.
    """

    def __init__(self, folder: str | Path, shared: bool = True):
        if _KEPT_RUN[0] != str(folder):          # another run: its answers go
            _KEPT.clear()
            _KEPT_RUN[0] = str(folder)
        self.folder = Path(folder) if shared else None
        self.hits = self.misses = 0

    def couple(self, couple, instances, osl: int) -> tuple[dict, list[str]]:
        """`couple(instances, osl)` (`run.couple`) and the messages of the warnings it raised,
        sorted: kept, or computed and kept. Raises what `couple` raises (nothing is kept)."""
        name = key(instances, osl)
        found = _KEPT.get(name) or self._read(name)
        if found is not None:
            self.hits += 1
            _KEPT[name] = found
            return json.loads(json.dumps(found[0])), list(found[1])   # callers may change them
        self.misses += 1
        caught: list = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = couple(instances, osl)
        except BaseException:
            # the caller's notes take what was raised before the error (its message names
            # the row: nothing is kept)
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            raise
        notes = sorted({str(w.message) for w in caught})
        # through JSON now, so a repeat from this process and one from a file are alike
        kept = _KEPT[name] = (json.loads(json.dumps(out)), notes)
        self._write(name, kept)
        return json.loads(json.dumps(kept[0])), list(notes)

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def _read(self, name: str) -> tuple[dict, list[str]] | None:
        if self.folder is None:
            return None
        try:
            data = json.loads(self._path(name).read_text())
        except (OSError, ValueError):
            return None
        return data["out"], data["notes"]

    def _write(self, name: str, kept: tuple[dict, list[str]]) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".part")
        with os.fdopen(fd, "w") as fh:
            json.dump({"out": kept[0], "notes": kept[1]}, fh)
        os.replace(tmp, self._path(name))
