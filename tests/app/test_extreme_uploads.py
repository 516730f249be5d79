"""An upload the CLI accepts opens in the scenario form and runs (issue #42, item 12): a form
widget's bounds never refuse the value a scenario brings (Streamlit raised
StreamlitValueBelowMinError for `rate_per_s: 1e-9` and showed no Run button)."""

from __future__ import annotations

import pytest
import yaml

from tests.app.apptest import button, errors

BASE = {"name": "edge", "model": "Qwen3-30B-A3B",
        "deployment": {"ep_size": 2, "moe_a2a_backend": "torch", "max_running_requests": 8},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 50},
                     "input_len": {"kind": "fixed", "value": 64},
                     "output_len": {"kind": "fixed", "value": 8}, "duration_s": 0.3}}
EDGES = {
    "rate 1e-9 (with running requests)": {"workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1e-9},
                                                        "initial_running_per_rank": 2}},
    "zipf alpha 1e-4": {"workload": {"skew": {"kind": "zipf", "alpha": 1e-4}}},
    "hot share 0.995": {"workload": {"skew": {"kind": "hotset", "num_hot": 16, "hot_frac": 0.995}}},
    "duration 1e-4 s": {"workload": {"duration_s": 1e-4, "initial_running_per_rank": 1}},
    "seed 1e15, price 1e9": {"seed": 10**15, "cluster": {"price_per_gpu_hour": 1e9}},
}


def _merge(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) and key != "arrivals" \
            and key != "skew" else value
    return out


@pytest.mark.parametrize("name", list(EDGES))
def test_an_upload_the_cli_accepts_opens_in_the_form_and_runs(app, name, tmp_path):
    from epsim.cli import main
    data = _merge(BASE, EDGES[name])
    text = yaml.safe_dump(data).encode()
    path = tmp_path / "edge.yaml"
    path.write_bytes(text)
    assert main(["simulate", str(path), "--no-progress", "--quiet"]) == 0      # the CLI runs it
    app.radio(key="sc_origin").set_value("upload a YAML file")
    app.run()
    app.file_uploader(key="sc_upload").set_value(("edge.yaml", text, "application/x-yaml"))
    app.run()
    assert not app.exception, app.exception
    assert not errors(app)
    button(app, "Run simulation").click()
    app.run()
    assert not app.exception, app.exception
    assert not errors(app), errors(app)
    assert "Results: edge" in [s.value for s in app.subheader]
