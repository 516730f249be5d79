"""The silicon scoreboard's speed, this checkout against another (default: the commit before the
quiet-decode leap): epsim's prediction of the same sample of in-scope silicon rows
(`epsim validate --silicon --approximate --sample N --seed S --no-peer`'s rows, as the whole
in-scope set is recorded: a row the simulator cannot express as stated runs its nearest
expressible form, a row several deployments fit each of them; `scoreboard.row_task`) in two
worker processes, one per checkout, taking turns row by row so both see the machine in the same
state. Per checkout: CPU seconds (the process's, which other processes on a shared machine move
little) and wall seconds per row, rows a minute on one core by CPU time, the whole in-scope set's
projected wall time on 2 workers (the sample's mean CPU seconds a row, refused rows included,
times the in-scope rows, over 2), and whether the two predict the same TTFT and TPOT bits on
every row (a change that only speeds the code must; one that changes the random draws, such as
the alias-table sampler against a checkout before it, moves them by draw noise: the table then
gives each row's relative differences).

Rows that repeat another's simulations (the same recipe on two dates, an ambiguous row's
candidate that is another row's plan) take the first one's answer in a whole-set run
(`epsim.validate.silicon.memo`, the same bits); the sample's rows run without it, each
simulated (what the code costs), and the whole-set projection of this checkout is then scaled
by the memo's share: every in-scope row planned by this checkout (`memo.key` of each row and
candidate), each key's first row and candidate weighted by its row-seconds in the whole-set
record (`benchmarks/results/silicon_rows.json.gz`, per row, split evenly over its candidates),
over all of them.

    python benchmarks/silicon_speed.py [--rows 20] [--seed 7] [--against REV] [--csv PATH]
        [--ids ID,ID,...] [--repeat N] [--write]

Both projections end with the whole-set record's 2-worker schedule (its rows' seconds in its
order, as `epsim.plan.pool` feeds them; a memo hit costs ~0 there), as recorded and scaled by
this run's CPU ratio (`record_schedule`). `--ids`: the named rows, chosen rather than drawn
(the heaviest, say), recorded as `silicon_speed_ids.md`; the schedule then scales those rows
alone, each by its own ratio.

`--repeat N`: every row N times in each worker (the turns' order swapped each time), each row's
CPU and wall seconds the least of its N (a shared machine's load only adds), its TTFT and TPOT
the same bits every time or the run stops.

`--csv`: another silicon-sample CSV (the test fixture, `tests/epsim/validate/data/
silicon_fixture.csv`, whose rows all run with `--rows` at least their number), recorded as
`silicon_speed_<its name>.md`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recorded import write_recorded

IN_SCOPE_ROWS = 916         # `epsim validate --silicon --approximate`'s in-scope rows

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "silicon_speed.md"
RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
BEFORE = "6b08df3"          # main before the quiet-decode leap and the attention table (issue 39)

# a worker that predicts rows of the silicon sample with the checkout on sys.path[0]: one
# long-lived process per checkout, reading a row index from stdin, answering one JSON line
_WORKER = """
import gc, json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from epsim.validate.silicon.rows import default_csv_path, read_rows
from epsim.validate.silicon.scoreboard import RowTask, row_task, select
rows, _ = select(read_rows(sys.argv[4] or default_csv_path()), int(sys.argv[2]), int(sys.argv[3]))
if sys.argv[5]:
    ids = sys.argv[5].split(",")
    rows = sorted((r for r in rows if r.id in ids), key=lambda r: ids.index(r.id))
print(len(rows), flush=True)
for line in sys.stdin:
    row = rows[int(line)]
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    entry = row_task(RowTask(row, True, False))["epsim"]
    print(json.dumps({"id": row.id, "cpu_s": time.process_time() - cpu,
                      "wall_s": time.perf_counter() - wall, "status": entry["status"],
                      "ttft_ms": entry["ttft_ms"], "tpot_ms": entry["tpot_ms"]}), flush=True)
"""


def machine() -> str:
    """The CPU, its count and the load when the run started (the machine is shared)."""
    try:
        model = next(line.split(":", 1)[1].strip() for line in
                     Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{model}, {os.cpu_count()} CPUs, load average {load:.1f} at the start (the machine "
            f"is shared with other sessions' processes: wall seconds stretch with their load, "
            f"CPU seconds much less)")


# the memo's share of the whole-set record's row-seconds, computed by the checkout on sys.path[0]
_MEMO_SHARE = """
import gzip, json, sys, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.memo import key
from epsim.validate.silicon.rows import default_csv_path, read_rows
from epsim.validate.silicon.scoreboard import select
record = {r["id"]: r["epsim"] for r in json.load(gzip.open(sys.argv[2]))["rows"]}
rows, _ = select(read_rows(default_csv_path()))
first, units, total = {}, 0, sum(e["wall_s"] for e in record.values())
for row in rows:
    exact = plan_row(row)
    plan = exact if exact.expressible else plan_row(row, approximate=True)
    every = plan.candidates or (plan,)
    for one in every:
        if one.expressible:
            units += 1
            first.setdefault(key(one.instances, row.osl), record[row.id]["wall_s"] / len(every))
print(json.dumps({"units": units, "distinct": len(first), "share": sum(first.values()) / total}))
"""


def memo_share(tree: Path) -> dict:
    """`{"units", "distinct", "share"}`: rows and candidates simulated in the whole set, their
    distinct memo keys, and the share of the record's row-seconds the memo leaves to simulate
    (module doc), as `tree`'s code plans the rows."""
    proc = subprocess.run([sys.executable, "-c", _MEMO_SHARE, str(tree), str(RECORD)],
                          capture_output=True, text=True, check=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    return json.loads(proc.stdout.splitlines()[-1])


def run(trees: dict[str, Path], num_rows: int, seed: int, csv: str = "",
        ids: str = "", repeat: int = 1) -> dict[str, list[dict]]:
    """Each row in each checkout's worker, the workers taking turns row by row (`csv`: the
    rows' file, "": the installed sample; `ids`: comma-separated row ids, the in-scope rows of
    the file with those ids in that order, "": the sample of `num_rows` by `seed`)."""
    workers = {name: subprocess.Popen([sys.executable, "-c", _WORKER, str(tree),
                                       str(10**9 if ids else num_rows), str(seed), csv,
                                       ids], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
               for name, tree in trees.items()}
    out: dict[str, list[dict]] = {name: [] for name in trees}
    try:
        counts = {int(w.stdout.readline()) for w in workers.values()}
        if len(counts) != 1:
            raise RuntimeError(f"the checkouts select different rows ({sorted(counts)})")
        num = counts.pop()
        for time_index in range(repeat):
            order = list(workers.items())
            for index in range(num):
                for name, worker in order if time_index % 2 == 0 else order[::-1]:
                    worker.stdin.write(f"{index}\n")
                    worker.stdin.flush()
                    entry = json.loads(worker.stdout.readline())
                    print(name, entry, file=sys.stderr, flush=True)
                    if time_index == 0:
                        out[name].append(entry)
                        continue
                    kept = out[name][index]
                    if (kept["ttft_ms"], kept["tpot_ms"]) != (entry["ttft_ms"], entry["tpot_ms"]):
                        raise RuntimeError(f"{name}: row {entry['id']} predicted other bits on "
                                           f"its run {time_index + 1}")
                    for key in ("cpu_s", "wall_s"):
                        kept[key] = min(kept[key], entry[key])
    finally:
        for worker in workers.values():
            worker.stdin.close()
            worker.wait()
    return out


def schedule_s(seconds: list[float], workers: int = 2) -> float:
    """Wall seconds of tasks of `seconds` run in their order on `workers` processes, each to the
    first free one (`epsim.plan.pool`, which feeds the whole set's rows in file order)."""
    free = [0.0] * workers
    for one in seconds:
        free[free.index(min(free))] += one
    return max(free)


def record_schedule(out: dict[str, list[dict]], measured_only: bool) -> str:
    """The whole-set record's 2-worker schedule (its rows' `wall_s` in its order; a memo hit
    costs ~0 there), then with this run's CPU ratio applied: to every row (the sample's
    overall now / before, a random sample's estimate) or, `measured_only`, to the measured
    rows alone, each by its own ratio (chosen rows: the others as recorded)."""
    record = [(r["id"], r["epsim"]["wall_s"]) for r in json.load(gzip.open(RECORD))["rows"]]
    ratio = {a["id"]: b["cpu_s"] / a["cpu_s"] for a, b in zip(out["then"], out["now"])
             if a["cpu_s"] > 0}
    overall = sum(r["cpu_s"] for r in out["now"]) / sum(r["cpu_s"] for r in out["then"])
    scaled = [wall * ratio.get(rid, 1.0) if measured_only else wall * overall
              for rid, wall in record]
    how = ("the measured rows' own CPU ratios applied to their record seconds, the others' "
           "as recorded" if measured_only else
           f"every row's record seconds times this sample's CPU ratio ({overall:.3f})")
    return (f" The whole-set record's row-seconds ({sum(w for _, w in record):.0f} s) on 2 "
            f"workers in the record's order: {schedule_s([w for _, w in record]) / 60:.1f} min "
            f"as recorded; {schedule_s(scaled) / 60:.1f} min with {how}.")


def report(out: dict[str, list[dict]], against: str, num_rows: int, seed: int,
           csv: str = "", memo: dict | None = None, ids: str = "", repeat: int = 1) -> str:
    then, now = out["then"], out["now"]
    same = all((a["ttft_ms"], a["tpot_ms"], a["status"]) == (b["ttft_ms"], b["tpot_ms"], b["status"])
               for a, b in zip(then, now))
    run_rows = [i for i, a in enumerate(then) if a["status"] not in ("cannot_express",)]
    chosen = (f"the {len(then)} rows named by `--ids`" if ids else
              f"`--approximate --sample {num_rows} --seed {seed}` of the in-scope rows")
    lines = [f"Rows: {chosen}" + (f" of `{csv}`" if csv else "") + ", "
             f"{len(run_rows)} simulated (the others cannot be expressed: mapped, not run)"
             + (f", each {repeat} times in each worker, its least CPU and wall seconds kept"
                if repeat > 1 else "") + ". "
             f"Machine: {machine()}.",
             "", "| checkout | CPU s | wall s | rows/min on one core (CPU) | rows/min, 2 workers "
             "(CPU, est.) | rows/min (wall, this run) |", "|---|---|---|---|---|---|"]
    for name, label in (("then", f"`{against}` (before)"), ("now", "this checkout")):
        cpu = sum(r["cpu_s"] for r in out[name])
        wall = sum(r["wall_s"] for r in out[name])
        lines.append(f"| {label} | {cpu:.1f} | {wall:.1f} | {len(then) / cpu * 60:.1f} | "
                     f"{2 * len(then) / cpu * 60:.1f} | {len(then) / wall * 60:.1f} |")
    cpu_then = sum(r["cpu_s"] for r in then)
    cpu_now = sum(r["cpu_s"] for r in now)
    whole_min = {name: IN_SCOPE_ROWS * sum(r["cpu_s"] for r in out[name]) / len(then) / 2 / 60
                 for name in out}
    projected = "" if csv or ids else (
        f" The whole in-scope set ({IN_SCOPE_ROWS} rows) on 2 workers, projected from this "
        f"sample's CPU seconds: {whole_min['then']:.0f} min before, **{whole_min['now']:.0f} "
        f"min** now.")
    if memo is not None and not csv and not ids:
        projected += (
            f" With the run's memo, which simulates {memo['distinct']} distinct sets of "
            f"instances of the {memo['units']} rows and candidates (the first of each: "
            f"{100 * memo['share']:.1f} % of the whole-set record's row-seconds), "
            f"**{whole_min['now'] * memo['share']:.0f} min** now "
            f"({whole_min['then'] / (whole_min['now'] * memo['share']):.2f}x the before).")
    if not csv:
        projected += record_schedule(out, measured_only=bool(ids))
    lines += ["", f"Speed-up by CPU time: **{cpu_then / cpu_now:.2f}x**.{projected} Same TTFT "
              f"and TPOT bits on every row: **{'yes' if same else 'no'}**"
              + ("." if same else f" (the draws changed: TPOT differs by at most "
                 f"{max_diff_pct(then, now, 'tpot_ms'):.3f} %, TTFT by at most "
                 f"{max_diff_pct(then, now, 'ttft_ms'):.3f} %, per row below)."), "",
              "| row | status | CPU s before | CPU s now | ratio | TTFT now / before | "
              "TPOT now / before |", "|---|---|---|---|---|---|---|"]
    for a, b in zip(then, now):
        if a["status"] == "cannot_express":
            continue
        lines.append(f"| `{a['id']}` | {b['status']} | {a['cpu_s']:.1f} | {b['cpu_s']:.1f} | "
                     f"{a['cpu_s'] / max(b['cpu_s'], 1e-9):.1f} | {_ratio(a, b, 'ttft_ms')} | "
                     f"{_ratio(a, b, 'tpot_ms')} |")
    return "\n".join(lines)


def _ratio(then: dict, now: dict, key: str) -> str:
    if not then[key] or now[key] is None:
        return "-"
    return f"{now[key] / then[key]:.4f}"


def max_diff_pct(then: list[dict], now: list[dict], key: str) -> float:
    """The largest |now / before - 1| in % of `key` over the rows both predict."""
    return max((abs(b[key] / a[key] - 1.0) * 100 for a, b in zip(then, now)
                if a[key] and b[key] is not None), default=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--rows", type=int, default=20, help="rows in the sample (default 20)")
    parser.add_argument("--seed", type=int, default=7, help="the sample's seed (default 7)")
    parser.add_argument("--against", default=BEFORE, help=f"the other checkout's commit "
                                                          f"(default {BEFORE})")
    parser.add_argument("--csv", default="", help="a silicon-sample CSV (default: the installed "
                                                   "one), relative to the checkout")
    parser.add_argument("--ids", default="", help="comma-separated row ids to run instead of "
                                                   "a sample (in that order)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row in each worker, "
                                                              "the least seconds kept (default 1)")
    parser.add_argument("--write", action="store_true", help=f"record {RESULT.name} (with "
                                                             f"--csv: silicon_speed_<name>.md; "
                                                             f"with --ids: silicon_speed_ids.md)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat: {args.repeat} is not allowed; runs of each row: an integer >= 1")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        out = run({"then": Path(tmp), "now": ROOT}, args.rows, args.seed, args.csv, args.ids,
                  args.repeat)
    memo = None if args.csv or args.ids else memo_share(ROOT)
    body = report(out, args.against, args.rows, args.seed, args.csv, memo, args.ids, args.repeat)
    print(body)
    if args.write:
        result = (RESULT.with_name(f"silicon_speed_{Path(args.csv).stem}.md") if args.csv else
                  RESULT.with_name("silicon_speed_ids.md") if args.ids else RESULT)
        csv = ((f" --csv {args.csv}" if args.csv else "") + (f" --ids {args.ids}" if args.ids else "")
               + (f" --repeat {args.repeat}" if args.repeat > 1 else ""))
        write_recorded(result, "The silicon scoreboard's speed, before and after",
                       f"nice python benchmarks/silicon_speed.py --rows {args.rows} --seed "
                       f"{args.seed} --against {args.against}{csv} --write", started, body)
        print(f"wrote {result.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
