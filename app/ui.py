"""What the pages share: the error guard, the scenario picker, number formatting."""

from __future__ import annotations

import hashlib
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st

from app import data
from epsim.errors import EpsimError
from epsim.plan.columns import column_label

log = logging.getLogger("epsim.app")


@contextmanager
def guarded():
    """Run a page body; an error becomes one line on the page, never a traceback.

    epsim's own errors (bad input) show their message as is; anything else is a bug, shown as
    its type and message, with the traceback in the server log.
    """
    try:
        yield
    except EpsimError as exc:
        st.error(str(exc))
    except Exception as exc:      # noqa: BLE001 - streamlit's rerun/stop are BaseExceptions
        log.exception("page failed")
        st.error(f"internal error ({type(exc).__name__}: {exc}); please report it with the inputs "
                 f"that caused it")


@dataclass(frozen=True)
class ScenarioSource:
    """Scenario YAML as the user chose and edited it."""

    text: str
    where: str          # the name messages give it
    base_dir: str       # relative paths inside resolve here
    overrides: str = "{}"   # JSON {dotted.path: value} applied on top (a run's form edits)

    @property
    def digest(self) -> str:
        """12 hex digits naming this text (widget keys: a new text starts a fresh form)."""
        return hashlib.sha256(f"{self.where}\0{self.text}\0{self.overrides}".encode()).hexdigest()[:12]


def default_source() -> ScenarioSource:
    """The shipped default scenario (scenarios/default.yaml)."""
    path = data.shipped_scenarios()["default"]
    return ScenarioSource(path.read_text(), f"scenarios/{path.name}", str(data.SCENARIOS_DIR))


def read_upload(upload, what: str) -> str:
    """An uploaded file's text (`epsim.io`: at most its size cap, UTF-8, no NUL bytes).

    Raises:
        EpsimError: one line naming the upload and what is wrong.
    """
    from epsim.io import MAX_TEXT_BYTES, decode_text
    if upload.size > MAX_TEXT_BYTES:
        raise EpsimError(f"{upload.name} ({upload.size} bytes) must be at most "
                         f"{MAX_TEXT_BYTES // 2**20} MiB ({what})")
    return decode_text(upload.getvalue(), upload.name, what)


def scenario_source(key: str, default: str = "default", choices: list[str] | None = None,
                    extra: dict[str, ScenarioSource] | None = None) -> ScenarioSource | None:
    """Pick a shipped scenario (or one of `extra`) or upload a YAML; the text is editable in an
    expander. Returns None until an upload arrives."""
    shipped = data.shipped_scenarios()
    names = [n for n in (choices or list(shipped)) if n in shipped]
    options = ["shipped scenario"] + list(extra or {}) + ["upload a YAML file"]
    origin = st.radio("Scenario", options, horizontal=True, key=f"{key}_origin")
    if extra and origin in extra:
        source = extra[origin]
    elif origin == "shipped scenario":
        name = st.selectbox("Shipped scenario (scenarios/*.yaml)", names,
                            index=names.index(default) if default in names else 0, key=f"{key}_name")
        path = shipped[name]
        source = ScenarioSource(path.read_text(), f"scenarios/{path.name}", str(data.SCENARIOS_DIR))
    else:
        upload = st.file_uploader("Scenario YAML", type=["yaml", "yml"], key=f"{key}_upload")
        if upload is None:
            st.info("Upload a scenario YAML file (see scenarios/*.yaml for the format).")
            return None
        source = ScenarioSource(read_upload(upload, "a YAML scenario"), upload.name, ".")
    with st.expander("Advanced: edit the scenario YAML (every field; the form below starts from it)"):
        text = st.text_area("Scenario YAML", value=source.text, height=360, key=f"{key}_yaml_{source.digest}",
                            label_visibility="collapsed")
    return ScenarioSource(text, source.where, source.base_dir, source.overrides)


def number_input(where, label: str, value, min_value=None, max_value=None, **kwargs):
    """`st.number_input` (on `where`: `st` or a column) whose bounds never refuse the value it
    starts from. Its bounds guide edits; the scenario's own validation judges what is
    submitted. A scenario the CLI runs (a rate of 1e-9 req/s) must open in the form, where
    Streamlit would raise StreamlitValueBelowMinError and show no Run button. Small floats are
    shown as `%g` (1e-09), not as 0.00."""
    if min_value is not None and value < min_value:
        min_value = type(min_value)(value)
    if max_value is not None and value > max_value:
        max_value = type(max_value)(value)
    if isinstance(value, float) and "format" not in kwargs and value and abs(value) < 0.01:
        kwargs["format"] = "%g"
    return where.number_input(label, min_value=min_value, max_value=max_value, value=value, **kwargs)


def fmt(value, spec: str = ".1f", unit: str = "") -> str:
    """A number for a KPI; '-' for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{unit}"


def human_columns(frame):
    """`frame` with `column_label` names and float columns rounded to about four significant
    digits of their largest value (a copy)."""
    out = frame.rename(columns={c: column_label(c) for c in frame.columns})
    for name in out.columns:
        if out[name].dtype.kind == "f":
            top = out[name].abs().max()
            if top > 0 and math.isfinite(top):
                out[name] = out[name].round(max(0, min(4, 3 - math.floor(math.log10(top)))))
    return out
