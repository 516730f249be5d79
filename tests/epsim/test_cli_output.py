"""The output convention of every `epsim` command (epsim.commands.output): `--json` parses and
keeps its keys, `--quiet` prints nothing, warnings are one `note:` line each under the result,
no abbreviated options, help text for every option, numbers without scientific notation."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from epsim.cli import build_parser, main
from epsim.commands.output import merge_notes
from epsim.text import brief, duration, number, size, table
from tests.epsim.plan_fixtures import write_tiny_scenario

ROOT = Path(__file__).resolve().parents[2]
GLOO_RECORDS = ROOT / "tests" / "app" / "data" / "gloo_records.jsonl"
SHORT = ["--set", "workload.duration_s=1.0", "--set", "workload.warmup_s=0.2"]
EXTRAPOLATING = "outside fitted"
COMMON = {"files", "notes"}


def _epsim(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epsim.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _sides(overrides: list[str]) -> list[str]:
    """`--set KEY=VALUE` pairs as the same change to both of `compare`'s runs."""
    pairs = overrides[1::2]
    return [arg for kv in pairs for arg in ("--set-a", kv, "--set-b", kv)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("output")
    loads = np.random.default_rng(0).zipf(1.5, (3, 128)).astype(float)       # [layers, experts]
    np.save(folder / "loads.npy", loads)
    return {"dir": folder, "loads": folder / "loads.npy",
            "plan": write_tiny_scenario(folder)}


def _commands(files) -> dict[str, tuple[list[str], set[str]]]:
    """Each command's arguments and the top-level keys its --json object promises."""
    out = files["dir"]
    return {
        "simulate": (["simulate", "scenarios/default.yaml", *SHORT],
                     {"scenario", "profile", "seed", "sim_seconds", "warmup_s", "wall_seconds",
                      "num_gpus", "num_steps", "num_measured_steps", "num_requests",
                      "initial_running_per_rank",
                      "throughput_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu",
                      "output_tokens_per_s_per_gpu", "requests_per_s", "ttft_ms", "tpot_ms",
                      "e2e_ms", "step_ms", "prefill_step_frac", "busy_frac", "stall_us_total",
                      "time_breakdown_frac", "imbalance_max_over_mean", "balancedness",
                      "rank_load_max_over_mean", "rank_load_pairs_mean", "attention_us",
                      "dispatch_us", "experts_us", "combine_us", "layer_us", "provenance"}),
        "cost": (["cost", "--model", "Qwen3-30B-A3B", "--backend", "mooncake", "--ep", "8",
                  "--tokens-per-rank", "64"],
                 {"model", "gpu", "backend", "mode", "ep_size", "num_nodes", "tokens_per_rank",
                  "dispatch_dtype", "skew", "seed", "dispatch_us", "experts_us", "combine_us",
                  "layer_us", "max_rank_pairs", "mean_rank_pairs", "busiest_nvl_copies",
                  "busiest_rdma_copies", "profile", "graph", "time", "time_mode", "phase",
                  "host_us", "provenance", "dispatch_p10_us", "dispatch_p90_us", "experts_p10_us",
                  "experts_p90_us", "combine_p10_us", "combine_p90_us", "layer_p10_us",
                  "layer_p90_us"}),
        "eplb": (["eplb", str(files["loads"]), "--replicas", "144", "--gpus", "8", "--model",
                  "Qwen3-30B-A3B"],
                 {"algorithm", "num_layers", "num_logical", "balancedness_before",
                  "balancedness_after", "phy2log", "log2phy", "logcnt", "num_gpus", "num_nodes",
                  "rebalance"}),
        "calibrate": (["calibrate", "--records", str(GLOO_RECORDS), "--out", str(out / "p.json")],
                      {"profile", "num_fit", "num_held_out", "holdout", "records"}),
        "validate": (["validate", "--no-plots", "--no-extrapolation", "--out", str(out / "validate")],
                     {"profile", "holdout", "measured_on", "max_mape", "passed", "summary", "rows"}),
        "plan": (["plan", files["plan"], "--sweep", "deployment.ep_size=4,8", "--workers", "1",
                  "--no-plots"],
                 {"scenario", "sweeps", "constraints", "objectives", "pareto", "counts", "columns",
                  "best", "frontier", "infeasible", "wall_s", "out"}),
        "compare": (["compare", "scenarios/default.yaml", "scenarios/default.yaml", *_sides(SHORT),
                     "--set-b", "deployment.moe_a2a_backend=deepep"],
                    {"a", "b", "differs", "metrics", "layer_us", "why", "a_source", "b_source"}),
        "models": (["models"], {"models"}),
        "hardware": (["hardware"], {"gpus", "networks"}),
    }


def test_every_command_is_covered(files):
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(_commands(files))


@pytest.mark.parametrize("command", ["simulate", "cost", "eplb", "calibrate", "validate", "plan",
                                     "models", "hardware"])
def test_json_parses_and_keeps_its_keys(command, files, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    args, keys = _commands(files)[command]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)                  # one JSON object, nothing else
    assert keys | COMMON <= set(data)            # the contract: keys may be added, never dropped
    assert isinstance(data["notes"], list) and isinstance(data["files"], list)
    again = main([*args, "--json"])
    assert again == 0 and set(json.loads(capsys.readouterr().out)) == set(data)


@pytest.mark.parametrize("command", ["simulate", "cost", "models"])
def test_quiet_prints_nothing(command, files, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    args, _ = _commands(files)[command]
    assert main([*args, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_warnings_are_notes_under_the_result_once_each():
    proc = _epsim("cost", "--model", "Qwen3-30B-A3B", "--backend", "mooncake", "--ep", "8",
                  "--tokens-per-rank", "64")
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    notes = [i for i, line in enumerate(lines) if line.startswith("note: ")]
    assert notes and notes == list(range(len(lines) - len(notes), len(lines)))   # at the end
    assert len({lines[i] for i in notes}) == len(notes)
    assert all(EXTRAPOLATING in lines[i] for i in notes)


def test_plan_notes_merge_across_ep_sizes(files):
    # mooncake: its communication was fitted at EP 2 only, so every EP size swept extrapolates
    # (deepep's experts come from the single-GPU records, measured for EP groups up to 32)
    proc = _epsim("plan", files["plan"], "--sweep", "deployment.ep_size=4,8,16", "--workers", "1",
                  "--set", "deployment.moe_a2a_backend=mooncake", "--no-plots", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    ep_notes = [n for n in notes if "ep_size (" in n]
    assert ep_notes, proc.stdout
    for note in ep_notes:                     # one line names every EP size swept
        assert "ep_size (4, 8, 16)" in note, note
    assert len(notes) == len(set(notes))
    assert "e+" not in proc.stdout and "None" not in proc.stdout


def test_no_abbreviated_options():
    proc = _epsim("cost", "--model", "Qwen3-30B-A3B", "--backend", "torch", "--ep", "8",
                  "--tokens", "64")
    assert proc.returncode == 2 and "--tokens" in proc.stderr
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eplb", "x.npy", "--replica", "8", "--gpus", "2"])


def test_every_option_has_help_text():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {'/'.join(action.option_strings) or action.dest}"
               for name, p in sub.choices.items() for action in p._actions
               if not isinstance(action, argparse._HelpAction) and not action.help]
    assert missing == []


def test_merge_notes_dedups_and_joins_values():
    notes = merge_notes(["a: ep_size (8) outside fitted [2, 2]", "a: ep_size (16) outside fitted [2, 2]",
                         "a: ep_size (8) outside fitted [2, 2]", "other\n  note"])
    assert notes == ["a: ep_size (8, 16) outside fitted [2, 2]", "other note"]


def test_numbers_for_people():
    assert number(16340.2) == "16340" and number(0.82531) == "0.8253" and number(21.1) == "21.10"
    assert number(None) == "-" and number(float("nan")) == "-" and number(True) == "yes"
    assert number(8.0) == "8" and number(1.5e-7) == "0.000000"
    assert duration(0.85) == "850 ns" and duration(83.14) == "83.1 µs"
    assert duration(4561.0) == "4.56 ms" and duration(1.634e7) == "16.3 s"
    assert size(37.75e6) == "37.8 MB" and size(512) == "512 B"
    assert brief(1020.4) == "1020" and brief(49.96) == "50" and brief(61.2) == "61.2"
    lines = table(["name", "value"], [["a", 1.5], ["bb", None]], indent="")
    assert lines == ["name  value", "a     1.500", "bb        -"]


def test_every_command_line_in_the_repository_refuses_abbreviations():
    """Scripts, benchmarks and live/ entry points too: an option they lack is an error, never
    silently another option with the same prefix."""
    import ast
    missing = []
    for folder in ("epsim", "live", "scenarios", "benchmarks", "scripts", "app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                        == "ArgumentParser"):
                    given = {k.arg: k.value for k in node.keywords}
                    if not (isinstance(given.get("allow_abbrev"), ast.Constant)
                            and given["allow_abbrev"].value is False):
                        missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert missing == []


_SWALLOWED_INTERRUPT = """
import signal, time, weakref
from epsim.interrupts import Terminated, interrupts_handled

# as a fresh `epsim` process starts: a child inherits ignored signals and the signal mask
signal.pthread_sigmask(signal.SIG_SETMASK, [])
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

class Node:
    pass

for interrupt in (Terminated, KeyboardInterrupt):
    def callback(_, interrupt=interrupt):
        raise interrupt()                      # as the signal handler does, mid-callback
    try:
        with interrupts_handled():
            node = Node()
            ref = weakref.ref(node, callback)
            del node                           # the callback runs and its exception is swallowed
            time.sleep(5)                      # ... and is delivered again here, at once
    except interrupt:
        print("delivered", interrupt.__name__, ref() is None)
"""


def test_an_interrupt_a_finalizer_swallows_is_delivered_again_silently():
    """Python swallows an exception raised inside a weakref callback (matplotlib's, while the
    garbage collector runs) and prints "Exception ignored ... Traceback": a SIGTERM or Ctrl-C
    landing there must still stop the command, with no traceback. In a fresh process, as the
    CLI runs: the redelivered signal goes to the process, whose handlers here belong to pytest
    and to earlier tests."""
    proc = subprocess.run([sys.executable, "-c", _SWALLOWED_INTERRUPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.split("\n")[:2] == ["delivered Terminated True", "delivered KeyboardInterrupt True"]
    assert "Exception ignored" not in proc.stderr
