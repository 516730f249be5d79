"""`epsim cost`: DeepEP's kernels follow `--deepep-mode auto` by default (low-latency in decode,
normal in prefill, as the scenarios run them), and several EP sizes or token counts print one
table."""

from __future__ import annotations

import json

import pytest

from epsim.cli import main
from epsim.commands.cost import layer_cost, parse_counts
from epsim.errors import SpecError
from epsim.zoo import get_model


def test_counts_lists_and_doubling_ranges():
    assert parse_counts("8,16,32", "--ep") == [8, 16, 32]
    assert parse_counts("1-4096", "--tokens-per-rank") == [2 ** i for i in range(13)]
    assert parse_counts("3-20,64", "--tokens-per-rank") == [3, 6, 12, 20, 64]
    with pytest.raises(SpecError, match=r"--ep \('8,x'\) must be integers separated by commas"):
        parse_counts("8,x", "--ep")
    with pytest.raises(SpecError, match=r"--tokens-per-rank range \(64-8\) must have 0 < LO <= HI"):
        parse_counts("64-8", "--tokens-per-rank")


def test_auto_is_low_latency_in_decode_and_normal_in_prefill():
    model = get_model("Qwen3-235B-A22B")
    for tokens, phase, mode in ((128, "decode", "low_latency"), (4096, "prefill", "normal")):
        auto = layer_cost(model, "H200", "deepep", 32, tokens)
        explicit = layer_cost(model, "H200", "deepep", 32, tokens, deepep_mode=mode)
        assert (auto["phase"], auto["mode"]) == (phase, mode)
        assert auto["dispatch_us"] == explicit["dispatch_us"]
    normal_decode = layer_cost(model, "H200", "deepep", 32, 128, deepep_mode="normal")
    assert normal_decode["mode"] == "normal"
    assert normal_decode["dispatch_us"] != layer_cost(model, "H200", "deepep", 32, 128)["dispatch_us"]


def test_several_points_print_one_table(capsys):
    argv = ["cost", "--model", "Qwen3-30B-A3B", "--backend", "deepep", "--ep", "8,16",
            "--tokens-per-rank", "64-256"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["EP", "tokens/rank"])
    # the table's rows (a `note:` line may follow: the H200 default's DeepEP combine is
    # fitted at EP 8, EP 16 extrapolates)
    rows = [line.split() for line in lines[header + 1:] if line.split()[:1] and line.split()[0].isdigit()]
    assert [(r[0], r[1]) for r in rows] == [(e, t) for e in ("8", "16") for t in ("64", "128", "256")]
    assert all(r[2] == "decode" and r[3] == "low_latency" for r in rows)
    assert main(argv + ["--json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert [(p["ep_size"], p["tokens_per_rank"]) for p in points] == [(e, t) for e in (8, 16) for t in (64, 128, 256)]
