"""The faults campaign: what a demanding user's machine does to epsim while it works, tried
through the real command line (`python -m epsim.cli`, each in its own process; the harness is
`faults_harness.py`, the cache, file and sharing families `faults_files.py`).

Families (each a function of `Campaign`; `run(full=...)` picks how many of each):

- disk full: a small tmpfs filled up under `simulate --out`, `plan --out`, `calibrate --out`
  over a good profile and `validate --doc` (skipped, with the reason, where tmpfs cannot be
  mounted); a directory where a result file goes; an immutable file (`chattr +i`).
- interrupts: SIGINT, SIGTERM and SIGKILL at random moments of `simulate` and `plan` (the
  main process, as `timeout` or a supervisor signals it), each into a directory holding a
  finished earlier run; a worker killed mid-sweep (an OOM kill).
- caches: `points.jsonl` torn and tampered (a cut line, `{}`, metrics missing, a list, a
  string, a bool, garbage, deep nesting, NUL bytes), then resumed.
- referenced files: the arrival trace, skew trace, recorded loads of `init_expert_location`,
  a Hugging Face config and a profile edited between two runs into one `--out`.
- sharing: two plans on one `--out`; a different sweep (or `--no-plots`) into a used one;
  `load_results` on an interrupted or edited results directory.

Counted problems (each must be 0): `traceback`, `multi-line` (an error that is not one line),
`hang` (no exit within `EXIT_LIMIT_S` of a SIGINT/SIGTERM, or no finish within a run's limit),
`orphan` (a process outliving its plan), `stale` (a resumed or rerun answer that differs from
a fresh run's), `lost` (a user's earlier file changed or gone after a failed write, a finished
point not kept), `unmarked` (a results directory neither complete, with every file matching
its manifest, nor marked incomplete), `exit` (a wrong exit code), `note` (an expected one-line
report missing), `semaphore` (a leaked-semaphore warning).

    python -m tests.epsim.faults_campaign [--full] [--seed N]   # prints the counts table
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.epsim.faults_files import caches, referenced_files, sharing
from tests.epsim.faults_harness import (EXIT_LIMIT_S, GLOO, PROBLEMS, RUN_LIMIT_S, Campaign, alive,
                                        cache_lines, descendants, dir_state, files_of, fill,
                                        kill_tree, plan_counts, summary, table, tmpfs)

def disk_full(c: Campaign, full: bool) -> None:
    """Each writer on a full disk: one line naming the path, exit 2, the earlier files as they
    were; with space again, a complete run."""
    work = c.folder("disk-full")
    mnt = work / "mnt"
    try:
        ctx = tmpfs(mnt)
        ctx.__enter__()
    except OSError as exc:
        c.skipped.append(f"disk full: tmpfs cannot be mounted here ({exc}); the writers' disk-full "
                         f"path is covered in-process by tests/epsim/test_io_write.py")
        return
    try:
        scenario = c.scenario(work)
        jobs = [("simulate", lambda seed, d: c.simulate_args(scenario, d, "--seed", seed), "run"),
                ("plan", lambda seed, d: c.plan_args(scenario, d, "--seed", seed), "plan")]
        if full:
            profile = work / "profile.json"
            c.cli("setup", "calibrate", "--records", str(GLOO / "gloo_records.jsonl"), "--out", str(profile))
            doc = mnt / "doc.md"
            from epsim.validate.report import DOC_BEGIN, DOC_END
            doc.write_text(f"# mine\n\nbefore\n\n{DOC_BEGIN}\nold\n{DOC_END}\n\nhand-written after\n")
            jobs += [("calibrate", lambda seed, d: ["calibrate", "--records", str(GLOO / "gloo_records.jsonl"),
                                                    "--name", f"n{seed}", "--out", str(d / "profile.json")], "cal"),
                     ("validate --doc", lambda seed, d: [
                         "validate", "--profile", str(profile), "--records", str(GLOO / "gloo_records.jsonl"),
                         "--no-plots", "--no-extrapolation", "--max-mape", "1e9", "--doc", str(doc),
                         "--out", str(work / f"val{seed}")], "val")]
        for name, args, sub in jobs:
            case = f"disk-full/{name}"
            c.cases["disk full"] += 1
            target = mnt / sub
            target.mkdir(exist_ok=True)
            c.cli(case, *args("1", target))
            before = {**files_of(target), **files_of(mnt)}
            kept = cache_lines(target)                    # a cache may grow, never lose a line
            state_before = dir_state(target)
            filler = fill(mnt)
            run = c.cli(case, *args("2", target), expect=(2,))
            c.check("No space left on device" in run.err and str(mnt) in run.err, "note", case,
                    f"the error must name the path and the full disk: {run.err[-300:]}")
            after = {**files_of(target), **files_of(mnt)}
            after.pop("filler.bin", None)
            after.pop("manifest.json", None)
            lost = [n for n, h in before.items()
                    if n not in ("manifest.json", "points.jsonl") and after.get(n) != h]
            lost += [f"points.jsonl line {line[:40]}" for line in kept if line not in cache_lines(target)]
            c.check(not lost, "lost", case, f"changed or gone after the failed write: {lost}")
            state = dir_state(target)
            if state_before != "none":
                c.check(state in ("complete", "incomplete"), "unmarked", case, state)
            filler.unlink()
            c.cli(case, *args("2", target))
            if name in ("simulate", "plan"):
                c.check(dir_state(target) == "complete", "unmarked", case,
                        f"with space again: {dir_state(target)}")
    finally:
        ctx.__exit__(None, None, None)


def in_the_way(c: Campaign, full: bool) -> None:
    """A directory where a result file goes, and an immutable result file."""
    work = c.folder("in-the-way")
    scenario = c.scenario(work)
    blocked = [("simulate", lambda d: c.simulate_args(scenario, d, "--no-plots"), "summary.json"),
               ("plan", lambda d: c.plan_args(scenario, d, "--no-plots"), "results.csv")]
    immutable = [("simulate", lambda d, seed: c.simulate_args(scenario, d, "--no-plots", "--seed", seed),
                  "summary.json"),
                 ("plan", lambda d, seed: c.plan_args(scenario, d, "--no-plots", "--seed", seed),
                  "plan.json")]
    for name, args, blocker in blocked if full else blocked[:1]:
        case = f"directory-in-the-way/{name}"
        c.cases["in the way"] += 1
        out = work / f"dir-{name}"
        (out / blocker).mkdir(parents=True)
        run = c.cli(case, *args(out), expect=(2,))
        c.check(blocker in run.err and "directory" in run.err, "note", case, run.err[-300:])
    for name, args, target in immutable if full else immutable[1:]:
        case = f"immutable-file/{name}"
        out = work / f"imm-{name}"
        c.cli(case, *args(out, "1"))
        if subprocess.run(["chattr", "+i", str(out / target)], capture_output=True).returncode:
            c.skipped.append(f"immutable file: chattr +i is not supported on {out}")
            return
        c.cases["in the way"] += 1
        try:
            before = files_of(out)
            run = c.cli(case, *args(out, "2"), expect=(2,))
            c.check(target in run.err, "note", case, run.err[-300:])
            c.check(files_of(out).get(target) == before[target], "lost", case, f"{target} changed")
            c.check(dir_state(out) in ("complete", "incomplete"), "unmarked", case, dir_state(out))
        finally:
            subprocess.run(["chattr", "-i", str(out / target)], capture_output=True)


# -- interrupts ----------------------------------------------------------------------------------
# to the main process (as `timeout` or a supervisor sends them), and Ctrl-C to the whole group
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT-group": signal.SIGINT}
# 0: it had finished; -2 / -15: the signal came before the command started or after it
# ended (while Python started or shut down), where the signal's own exit is the right one
EXPECTED_EXIT = {"INT": (0, 130, -2), "TERM": (0, 143, -15), "KILL": (0, -9),
                 "INT-group": (0, 130, -2)}


def interrupts(c: Campaign, full: bool) -> None:
    """Signals at random moments of simulate and plan, into a directory holding an earlier
    finished run; then a rerun, compared with a fresh one."""
    work = c.folder("interrupts")
    scenario = c.scenario(work, duration_s=1.0)
    ref = {}
    for command in ("simulate", "plan"):
        out = work / f"ref-{command}"
        args = (c.simulate_args(scenario, out, "--seed", "0") if command == "simulate"
                else c.plan_args(scenario, out, "--seed", "0", workers=2))
        run = c.cli(f"interrupt/reference {command}", *args)
        ref[command] = (run.seconds, summary(out) if command == "simulate" else table(out))
    trials = [(cmd, sig) for cmd in ("simulate", "plan") for sig in SIGNALS]
    if full:
        trials = trials * 4
    else:
        trials = [("simulate", "INT"), ("plan", "TERM"), ("plan", "INT-group")]
    for i, (command, sig) in enumerate(trials):
        delay = c.rng.uniform(0.5, ref[command][0] * 1.1)
        case = f"interrupt/{command} SIG{sig} at {delay:.1f} s"
        c.cases["interrupts"] += 1
        out = work / f"{command}-{i}"
        args = (lambda seed: c.simulate_args(scenario, out, "--seed", seed)) if command == "simulate" \
            else (lambda seed: c.plan_args(scenario, out, "--seed", seed, workers=2))
        c.cli(case, *args("1"))                           # an earlier finished run
        earlier = results_of(out)
        proc = c.popen(*args("0"))
        time.sleep(delay)
        tree = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            (os.killpg if sig == "INT-group" else os.kill)(proc.pid, SIGNALS[sig])
        c.wait(proc, case, EXPECTED_EXIT[sig], EXIT_LIMIT_S if sig != "KILL" else RUN_LIMIT_S,
               f"still running {EXIT_LIMIT_S:g} s after SIG{sig}")
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in tree):
            time.sleep(0.2)
        orphans = [p for p in tree if alive(p)]
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        c.check(not orphans, "orphan", case, f"{len(orphans)} process(es) outlived it")
        state = dir_state(out)
        c.check(state in ("complete", "incomplete"), "unmarked", case, state)
        # points.jsonl is a cache (the manifest's `caches`): a plan stopped before it replaced
        # the earlier run's results has only added lines to it, which leaves the earlier run whole
        if state == "complete" and results_of(out) != earlier:
            # the interrupted run finished its files (the signal came late): they must be a
            # fresh run's, nothing of the earlier run mixed in
            fresh = summary(out) if command == "simulate" else table(out)
            c.check(fresh == ref[command][1], "stale", case,
                    "a complete directory that is neither the earlier run nor a fresh one")
        kept = len(cache_lines(out)) if command == "plan" else 0
        torn = [ln for ln in cache_lines(out) if not ln.startswith("{") or not ln.endswith("}")]
        rerun = c.cli(case + " (rerun)", *args("0"))
        if rerun.rc != 0:
            continue
        c.check(dir_state(out) == "complete", "unmarked", case + " (rerun)", dir_state(out))
        if command == "simulate":
            c.check(summary(out) == ref["simulate"][1], "stale", case, "rerun summary differs")
        else:
            c.check(table(out) == ref["plan"][1], "stale", case, "rerun table differs from a fresh run")
            cached = plan_counts(out)["cached"]
            # every whole line kept is a point the rerun need not compute (seed 1's lines
            # are other points; the seed-0 sweep shares none with them)
            c.check(cached >= kept - 4 - len(torn), "lost", case,
                    f"{kept} cache lines kept, {cached} reused")


def results_of(folder: Path) -> dict[str, str]:
    """`files_of` less the plan's point cache, which a run may grow without touching results."""
    return {name: digest for name, digest in files_of(folder).items() if name != "points.jsonl"}


def dead_worker(c: Campaign, full: bool) -> None:
    """A worker killed mid-sweep (an OOM kill): its point fails with the reason, the sweep
    finishes, a rerun recomputes only that point and gives a fresh run's table."""
    work = c.folder("dead-worker")
    scenario = c.scenario(work, duration_s=60.0)           # points of seconds each
    num_points = 6
    sweep = ["--sweep", f"seed=0:{num_points - 1}:+1"]
    args = ["plan", str(scenario), *sweep, "--workers", "2", "--no-keep-up", "--no-progress",
            "--no-plots"]
    ref = work / "ref"
    c.cli("dead-worker/reference", *args, "--out", str(ref))
    for trial in range(3 if full else 1):
        case = f"dead-worker/{trial}"
        c.cases["dead worker"] += 1
        out = work / f"out{trial}"
        proc = c.popen(*args, "--out", str(out))
        victim, deadline = None, time.time() + RUN_LIMIT_S
        while victim is None and time.time() < deadline and proc.poll() is None:
            workers = [p for p in descendants(proc.pid)
                       if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
            # with 3+ points still to finish both workers are busy: the victim runs a point
            if workers and 1 <= len(cache_lines(out)) <= num_points - 3:
                victim = workers[trial % len(workers)]
            time.sleep(0.2)
        if victim is None:
            c.problem("exit", case, "no worker to kill before the plan ended (make the points longer)")
            kill_tree(proc)
            proc.communicate()
            continue
        os.kill(victim, signal.SIGKILL)
        c.wait(proc, case, (0,), hang="the sweep did not finish after a worker died")
        rows = table(out) if (out / "results.csv").is_file() else []
        failed = [r for r in rows if r["error"]]
        c.check(len(failed) == 1 and "killed by SIGKILL" in failed[0]["error"], "note", case,
                f"failed rows: {[r['error'] for r in failed]}")
        rerun = c.cli(case + " (rerun)", *args, "--out", str(out))
        if rerun.rc == 0:
            c.check(plan_counts(out)["computed"] == 1, "stale", case,
                    f"rerun computed {plan_counts(out)['computed']} points, expected the failed one")
            c.check(table(out) == table(ref), "stale", case, "rerun table differs from a fresh run")



FAMILIES = (("disk full", disk_full), ("in the way", in_the_way), ("interrupts", interrupts),
            ("dead worker", dead_worker), ("caches", caches), ("referenced files", referenced_files),
            ("sharing", sharing))


def run(root: Path, full: bool = False, seed: int = 0, only: tuple[str, ...] = ()) -> Campaign:
    campaign = Campaign(root, seed)
    for name, family in FAMILIES:
        if not only or name in only:
            start = time.perf_counter()
            family(campaign, full)
            campaign.seconds[name] = time.perf_counter() - start
    return campaign


def report(c: Campaign) -> str:
    """A markdown table: cases per family and each problem's count, then the problems."""
    lines = ["| family | cases | wall s | " + " | ".join(PROBLEMS) + " |",
             "|---|---:|---:|" + "---:|" * len(PROBLEMS)]
    for family in [name for name, _ in FAMILIES if c.cases[name]] + ["all"]:
        counts = Counter(kind for kind, case, _ in c.problems if family == "all" or _family(case) == family)
        cases = sum(c.cases.values()) if family == "all" else c.cases[family]
        seconds = sum(c.seconds.values()) if family == "all" else c.seconds.get(family, 0.0)
        lines.append(f"| {family} | {cases} | {seconds:.0f} | "
                     + " | ".join(str(counts[k]) for k in PROBLEMS) + " |")
    lines += [f"- skipped: {s}" for s in c.skipped]
    lines += [f"- {kind}: {case}: {detail}" for kind, case, detail in c.problems]
    return "\n".join(lines)


def _family(case: str) -> str:
    prefixes = {"disk-full": "disk full", "directory-in-the-way": "in the way",
                "immutable-file": "in the way", "interrupt": "interrupts",
                "dead-worker": "dead worker", "cache": "caches", "edited-file": "referenced files"}
    head = case.split("/", 1)[0]
    return prefixes.get(head, "sharing" if "/" not in case else head)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="every case (default: the CI subset)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the interrupt moments")
    parser.add_argument("--only", action="append", default=[], help="a family (repeatable)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        campaign = run(Path(tmp), args.full, args.seed, tuple(args.only))
    print(report(campaign))
    print(f"\n{sum(campaign.cases.values())} cases in {time.perf_counter() - start:.0f} s wall "
          f"({'full' if args.full else 'CI subset'}, seed {args.seed})")
    return int(bool(campaign.problems))


if __name__ == "__main__":
    sys.exit(main())
