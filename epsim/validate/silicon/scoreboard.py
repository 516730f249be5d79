"""The silicon scoreboard's run: every in-scope row mapped, predicted by epsim and by the peer, in
parallel processes (or Ray), one JSON-able entry per row.

An entry: the row's identity and bucket, what was measured, `epsim` (`epsim.validate.silicon.run`)
and `peer` (`epsim.validate.silicon.peer`, None when not run). Rows run as independent tasks
(`epsim.plan.executors.execute`); entries come back in the rows' order whatever the completion
order, and depend only on the row, the flags and the installed code.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field

from epsim.plan.executors import execute, progress_bar
from epsim.validate.silicon import gaps
from epsim.validate.silicon.candidates import predict_plan
from epsim.validate.silicon.checkpoint import Checkpoint
from epsim.validate.silicon.checkpoint import row_key as checkpoint_key
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.memo import Memo
from epsim.validate.silicon.peer import estimate, row_key
from epsim.validate.silicon.resolve import resolve
from epsim.validate.silicon.rows import SiliconRow, out_of_scope, sample
from epsim.validate.silicon.run import failed_entry, predict

EP_BUCKETS = ((1, 1, "EP 1"), (2, 8, "EP 2-8"), (9, 10**9, "EP >8"))


@dataclass(frozen=True)
class RowTask:
    """What a worker needs for one row."""

    row: SiliconRow
    approximate: bool
    peer: bool
    memo: str | None = None      # the run's memo folder (None: no memo), and whether the
    memo_shared: bool = True     # workers share it (`epsim.validate.silicon.memo`)


@dataclass
class Scoreboard:
    """A finished run: entries of the in-scope rows, out-of-scope counts, how it ran."""

    entries: list[dict]
    out_of_scope: dict[str, int]
    source: str
    approximate: bool
    peer: str | None                 # the peer's name and version, None when not run
    workers: int
    wall_s: float
    sample: str = ""
    extra: dict = field(default_factory=dict)


def ep_bucket(size: int) -> str:
    return next(label for low, high, label in EP_BUCKETS if low <= size <= high)


def mode_label(row: SiliconRow, from_recipe: bool = False) -> str:
    """The row's mode as a bucket: rows whose workers (or whole P/D layout) come from
    InferenceX's recipe groups, or are not known, are never mixed with rows that state them."""
    if from_recipe:
        return "disagg, workers from InferenceX"
    if row.mode == "agg":
        return "agg"
    return "disagg" if row.workers_stated else "disagg, workers not stated"


def layout(row: SiliconRow) -> str:
    """The row's parallelism per side, compactly (AIConfigurator's terms)."""
    def one(side) -> str:
        workers = f" x{side.num_workers}" if side.num_workers not in (None, 1) else ""
        return (f"tp{side.tp_size} dp{side.attention_dp_size} moe_tp{side.moe_tp_size} "
                f"ep{side.moe_ep_size}{workers}")
    if row.mode == "agg":
        return one(row.agg)
    return f"P {one(row.prefill)} / D {one(row.decode)}"


def _ours(row: SiliconRow, approximate: bool, memo: Memo | None = None) -> dict:
    exact = plan_row(row)
    if exact.expressible or not approximate:
        return predict(exact, memo)
    # the nearest expressible form; what the row lacks stays the exact plan's
    ours = predict_plan(plan_row(row, approximate=True), memo)
    exact_entry = predict(exact)
    ours.update(missing=exact_entry["missing"],
                reasons=exact_entry["reasons"] + [r for r in ours["reasons"]
                                                  if r not in exact_entry["reasons"]])
    return ours


def row_task(task: RowTask) -> dict:
    """One row's entry (module doc). Runs in a worker process."""
    row = task.row
    ran = resolve(row)
    as_run = ran.row if ran.error is None else row      # the layout InferenceX ran, where known
    entry = {"id": row.id, "system": row.system, "mode": row.mode, "model": row.model,
             "model_path": row.model_path,
             "version": row.backend_version, "image": row.image, "precision": row.precision,
             "gemm_quant_mode": row.gemm_quant_mode, "moe_quant_mode": row.moe_quant_mode,
             "isl": row.isl, "osl": row.osl, "concurrency": row.concurrency, "layout": layout(row),
             "layout_as_run": layout(as_run),
             "bucket": {"system": row.system, "mode": mode_label(row, ran.from_recipe), "model": row.model,
                        "ep": ep_bucket(as_run.tpot_side.moe_ep_size)},
             "gaps": gaps.named(row, ran),
             "measured": {"ttft_ms": row.ttft_ms, "tpot_ms": row.tpot_ms}}
    start, cpu = time.perf_counter(), time.process_time()
    try:
        entry["epsim"] = _ours(row, task.approximate,
                               None if task.memo is None else Memo(task.memo, task.memo_shared))
    except Exception as exc:         # a bug in the mapping: this row fails with where, not the run
        entry["epsim"] = failed_entry(exc)
    entry["epsim"]["wall_s"] = round(time.perf_counter() - start, 3)     # mapping included
    # the worker's own time on a core: what the row costs whatever else the machine runs
    entry["epsim"]["cpu_s"] = round(time.process_time() - cpu, 3)
    if task.peer:
        entry["peer"] = estimate(row)
    else:
        entry["peer"] = None
    return entry


def select(rows: list[SiliconRow], num: int | None = None,
           seed: int = 0) -> tuple[list[SiliconRow], dict[str, int]]:
    """The in-scope rows (`num` of them drawn by `seed` when given, `rows.sample`) and the
    out-of-scope rows counted by reason."""
    scope: dict[str, int] = {}
    keep = []
    for row in rows:
        reason = out_of_scope(row)
        if reason is None:
            keep.append(row)
        else:
            scope[reason] = scope.get(reason, 0) + 1
    return sample(keep, num, seed), scope


def run_rows(rows: list[SiliconRow], approximate: bool = False, peer: bool = True,
             executor: str = "local", workers: int | None = None, progress: bool = False,
             ray_address: str | None = None,
             peer_known: dict[str, dict] | None = None,
             checkpoint: Checkpoint | None = None) -> tuple[list[dict], float, int]:
    """Entries of the in-scope `rows` (in their order), the wall seconds and how many entries
    came from `checkpoint` (finished by an earlier run of this code, `epsim.validate.silicon.
    checkpoint`; the others are added to it as they finish); a progress bar on stderr when
    `progress`. `peer_known`: the peer's cached entries by `peer.row_key` (those rows are not
    asked again; their entries say `cached`); answers found in this run are added to it."""
    known = peer_known if peer_known is not None else {}
    kept = checkpoint if checkpoint is not None else Checkpoint(None, "")
    keys = [row_key(row) for row in rows] if peer else [None] * len(rows)
    # rows that repeat another's simulations take its answers (`epsim.validate.silicon.memo`):
    # local workers share them through a folder of this run's, Ray's each keep their own
    memo_dir = tempfile.TemporaryDirectory(prefix="epsim-silicon-memo-")
    tasks = [RowTask(row, approximate, peer and key not in known, memo_dir.name,
                     executor != "ray") for row, key in zip(rows, keys)]
    kept_keys = [checkpoint_key(row.id, approximate) for row in rows]
    entries: list[dict | None] = [None] * len(tasks)
    for index, (task, key) in enumerate(zip(tasks, kept_keys)):
        entry = kept.entries.get(key)
        if entry is not None and not (task.peer and entry.get("peer") is None):
            entries[index] = entry           # a row that still needs the peer runs again
    todo = [index for index, entry in enumerate(entries) if entry is None]
    start = time.perf_counter()
    with progress_bar(len(todo), "silicon rows", progress) as advance:
        def on_done(position: int, entry: dict) -> None:
            index = todo[position]
            entries[index] = entry
            kept.add(kept_keys[index], entry)
            advance(1)
        with memo_dir:
            execute([tasks[index] for index in todo], on_done, executor=executor,
                    workers=workers, ray_address=ray_address, fn=row_task)
    wall_s = time.perf_counter() - start
    for entry, task, key in zip(entries, tasks, keys):
        if key is None:
            continue
        if task.peer:
            known[key] = entry["peer"]
        else:
            entry["peer"] = {**known[key], "cached": True}
    return entries, wall_s, len(tasks) - len(todo)
