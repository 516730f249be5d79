"""Scenario page (AppTest): form edits become overrides, reruns keep results, and bad uploads
and bad form values show epsim's one-line error, never a traceback (the KPIs of a whole run
against epsim's own summary: test_whole_run_kpis.py)."""

from __future__ import annotations

from tests.app.apptest import button, errors, keyed, metrics, submit


def _run_default(at, **values) -> None:
    """The default scenario with widget values set ({key suffix: value}), run."""
    submit(at, "Run simulation", **values)


def test_form_edits_become_overrides(app):
    _run_default(app, _ep=4, _dur=5.0, _warm=1.0)
    caption = " ".join(c.value for c in app.caption)
    assert "on 4 x H200" in caption
    assert '"deployment.ep_size": 4' in caption         # the overrides applied are named
    assert "Results: default" in [s.value for s in app.subheader]


def test_rerun_keeps_the_results(app):
    _run_default(app)
    first = metrics(app)
    app.run()                                            # e.g. after a download click
    assert metrics(app) == first


def test_invalid_form_value_names_the_field(app):
    keyed(app.number_input, "_dur").set_value(1.0)
    keyed(app.number_input, "_warm").set_value(1.0)
    button(app, "Run simulation").click()
    app.run()
    assert not app.exception
    assert errors(app) == ["scenarios/default.yaml: workload.warmup_s (1.0) must be < duration_s (1.0)"]
    assert not app.metric                                # nothing ran


def test_bad_uploads_show_one_line_errors(app):
    app.radio(key="sc_origin").set_value("upload a YAML file")
    app.run()
    assert [i.value for i in app.info]                   # asks for a file
    cases = [
        (b"model: [\n", "bad.yaml: not valid YAML at line 2, column 1: expected the node content, "
                        "but found '<stream end>'"),
        (b"deployment: {ep_size: 8}\n", "bad.yaml: model (missing) must be given"),
        (b"model: Qwen3-30B-A3B\ndeployment: {ep_size: 3}\n",
         "bad.yaml: deployment.ep_size (3) must divide experts + redundant (128 + 0 = 128)"),
        (b"\xff\xfe\x00binary", "bad.yaml: a YAML scenario must be UTF-8 text; it is UTF-16 (save it "
                                "as UTF-8)"),
        (b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + b"".join(
            b"a%d: &a%d [" % (i, i) + b", ".join([b"*a" if i == 1 else b"*a%d" % (i - 1)] * 10) + b"]\n"
            for i in range(1, 8)),
         "bad.yaml: aliases must expand to at most 200000 nodes; the one at line 6 expands to more "
         "(an alias bomb?)"),
    ]
    for content, message in cases:
        app.file_uploader(key="sc_upload").set_value(("bad.yaml", content, "application/x-yaml"))
        app.run()
        assert not app.exception
        assert errors(app) == [message]
        assert [b for b in app.button if b.label == "Run simulation"]     # the form stays


def test_uploaded_scenario_runs(app):
    app.radio(key="sc_origin").set_value("upload a YAML file")
    app.run()
    text = b"name: mine\nmodel: Qwen3-30B-A3B\ndeployment: {ep_size: 2, moe_a2a_backend: torch}\n" \
           b"workload: {duration_s: 1, warmup_s: 0.2}\n"
    app.file_uploader(key="sc_upload").set_value(("mine.yaml", text, "application/x-yaml"))
    app.run()
    button(app, "Run simulation").click()
    app.run()
    assert not app.exception and not errors(app)
    assert "Results: mine" in [s.value for s in app.subheader]
    assert "throughput / GPU" in metrics(app)


def test_an_overloaded_instance_is_flagged_in_one_line(app):
    # the default scenario at EP 4 over deepep serves ~56 of the ~61 req/s offered
    keyed(app.selectbox, "_moe_a2a_backend").set_value("deepep")
    _run_default(app, _ep=4)
    flagged = [w.value for w in app.warning if w.value.startswith("keep-up: ")]
    assert len(flagged) == 1 and flagged[0].endswith(": overloaded") and "of 61.2 req/s" in flagged[0]
    _run_default(app, _ep=8)                       # EP 8 keeps up: a caption, no warning
    assert not [w for w in app.warning if w.value.startswith("keep-up: ")]
    assert any(c.value.startswith("keep-up: serves") and "keeps up" in c.value for c in app.caption)


def test_layout_and_format_fields_in_the_form(app):
    """tp_size, dp_size, moe_tp_size, quantization and kv_cache_dtype are form fields; the
    resolved layout is shown; a bad combination is the spec's one-line error."""
    caption = " ".join(c.value for c in app.caption)
    assert "layout: 8 GPUs: attention DP 8 x TP 1, MoE EP 8 x TP 1" in caption
    keyed(app.number_input, "_dpsize").set_value(2)
    keyed(app.selectbox, "_kv").set_value("fp8_e4m3")
    keyed(app.selectbox, "_quant").set_value("fp8")
    button(app, "Run simulation").click()
    app.run()
    assert not app.exception and not errors(app)
    caption = " ".join(c.value for c in app.caption)
    for applied in ('"deployment.dp_size": 2', '"deployment.kv_cache_dtype": "fp8_e4m3"',
                    '"deployment.quantization": "fp8"'):
        assert applied in caption
    keyed(app.number_input, "_tp").set_value(16)
    button(app, "Run simulation").click()
    app.run()
    assert errors(app) == ["scenarios/default.yaml: deployment.moe_tp_size (2 = tp_size 16 / "
                           "ep_size 8) must be 1 with moe_a2a_backend 'mooncake': SGLang sets "
                           "ep_size = tp_size for all-to-all backends; MoE-TP runs with "
                           "moe_a2a_backend 'none'"]


def test_a_closed_loop_shows_its_clients_and_the_benchmark_numbers(app):
    app.radio(key="sc_origin").set_value("upload a YAML file")
    app.run()
    text = (b"name: clients\nmodel: Qwen3-30B-A3B\n"
            b"deployment: {ep_size: 2, moe_a2a_backend: torch, disaggregation_mode: decode}\n"
            b"workload: {arrivals: {kind: concurrency, clients: 4}, duration_s: 1.5, warmup_s: 0.2,\n"
            b"  input_len: {kind: fixed, value: 128}, output_len: {kind: fixed, value: 8}}\n")
    app.file_uploader(key="sc_upload").set_value(("clients.yaml", text, "application/x-yaml"))
    app.run()
    assert [n for n in app.number_input if n.label == "concurrent clients"][0].value == 4
    button(app, "Run simulation").click()
    app.run()
    assert not app.exception and not errors(app)
    shown = metrics(app)
    assert {"mean TPOT", "median TPOT", "median ITL", "mean TTFT"} <= set(shown)
    captions = " ".join(c.value for c in app.caption)
    assert "As sglang.bench_serving reports it" in captions and "KV cache: " in captions
    assert "keep-up: closed loop of 4 clients" in captions
