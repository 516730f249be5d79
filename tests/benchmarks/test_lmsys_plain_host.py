"""benchmarks/lmsys_plain_host.py: epsim's price of the host time between forwards in LMSYS's MTP
case study regenerates number for number (the timed section is this machine's), and a cycle
runs more host work than a plain step, as SGLang's loops order them (what its draft's graphs hide
of it may leave it exposing less)."""

from __future__ import annotations

import warnings

from tests.benchmarks import load_script


def test_the_recorded_price_table_regenerates_and_a_cycle_runs_more_than_a_step():
    module = load_script("lmsys_plain_host")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = module.ledgers()
    recorded = module.RESULTS.read_text().splitlines()
    ours = module.price_table(rows)
    start = recorded.index(ours[0])
    assert recorded[start:start + len(ours)] == ours
    plain, overlap, *cycles = rows
    assert overlap["exposed_us"] == 0.0 and plain["hidden_us"] == 0.0
    for cycle in cycles:    # every part of the plain step, and the cycle's own, less its hiding
        assert 0.0 < cycle["hidden_us"] < cycle["draft_gpu_us"]
        assert cycle["exposed_us"] + cycle["hidden_us"] > plain["exposed_us"]
