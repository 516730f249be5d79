"""A reduced-size answer is labelled and points the same way as the full question: each scenario
script at `--quick` and at `--lite` (the full question over a shorter simulated time) recommends
the same direction (EPLB or not, which backend, how many GPUs, slower after a failure, ...)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SCRIPTS = sorted(p.stem for p in SCENARIOS.glob("*.py"))


def _main(stem: str):
    spec = importlib.util.spec_from_file_location(f"scenario_script_{stem}", SCENARIOS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.slow
@pytest.mark.parametrize("stem", SCRIPTS)
def test_quick_and_lite_answers_agree(stem, tmp_path):
    main = _main(stem)
    common = ["--out", str(tmp_path), "--workers", "1", "--no-progress"]
    quick, lite = main(["--quick", *common]), main(["--lite", *common])
    assert quick["answer"].startswith("answer: [quick: reduced size, not the full answer] ")
    assert lite["answer"].startswith("answer: [full-lite: ")
    assert quick["direction"] is not None
    assert quick["direction"] == lite["direction"], (quick["answer"], lite["answer"])
