"""Helpers for the AppTest tests: find widgets by key suffix, count elements anywhere."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "app" / "main.py"
DATA = Path(__file__).parent / "data"       # CPU (gloo) records and their profile, see README there
TIMEOUT_S = 180


def open_page(at, page: str):
    """Switch to `pages/<page>.py` and run it."""
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def count(at, element_type: str) -> int:
    """Elements of a type anywhere in the page (inside columns, forms, expanders too)."""
    def walk(node) -> int:
        own = int(getattr(node, "type", "") == element_type)
        return own + sum(walk(child) for child in getattr(node, "children", {}).values())
    return walk(at.main)


def keyed(widgets, suffix: str):
    """The one widget whose key ends with `suffix` (form keys carry a content digest)."""
    found = [w for w in widgets if w.key and w.key.endswith(suffix)]
    assert len(found) == 1, [w.key for w in widgets]
    return found[0]


def button(at, label: str):
    found = [b for b in at.button if b.label == label]
    assert len(found) == 1, [b.label for b in at.button]
    return found[0]


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def submit(at, label: str, **numbers) -> None:
    """Set number inputs ({key suffix: value}), press the form's `label` button, expect no error."""
    for suffix, value in numbers.items():
        keyed(at.number_input, suffix).set_value(value)
    button(at, label).click()
    at.run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
