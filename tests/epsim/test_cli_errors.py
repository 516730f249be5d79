"""The edges of epsim's error messages (issue 41, item 10): did-you-mean for fields, models and
options, one prefix, an unknown option named before a missing one, `--no-progress` on every
command, `--json` errors as JSON, and a hint to set `cluster.num_nodes` when EP exceeds the
cluster's GPUs."""

from __future__ import annotations

import json

import pytest
import yaml

from epsim.cli import build_parser, main


def _scenario(tmp_path, **fields) -> str:
    data = {"name": "x", "model": "Qwen3-30B-A3B", **fields}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_misspelt_field_gets_a_guess(tmp_path, capsys):
    assert main(["simulate", _scenario(tmp_path, deployment={"ep_sise": 8})]) == 2
    assert "deployment.ep_sise (8) is not a known field; did you mean ep_size? allowed: " in _err(capsys)


@pytest.mark.parametrize("argv", [
    lambda path: ["simulate", path],
    lambda path: ["cost", "--model", "deepseek-v3", "--backend", "deepep", "--ep", "8", "--tokens-per-rank", "8"],
])
def test_misspelt_model_gets_a_guess(tmp_path, capsys, argv):
    assert main(argv(_scenario(tmp_path, model="deepseek-v3"))) == 2
    assert _err(capsys).endswith("did you mean DeepSeek-V3?")


def test_no_doubled_prefix(capsys):
    assert main(["cost", "--model", "Qwen3-30B-A3B", "--backend", "nccl", "--ep", "8",
                 "--tokens-per-rank", "8"]) == 2
    err = _err(capsys)
    assert err.count("epsim cost") == 1 and err.startswith("epsim cost: error: --backend ('nccl')")


def test_unknown_option_before_a_missing_one(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cost", "--model", "Qwen3-30B-A3B", "--backend", "deepep", "--ep", "8", "--tokens-per-rnk", "64"])
    assert exit_.value.code == 2
    assert _err(capsys) == ("epsim cost: error: unrecognized arguments: --tokens-per-rnk; did you mean "
                            "--tokens-per-rank?; see epsim cost --help")
    with pytest.raises(SystemExit):                 # only missing: named as missing
        main(["cost", "--model", "Qwen3-30B-A3B", "--backend", "deepep", "--ep", "8"])
    assert "the following arguments are required: --tokens-per-rank" in _err(capsys)


def test_every_command_takes_no_progress_json_and_quiet():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        options = {o for a in sub._actions for o in a.option_strings}
        assert {"--no-progress", "--json", "--quiet"} <= options, name


def test_json_errors_are_json(tmp_path, capsys):
    path = _scenario(tmp_path, deployment={"ep_size": 16})
    assert main(["simulate", path, "--json"]) == 2
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["exit_code"] == 2 and out.err == ""
    # EP above the cluster's GPUs: the hint says what to set
    assert data["error"].endswith("must be <= the cluster's GPUs (1 nodes x 8 = 8); set "
                                  "cluster.num_nodes: 2 for 16 GPUs")
    with pytest.raises(SystemExit):                 # a parse error too
        main(["cost", "--json", "--model", "Qwen3-30B-A3B"])
    assert json.loads(capsys.readouterr().out)["error"].startswith("epsim cost: the following arguments")


def test_live_calibration_problems_are_one_note_and_a_file(tmp_path):
    """35 skipped points on one H200 were 35 `note:` lines; now one, the list in a file. (The
    live bench needs GPUs: its result here is the shape `run_bench` returns.)"""
    import argparse
    import warnings

    from epsim.commands.calibrate import _run_live

    class Result:
        problems = [f"point {i}: skipped (needs two GPUs)" for i in range(35)]
        num_records = 10

        def line(self):
            return "10 records"

    records = tmp_path / "records.jsonl"
    args = argparse.Namespace(budget_s=float("inf"), quiet=True, no_progress=True, json=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_live(args, records, None, lambda plan, path, budget, progress: Result())
    assert len(caught) == 1
    listing = tmp_path / "records_skipped.txt"
    assert str(caught[0].message).startswith(f"35 point(s) skipped or failed, listed in {listing}")
    assert listing.read_text().splitlines() == Result.problems


def test_validate_says_what_it_computes(tmp_path, monkeypatch, capsys):
    """`epsim validate` ran 89 s printing nothing: each step now says what starts (on a
    terminal; a captured stderr keeps just the error line)."""
    import io
    from pathlib import Path

    from epsim.commands.output import stages
    from epsim.profile import load_profile
    from epsim.validate import validate
    data = Path(__file__).resolve().parents[1] / "app" / "data"
    heard: list[str] = []
    validate(load_profile(data / "gloo_profile.json"), [data / "gloo_records.jsonl"], plots=False,
             stage=heard.append)
    assert heard[0] == "reading the records" and heard[1].startswith("predicting ")

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    stages("validate", True)("predicting 12 records")
    stages("validate", False)("not shown")
    assert terminal.getvalue() == "epsim validate: predicting 12 records (0 s)\n"


def test_an_unknown_load_balance_method_is_one_line_naming_the_field(tmp_path, capsys):
    path = _scenario(tmp_path, deployment={"load_balance_method": "by_room"})
    assert main(["simulate", path]) == 2
    err = _err(capsys)
    assert "load_balance_method" in err and "follow_bootstrap_room" in err


def test_an_unknown_mla_kv_splits_is_one_line_naming_the_field_and_its_values(tmp_path, capsys):
    path = _scenario(tmp_path, deployment={"mla_kv_splits": "two"})
    assert main(["simulate", path]) == 2
    assert _err(capsys).endswith("deployment.mla_kv_splits ('two') must be one of 'split' or 'one'")


@pytest.mark.parametrize("model, gpu", [("Qwen3-30B-A3B", "B200"), ("DeepSeek-V3", "H200")])
def test_one_mla_kv_split_needs_an_mla_model_on_sm100(tmp_path, capsys, model, gpu):
    """cutlass_mla is SGLang's MLA backend for SM100 alone: GQA, or Hopper, is one line."""
    path = _scenario(tmp_path, model=model, cluster={"gpu": gpu, "num_nodes": 1},
                     deployment={"ep_size": 8, "mla_kv_splits": "one"})
    assert main(["simulate", path]) == 2
    err = _err(capsys)
    assert err.startswith(f"epsim simulate: error: {path}: deployment.mla_kv_splits ('one'")
    assert f"on {gpu}" in err


def test_max_prefill_tokens_at_zero_is_one_line_and_at_one_runs(tmp_path, capsys):
    """`deployment.max_prefill_tokens` (SGLang's input budget): 0 is refused naming the field; 1,
    its legal edge, still runs (the first request of a batch always joins, `chunked_prefill.chunk`)."""
    assert main(["simulate", _scenario(tmp_path, deployment={"max_prefill_tokens": 0})]) == 2
    assert _err(capsys).endswith("deployment.max_prefill_tokens (0) must be > 0")
    path = _scenario(tmp_path, deployment={"max_prefill_tokens": 1},
                     workload={"duration_s": 2, "warmup_s": 0.5})
    assert main(["simulate", path, "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ttft_ms"]["count"] > 0 and summary["ttft_ms"]["p50"] > 0
