"""The faults campaign's cache and file families (`faults_campaign.py` runs them): torn and
tampered `points.jsonl`, files a scenario references edited between runs, and results
directories shared by two plans, reused by another sweep, or read back unfinished."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import yaml

from tests.epsim.bad_input_cases import SCENARIO
from tests.epsim.faults_harness import (EXIT_LIMIT_S, REPO, RUN_LIMIT_S, Campaign, cache_lines,
                                        dir_state, files_of, plan_counts, table)

def _tamper(kind: str, lines: list[str]) -> tuple[list[str], int]:
    """`lines` of points.jsonl damaged by `kind`; returns (lines, points now missing)."""
    entry = json.loads(lines[0])
    metrics = entry["metrics"]
    first = dict(entry)
    if kind == "torn-last-line":
        return lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], 1
    if kind == "empty-object":
        return [json.dumps({})] + lines[1:], 1
    if kind == "metrics-empty":
        first["metrics"] = {}
    elif kind == "metric-missing":
        first["metrics"] = {k: v for k, v in list(metrics.items())[1:]}
    elif kind == "metrics-list":
        first["metrics"] = list(metrics.values())
    elif kind == "metrics-string":
        first["metrics"] = "fast"
    elif kind == "metric-string":
        first["metrics"] = {**metrics, next(iter(metrics)): "12"}
    elif kind == "metric-bool":
        first["metrics"] = {**metrics, next(iter(metrics)): True}
    elif kind == "key-number":
        first["key"] = 12345
    elif kind == "garbage":
        return ["\x00\x07not json {{"] + lines[1:], 1
    elif kind == "deep-nesting":
        return ["[" * 100_000 + "]" * 100_000] + lines[1:], 1
    elif kind == "duplicate-line":
        return lines + [lines[0]], 0
    elif kind == "unknown-key":
        return lines + [json.dumps({**entry, "key": "0123456789abcdef"})], 0
    else:
        raise ValueError(kind)
    return [json.dumps(first)] + lines[1:], 1


TAMPERS = ("torn-last-line", "empty-object", "metrics-empty", "metric-missing", "metrics-list",
           "metrics-string", "metric-string", "metric-bool", "key-number", "garbage",
           "deep-nesting", "duplicate-line", "unknown-key")


def caches(c: Campaign, full: bool) -> None:
    """Tampered caches: reported in one note, recomputed, never counted as done; the resumed
    table is a fresh run's."""
    work = c.folder("caches")
    scenario = c.scenario(work)
    ref = work / "ref"
    c.cli("cache/reference", *c.plan_args(scenario, ref, "--no-plots"))
    good = cache_lines(ref)
    kinds = TAMPERS if full else ("torn-last-line", "metrics-empty", "metrics-list", "duplicate-line")
    for kind in kinds:
        case = f"cache/{kind}"
        c.cases["caches"] += 1
        out = work / kind
        shutil.copytree(ref, out)
        lines, missing = _tamper(kind, list(good))
        (out / "points.jsonl").write_text("\n".join(lines) + ("" if kind == "torn-last-line" else "\n"))
        run = c.cli(case, *c.plan_args(scenario, out, "--no-plots"))
        if run.rc != 0:
            continue
        notes = [line for line in run.out.splitlines() if "damaged line" in line]
        c.check(len(notes) == (1 if missing else 0), "note", case,
                f"{len(notes)} damaged-line note(s): {notes}")
        c.check(plan_counts(out)["computed"] == missing, "stale", case,
                f"computed {plan_counts(out)['computed']}, expected {missing}")
        c.check(table(out) == table(ref), "stale", case, "table differs from a fresh run's")
        torn = [ln for ln in cache_lines(out) if not ln.endswith("}")]
        c.check(not torn, "stale", case, f"torn lines left in the cache: {torn[:1]}")


# -- referenced files ----------------------------------------------------------------------------
def _referencing(folder: Path, kind: str, variant: int) -> tuple[Path, Path]:
    """A scenario referencing a file of `kind` (written in `variant` 0 or 1); (scenario, file)."""
    from epsim.zoo import get_model
    model = get_model("Qwen3-30B-A3B")
    rng = random.Random(variant)
    data = {**SCENARIO, "workload": {**SCENARIO["workload"], "duration_s": 0.5}}
    if kind == "arrivals-trace":
        path = folder / "arrivals.csv"
        gap = 0.02 if variant == 0 else 0.002            # ten times denser
        path.write_text("arrival_s\n" + "".join(f"{i * gap:.6f}\n" for i in range(int(0.5 / gap))))
        data["workload"] = {**data["workload"], "arrivals": {"kind": "trace", "path": path.name}}
    elif kind == "skew-trace":
        path = folder / "skew.jsonl"
        hot = 0 if variant == 0 else 77
        rows = [[[50.0 if e == hot else rng.random() for e in range(model.num_experts)]
                 for _ in range(model.num_moe_layers)] for _ in range(3)]
        path.write_text("".join(json.dumps({"loads": r}) + "\n" for r in rows))
        data["workload"] = {**data["workload"], "skew": {"kind": "trace", "path": path.name}}
    elif kind == "recorded-loads":
        path = folder / "loads.json"
        hot = 3 if variant == 0 else 100
        path.write_text(json.dumps([[100.0 if e == hot else 1.0 for e in range(model.num_experts)]
                                    for _ in range(model.num_moe_layers)]))
        data["deployment"] = {**data["deployment"], "init_expert_location": path.name,
                              "ep_num_redundant_experts": 2}
    elif kind == "hf-config":
        path = folder / "config.json"
        from tests.epsim.bad_input_cases import HF_CONFIG
        path.write_text(json.dumps({**HF_CONFIG, "moe_intermediate_size": 768 if variant == 0 else 1536}))
        data["model"] = {"hf_config": path.name}
    elif kind == "profile":
        path = folder / "profile.json"
        profile = json.loads((REPO / "epsim" / "data" / "profiles" / "h200x2.json").read_text())
        if variant:
            for component in profile["components"].values():
                for name in component.get("params", {}):
                    if name.endswith("_us"):
                        component["params"][name] *= 3.0
        path.write_text(json.dumps(profile))
        data["profile"] = path.name
    else:
        raise ValueError(kind)
    scenario = folder / "s.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    return scenario, path


REFERENCED = ("arrivals-trace", "skew-trace", "recorded-loads", "hf-config", "profile")


def referenced_files(c: Campaign, full: bool) -> None:
    """A file the scenario references, edited between two plans into one --out: the second
    recomputes every point and answers as a fresh run on the edited file does; a file only
    touched (same bytes) is still cached."""
    for kind in REFERENCED if full else ("arrivals-trace",):
        case = f"edited-file/{kind}"
        c.cases["referenced files"] += 1
        folder = c.folder(f"ref-{kind}")
        scenario, path = _referencing(folder, kind, 0)
        out = folder / "out"
        args = ["plan", str(scenario), "--sweep", "seed=0,1", "--workers", "1", "--no-keep-up",
                "--no-progress", "--no-plots", "--out"]
        if c.cli(case, *args, str(out)).rc != 0:
            continue
        os.utime(path)                                    # touched, same bytes: still cached
        c.cli(case + " (touched)", *args, str(out))
        c.check(plan_counts(out)["cached"] == 2, "stale", case,
                f"a touched file recomputed {plan_counts(out)['computed']} points")
        _referencing(folder, kind, 1)
        if c.cli(case + " (edited)", *args, str(out)).rc != 0:
            continue
        c.check(plan_counts(out)["computed"] == 2, "stale", case,
                f"{plan_counts(out)['cached']} point(s) reused after {path.name} changed")
        fresh = folder / "fresh"
        c.cli(case + " (fresh)", *args, str(fresh))
        c.check(table(out) == table(fresh), "stale", case, "differs from a fresh run on the edited file")


# -- sharing a results directory ---------------------------------------------------------------
def sharing(c: Campaign, full: bool) -> None:
    """Two plans on one --out; a different sweep and --no-plots into a used directory; readers
    of an interrupted or edited directory."""
    work = c.folder("sharing")
    scenario = c.scenario(work, duration_s=1.0)
    out = work / "shared"
    case = "two plans on one --out"
    c.cases["sharing"] += 1
    (work / "slow").mkdir()
    # ~0.5 s a point (2026-12): the first plan runs for half a minute unless stopped, as it is
    # once the second has been refused
    slow = c.scenario(work / "slow", duration_s=10.0)
    long_sweep = ["plan", str(slow), "--sweep", "seed=0:63:+1", "--workers", "1", "--no-keep-up",
                  "--no-progress", "--no-plots", "--out", str(out)]
    first = c.popen(*long_sweep)
    deadline = time.time() + RUN_LIMIT_S
    while time.time() < deadline and first.poll() is None and not cache_lines(out):
        time.sleep(0.1)
    second = c.cli(case, *long_sweep, expect=(2,))
    c.check(first.poll() is None, "exit", case, "the first plan ended before the second started (make it longer)")
    c.check("must not be in use by another epsim command" in second.err, "note", case,
            f"the second plan was not refused: {second.err[-300:]}")
    first.send_signal(signal.SIGTERM)                 # enough: stop it (a rerun would resume)
    c.wait(first, case, (143,), EXIT_LIMIT_S, "the first plan ignored SIGTERM")
    keys = [json.loads(line)["key"] for line in cache_lines(out)]
    c.check(len(keys) == len(set(keys)), "stale", case, f"{len(keys)} cache lines, {len(set(keys))} points")
    c.cli(case, *c.plan_args(scenario, out, "--no-plots"))     # the directory is usable again

    case = "a different sweep into a used --out"
    c.cases["sharing"] += 1
    used = work / "used"
    c.cli(case, "plan", str(scenario), "--sweep", "deployment.ep_size=2,3", "--workers", "1",
          "--no-keep-up", "--no-progress", "--out", str(used))
    had = set(files_of(used))
    c.cli(case, *c.plan_args(scenario, used, "--no-plots"))
    left = {"skipped.csv", "pareto.png", "sweep.png"} & set(files_of(used))
    c.check({"skipped.csv", "pareto.png"} <= had and not left, "stale", case,
            f"files of the earlier sweep left: {sorted(left)}")
    c.check(dir_state(used) == "complete", "unmarked", case, dir_state(used))

    case = "simulate --no-plots into a used --out"
    c.cases["sharing"] += 1
    run_dir = work / "run"
    c.cli(case, *c.simulate_args(scenario, run_dir))
    c.cli(case, "simulate", str(scenario), "--no-progress", "--no-plots", "--out", str(run_dir))
    left = [n for n in files_of(run_dir) if n.endswith(".png") or n == "timeline.json"]
    c.check(not left, "stale", case, f"files of the earlier run left: {left}")

    from epsim.errors import SpecError
    from epsim.plan.results import load_results
    for name, damage in (("interrupted", lambda d: (d / "manifest.json").write_text(
            json.dumps({"complete": False, "command": "plan"}))),
                         ("edited table", lambda d: (d / "results.csv").write_text(
                             (d / "results.csv").read_text().replace("\n", "\n", 1) + "\n"))):
        case = f"load_results of an {name} directory"
        c.cases["sharing"] += 1
        copy = work / f"read-{name.replace(' ', '-')}"
        shutil.copytree(out, copy)
        damage(copy)
        try:
            load_results(copy)
            c.problem("stale", case, "read as if complete")
        except SpecError as exc:
            c.check("\n" not in str(exc), "multi-line", case, str(exc))

