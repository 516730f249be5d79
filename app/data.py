"""What the app shows, computed by epsim's public API and cached (`st.cache_data`), so a rerun
with the same inputs is instant. No model logic here: scenarios, runs, validation, sweeps and
their choices all come from epsim; this module only calls it and packs the results as plain,
picklable data for the pages.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

from epsim.errors import EpsimError

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS_DIR = ROOT / "scenarios"
NUM_WINDOWS = 60                                          # load heatmap columns over a run


@contextmanager
def workers_skip_the_page():
    """Let spawned worker processes (sweeps) start without running the page.

    Streamlit executes a page as module `__main__`; a spawned worker re-imports `__main__` by
    its file, so it would run the page again, without a session (the server log's "missing
    ScriptRunContext" and "No runtime found" warnings, and wasted work). A main module whose
    spec is named `__main__` is not re-imported (multiprocessing.spawn), so the workers import
    only the epsim functions they run.
    """
    main = sys.modules["__main__"]
    spec = main.__dict__.get("__spec__")
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = spec


def upload_name(name: str) -> str:
    """An uploaded file's name without any folder part (what messages and staged files use)."""
    return Path(name).name or "upload"


# -- scenarios -----------------------------------------------------------------------------------
def shipped_scenarios() -> dict[str, Path]:
    """`scenarios/*.yaml` by name (sorted, `default` first)."""
    paths = sorted(SCENARIOS_DIR.glob("*.yaml"))
    return dict(sorted(((p.stem, p) for p in paths), key=lambda kv: (kv[0] != "default", kv[0])))


@st.cache_data(show_spinner=False)
def parse_scenario(text: str, where: str, base_dir: str, overrides_json: str = "{}"):
    """The validated `Scenario` of YAML text with `{dotted.path: value}` overrides (JSON).

    Raises:
        SpecError: epsim's one-line message (bad YAML, a field's path, value and rule).
    """
    from epsim.spec import scenario_from_text
    return scenario_from_text(text, where, base_dir, json.loads(overrides_json))


@st.cache_data(show_spinner=False)
def eplb_scenarios() -> list[str]:
    """Names of the shipped scenarios that enable EPLB."""
    out = []
    for name, path in shipped_scenarios().items():
        try:
            if parse_scenario(path.read_text(), f"scenarios/{path.name}", str(SCENARIOS_DIR)).deployment.enable_eplb:
                out.append(name)
        except EpsimError:
            continue
    return out


# -- one run ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunView:
    """One simulated run as the pages draw it.

    Attributes:
        summary: `epsim.report.summarize` of the run; table: its stdout table.
        summary_json, timeseries_csv: the files `epsim simulate --out` writes, as text.
        latencies_ms: ttft_ms, tpot_ms, e2e_ms -> [measured requests].
        layer_mean_us: attention_us, dispatch_us, ... -> [moe_layers] mean per measured step.
        rank_pairs_mean: [ranks] mean token-expert pairs per rank per layer per measured step.
        steps: t_s, step_ms, balancedness, imbalance, num_running, num_waiting,
            placement_version -> [steps].
        rebalances: EPLB events (dicts); stalls: (start_us, stall_us, label); elastic_events.
        window_t_s: [windows] centres; rank_pairs: [windows, layers, ranks] and
            expert_loads: [windows, layers, experts] float32 sums (`epsim.sim.load_trace.LoadTrace`).
        warnings: distinct warnings the run raised.
    """

    summary: dict
    table: str
    summary_json: str
    timeseries_csv: str
    latencies_ms: dict
    layer_mean_us: dict
    rank_pairs_mean: np.ndarray
    steps: dict
    rebalances: list
    stalls: list
    elastic_events: list
    window_t_s: np.ndarray
    rank_pairs: np.ndarray
    expert_loads: np.ndarray
    warnings: list


def rank_share(view: RunView, layer: int | None = None) -> np.ndarray:
    """[windows, ranks] load / mean rank load (`epsim.sim.load_trace.load_share`)."""
    from epsim.sim.load_trace import load_share
    return load_share(view.rank_pairs, layer)


def expert_share(view: RunView, layer: int | None = None) -> np.ndarray:
    """[windows, experts] load / mean expert load (`epsim.sim.load_trace.load_share`)."""
    from epsim.sim.load_trace import load_share
    return load_share(view.expert_loads, layer)


@st.cache_data(show_spinner=False, max_entries=16)
def run_scenario(text: str, where: str, base_dir: str, overrides_json: str = "{}") -> RunView:
    """Simulate a scenario (text + overrides) with a progress bar; cached by its inputs, so a
    second call with the same inputs returns at once."""
    from epsim.report import request_latencies_ms, summarize, write_summary, write_timeseries
    from epsim.report.table import format_table
    from epsim.sim import Simulation
    from epsim.sim.load_trace import LoadTrace

    from epsim.budget import check_run
    scenario = parse_scenario(text, where, base_dir, overrides_json)
    check_run(scenario, where)          # an upload cannot ask for 1e9 requests or seconds
    bar = st.progress(0.0, text=f"simulating {scenario.name}: 0 of {scenario.workload.duration_s:g} s")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sim = Simulation(scenario)
        trace = LoadTrace(sim, NUM_WINDOWS)
        end_us = sim.end_us

        def ticker(sim):
            tick_us = end_us / 40
            while True:
                yield sim.env.timeout(tick_us)
                bar.progress(min(sim.env.now / end_us, 1.0),
                             text=f"simulating {scenario.name}: {sim.env.now * 1e-6:.1f} of "
                                  f"{end_us * 1e-6:g} s")

        sim.add_process(ticker)
        result = sim.run()
    bar.empty()
    summary = summarize(result)
    with tempfile.TemporaryDirectory() as tmp:
        write_summary(summary, Path(tmp) / "summary.json")
        write_timeseries(result, Path(tmp) / "timeseries.csv")
        summary_json = (Path(tmp) / "summary.json").read_text()
        timeseries_csv = (Path(tmp) / "timeseries.csv").read_text()
    s = result.steps
    steps = {"t_s": s["start_us"] * 1e-6, "step_ms": s["step_us"] * 1e-3,
             **{k: s[k] for k in ("balancedness", "imbalance", "num_running", "num_waiting",
                                  "placement_version")}}
    return RunView(
        summary=summary, table=format_table(summary), summary_json=summary_json,
        timeseries_csv=timeseries_csv, latencies_ms=request_latencies_ms(result),
        layer_mean_us=dict(result.layer_mean_us), rank_pairs_mean=result.rank_pairs_mean,
        steps=steps, rebalances=list(result.rebalances), stalls=list(result.stalls),
        elastic_events=list(result.elastic_events), window_t_s=trace.t_s,
        rank_pairs=trace.rank_pairs.astype(np.float32),
        expert_loads=trace.expert_loads.astype(np.float32),
        warnings=sorted({f"{w.category.__name__}: {w.message}" for w in caught}))


def overrides_json(lines: tuple[str, ...]) -> str:
    """`KEY=VALUE` lines (as `epsim simulate --set`) as the JSON the run functions take.

    Raises:
        SpecError: a line that is not `key.path=value`.
    """
    from epsim.spec.scenario import parse_override
    return json.dumps(dict(parse_override(line) for line in lines), sort_keys=True)


def read_summary(name: str, content: bytes) -> dict:
    """An uploaded summary.json of `epsim simulate --out` (`epsim.commands.compare.load_run`'s
    check: a summary with the keys a comparison reads)."""
    from epsim.commands.compare import load_run
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "summary.json"
        path.write_bytes(content)
        try:
            return load_run(str(path), [], False)[0]
        except EpsimError as exc:
            raise type(exc)(str(exc).replace(str(path), upload_name(name))) from None


# -- EPLB interval sweep ---------------------------------------------------------------------------
@st.cache_data(show_spinner="simulating every rebalance interval and a run without EPLB…")
def interval_sweep(text: str, where: str, base_dir: str, overrides_json: str,
                   intervals: tuple[int, ...], workers: int):
    """`epsim.plan.eplb_sweep.sweep_rebalance_interval` of the scenario: (rows, baseline row,
    best row)."""
    from epsim.plan.eplb_sweep import sweep_rebalance_interval
    scenario = parse_scenario(text, where, base_dir, overrides_json)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with workers_skip_the_page():
            sweep = sweep_rebalance_interval(scenario, list(intervals), workers=workers)
    return sweep.rows, sweep.baseline, sweep.best


# -- planning -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepView:
    """A finished sweep's rows before choosing (`epsim.plan.run_plan` without constraints)."""

    rows: list
    columns: list
    keys: list
    skipped: list        # "values: reason" of points that are not valid scenarios
    warnings: dict
    wall_s: float


@st.cache_data(show_spinner="simulating every sweep point…", max_entries=8)
def run_sweep(text: str, where: str, base_dir: str, sweeps: tuple[str, ...],
              overrides: tuple[str, ...], workers: int, warm_start: bool = False) -> SweepView:
    """`epsim.plan.run_plan` of the scenario text over `sweeps` (`KEY=V1,V2` each);
    `warm_start`: decode points start at the screen's steady batch (`--warm-start`)."""
    from epsim.io import load_yaml
    from epsim.plan import run_plan
    parse_scenario(text, where, base_dir)       # a bad base scenario fails with epsim's message
    mapping = load_yaml(text, where)
    mapping.setdefault("base_dir", base_dir)    # traces resolve as for the file itself
    with workers_skip_the_page():
        result = run_plan(mapping, list(sweeps), overrides=list(overrides), workers=workers,
                          progress=False, plots=False, require_feasible=False,
                          warm_start=warm_start)
    skipped = [", ".join(f"{k}={v}" for k, v in s.values.items()) + f": {s.reason}" for s in result.skipped]
    return SweepView(result.rows, result.columns, result.keys, skipped, result.warnings, result.wall_s)


def read_results_table(name: str, content: bytes):
    """An uploaded results.csv as (rows, columns, keys) (`epsim.plan.results.read_rows`)."""
    from epsim.plan.results import read_rows
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / upload_name(name)
        path.write_bytes(content)
        return read_rows(path)


def choose(rows: list, columns: list, keys: list, constraints: list[str], objectives: list[str]):
    """`epsim.plan.results.choose`: feasible points, Pareto frontier, best point."""
    from epsim.plan.results import choose as plan_choose
    return plan_choose(rows, columns, keys, constraints, objectives)


def results_csv(rows: list, columns: list) -> str:
    """A results table as the text of `epsim plan`'s results.csv (loadable here again)."""
    from epsim.plan.store import write_csv
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.csv"
        write_csv(rows, columns, path)
        return path.read_text()
