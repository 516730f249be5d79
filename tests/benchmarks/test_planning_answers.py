"""docs/planning.md quotes the scenario scripts' recorded full-size answers
(`benchmarks/planning_answers.py`), one per script; re-record with `--write`."""

from __future__ import annotations

import json

from tests.benchmarks import load_script


def test_docs_quote_every_scripts_recorded_answer():
    mod = load_script("planning_answers")
    recorded = json.loads(mod.RESULT.read_text())
    assert sorted(recorded["answers"]) == mod.script_names(), \
        "a scenario script was added or removed: python benchmarks/planning_answers.py --write"
    doc = mod.DOC.read_text()
    for name, line in recorded["answers"].items():
        assert line.startswith("answer: ") and "[quick" not in line and "[full-lite" not in line
        assert mod.quoted(doc, name) == line, f"{name}: python benchmarks/planning_answers.py --write"
    assert recorded["meta"]["command"] == mod.COMMAND


def test_an_answer_block_is_replaced_in_place():
    mod = load_script("planning_answers")
    doc = ("intro\n`python scenarios/a.py` text\n\n**Answer** (the script's line):\n\n```\n"
           "answer: old\n```\n\nafter `python scenarios/b.py`\n\n**Answer**:\n\n```\nanswer: b\n```\n")
    new = mod.with_answers(doc, {"a": "answer: new [workload: x]"})
    assert mod.quoted(new, "a") == "answer: new [workload: x]" and mod.quoted(new, "b") == "answer: b"
    assert new.replace("answer: new [workload: x]", "answer: old") == doc
