"""The bad-input campaign's cases, generated (not hand-picked): every mutation of every
field of a small valid input, crossed with a fixed palette of bad values, and every file kind
the tools read crossed with every corruption.

A case is a command line (or an app loader call) plus the files it reads; `must_refuse`
marks cases whose input no command may accept (non-finite or huge numbers, wrong types, text
that is not UTF-8, ...). `tests/epsim/bad_input_runner.py` runs them; the campaign test
(`test_bad_input_campaign.py`) and docs/bad_input.md report the counts.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

REPO = Path(__file__).resolve().parents[2]
GLOO = REPO / "tests" / "app" / "data"
NUM_RECORD_LINES = 24          # enough for calibrate/validate to fit and judge something

# -- the valid inputs every mutation starts from ------------------------------------------------
SCENARIO = {
    "name": "tiny",
    "model": "Qwen3-30B-A3B",
    "cluster": {"gpu": "H200", "num_nodes": 1},
    "deployment": {"ep_size": 2, "moe_a2a_backend": "torch", "max_running_requests": 8},
    "workload": {
        "arrivals": {"kind": "poisson", "rate_per_s": 50},
        "input_len": {"kind": "fixed", "value": 64},
        "output_len": {"kind": "fixed", "value": 8},
        "skew": {"kind": "zipf", "alpha": 0.8},
        "duration_s": 0.2,
    },
    "seed": 0,
}
# sub-trees swapped in so that fields of other kinds get mutated too
VARIANTS = {
    "workload.arrivals": {"kind": "bursty", "rate_per_s": 50, "cv": 3.0},
    "workload.input_len": {"kind": "lognormal", "mean": 64, "sigma": 0.5, "max": 256},
    "workload.output_len": {"kind": "uniform", "low": 4, "high": 8},
    "workload.skew": {"kind": "hotset", "num_hot": 4, "hot_frac": 0.3, "layer_variation": 0.2,
                      "drift_rate_per_s": 0.5},
    # the parallelism and number-format fields (`epsim.spec.parallel`, `epsim.spec.quant`)
    "deployment.tp_size": 2,
    "deployment.dp_size": 2,
    "deployment.moe_tp_size": 1,
    "deployment.quantization": "fp8",
    "deployment.kv_cache_dtype": "fp8_e4m3",
}
# combinations of valid values that SGLang (or epsim) cannot serve: each refused in one line
_DEPLOYMENT = SCENARIO["deployment"]
BAD_COMBINATIONS = {
    "moe-tp-with-all-to-all": {"deployment": {**_DEPLOYMENT, "tp_size": 4}},
    "ep-not-dividing-tp": {"deployment": {**_DEPLOYMENT, "moe_a2a_backend": "none", "ep_size": 3,
                                          "tp_size": 4}},
    "moe-tp-not-tp-over-ep": {"deployment": {**_DEPLOYMENT, "moe_a2a_backend": "none",
                                             "tp_size": 4, "moe_tp_size": 4}},
    "dp-without-dp-attention": {"deployment": {**_DEPLOYMENT, "enable_dp_attention": False,
                                               "dp_size": 2}},
    "dp-not-dividing-tp": {"deployment": {**_DEPLOYMENT, "ep_size": 4, "dp_size": 3}},
    "attention-tp-not-dividing-heads": {"cluster": {"gpu": "H200", "num_nodes": 8},
                                        "deployment": {**_DEPLOYMENT, "ep_size": 64,
                                                       "enable_dp_attention": False}},
    "nvfp4-without-fp4-tensor-cores": {"deployment": {**_DEPLOYMENT, "quantization": "modelopt_fp4"}},
    "fp8-block-moe-tp-off-block": {"model": "Qwen3-235B-A22B-FP8",
                                   "deployment": {**_DEPLOYMENT, "moe_a2a_backend": "none",
                                                  "ep_size": 1, "tp_size": 8}},
    "attention-not-modelled": {"model": "GLM-5"},
    "failures-with-attention-tp": {"deployment": {**_DEPLOYMENT, "dp_size": 1,
                                                  "failures": [{"rank": 1, "at_s": 0.1}]}},
}
HF_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 128, "num_hidden_layers": 48,
    "hidden_size": 2048, "moe_intermediate_size": 768, "intermediate_size": 6144,
    "num_experts_per_tok": 8, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "vocab_size": 151936, "norm_topk_prob": True, "mlp_only_layers": [],
}
LOADS = [[float((7 * layer + 3 * e) % 11 + 1) for e in range(16)] for layer in range(2)]

# -- palettes ---------------------------------------------------------------------------------------
# (YAML text, must every field refuse it?)
YAML_VALUES = [(".inf", True), ("-.inf", True), (".nan", True), ("1.0e+30", True),
               ("[1, 2]", True), ("{a: 1}", True), ("-1", False), ("0", False),
               ("1.0e-300", False), ("1000000000", False), ("true", False), ("'abc'", False),
               ("null", False), ("9" * 5000, True), ("2024-13-45", True)]
JSON_VALUES = [(float("nan"), True), (float("inf"), True), (1e30, True), ("x", True),
               ([], True), ({}, True), (-1, False), (0, False), (True, False), (None, False)]
ARG_VALUES = ["-1", "0", "1e20", "abc", "", "nan", "inf", "99999999999999999999"]
# options that must refuse every ARG_VALUES value except these (others: anything goes)
REFUSE_EXCEPT = {"--seed": ["0"], "--ep": [], "--tokens-per-rank": ["0"], "--replicas": [],
                 "--gpus": [], "--groups": [], "--nodes": [], "--workers": [],
                 "--max-mape": ["0", "1e20", "99999999999999999999"]}


@dataclass(frozen=True)
class Case:
    """One generated bad input.

    Attributes:
        name: unique, `<family>/<detail>`.
        command: simulate | cost | eplb | calibrate | validate | plan | app.
        argv: command line; `{d}` stands for the case's directory. For `app`: the loader
            (`scenario`, `validation`, `results`) then its files.
        files: (name, bytes maker) written into the case directory first.
        must_refuse: the command must exit 2 (the app loader must raise EpsimError).
        must_finish: the command must finish with exit 0 or 1 (a plan whose bad point fails
            alone, as a skipped point or a failed row, while the others are reported).
    """

    name: str
    command: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, Callable[[], bytes]], ...] = field(default=(), compare=False)
    must_refuse: bool = False
    must_finish: bool = False


def FIFO() -> bytes:
    """Marker maker: the runner makes a named pipe (nobody writes to it) instead of a file."""
    raise AssertionError("the runner creates a FIFO for this entry")


def _const(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _yaml(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def _leaves(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out += _leaves(value, path + ".") if isinstance(value, dict) else [path]
    return out


def _with(tree: dict, path: str, raw_yaml: str) -> bytes:
    """The scenario with one leaf replaced by raw YAML text (so `.inf`, `.nan` stay YAML's)."""
    data = copy.deepcopy(tree)
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = "__MUTATED__"
    return _yaml(data).replace(b"__MUTATED__", raw_yaml.encode())


def _scenario_trees() -> list[tuple[str, dict]]:
    trees = [("base", SCENARIO)]
    for path, subtree in VARIANTS.items():
        tree = copy.deepcopy(SCENARIO)
        section, key = path.split(".")
        tree[section][key] = subtree
        trees.append((path.split(".")[1], tree))
    return trees


def _mutated_scenarios() -> list[tuple[str, bytes, bool, str, str]]:
    """(name, YAML, must_refuse, path, raw value) for every leaf x palette value."""
    out = []
    seen = set()
    for label, tree in _scenario_trees():
        for path in _leaves(tree):
            if path in seen or path.endswith(".kind"):
                continue
            seen.add(path)
            for raw, refuse in YAML_VALUES:
                shown = raw if len(raw) <= 24 else f"{raw[:6]}...({len(raw)} chars)"
                out.append((f"{path}={shown}", _with(tree, path, raw), refuse, path, raw))
    return out


def scenario_cases() -> list[Case]:
    """simulate on every mutated scenario; every third one through the app's upload too."""
    cases = []
    for i, (name, text, refuse, _, _) in enumerate(_mutated_scenarios()):
        files = (("s.yaml", _const(text)),)
        cases.append(Case(f"scenario-field/{name}", "simulate", ("simulate", "{d}/s.yaml", "--out",
                                                                  "{d}/out", "--no-plots"),
                          files, refuse))
        if i % 3 == 0:
            cases.append(Case(f"app-upload/{name}", "app", ("scenario", "{d}/s.yaml"), files, refuse))
    for key in ("model", "cluster", "deployment", "workload"):
        for raw in ("5", "'x'", "[1]", "true", ".inf"):
            text = _with(SCENARIO, key, raw)
            cases.append(Case(f"scenario-section/{key}={raw}", "simulate", ("simulate", "{d}/s.yaml"),
                              (("s.yaml", _const(text)),), True))
    extra = {"unknown-key": {**SCENARIO, "colour": "blue"},
             "hf-config-int": {**SCENARIO, "model": {"hf_config": 5}},
             "hf-config-missing": {**SCENARIO, "model": {"hf_config": "nope.json"}},
             "trace-missing": {**SCENARIO, "workload": {**SCENARIO["workload"],
                                                        "arrivals": {"kind": "trace", "path": "no.csv"}}},
             "failures-bad": {**SCENARIO, "deployment": {**SCENARIO["deployment"],
                                                         "failures": [{"rank": 9, "at_s": -1}]}}}
    for name, tree in extra.items():
        cases.append(Case(f"scenario-shape/{name}", "simulate", ("simulate", "{d}/s.yaml"),
                          (("s.yaml", _const(_yaml(tree))),), True))
    for name, change in BAD_COMBINATIONS.items():
        tree = {**SCENARIO, **change}
        cases.append(Case(f"scenario-combination/{name}", "simulate", ("simulate", "{d}/s.yaml"),
                          (("s.yaml", _const(_yaml(tree))),), True))
    return cases


def plan_cases() -> list[Case]:
    """A sweep over one good and one bad value of a field: the bad point fails (skipped or a
    failed row) and the good one is still reported."""
    cases = []
    for i, (name, _, _, path, raw) in enumerate(_mutated_scenarios()):
        if i % 4 or path in ("name", "description") or raw in ("{a: 1}", "[1, 2]"):
            continue
        good = _good_value(path)
        cases.append(Case(f"plan-point/{name}", "plan",
                          ("plan", "{d}/s.yaml", "--sweep", f"{path}={good},{raw}", "--workers", "1",
                           "--no-plots", "--no-keep-up", "--out", "{d}/plan"),
                          (("s.yaml", _const(_yaml(_tree_for(path)))),), must_finish=True))
    return cases


def _tree_for(path: str) -> dict:
    for _, tree in _scenario_trees():
        node = tree
        try:
            for key in path.split("."):
                node = node[key]
            return tree
        except (KeyError, TypeError):
            continue
    return SCENARIO


def _good_value(path: str):
    node = _tree_for(path)
    for key in path.split("."):
        node = node[key]
    return node


# -- file corruptions -----------------------------------------------------------------------------
def _latin1(text: bytes) -> bytes:
    return text.replace(b"tiny", "tin\xe9".encode("latin-1"), 1) if b"tiny" in text else b"\xe9" + text


def _deep_json(depth: int = 20_000) -> bytes:
    return b"[" * depth + b"]" * depth


def _deep_yaml(depth: int = 5_000) -> bytes:
    return b"model: " + b"[" * depth + b"]" * depth + b"\n"


def _alias_bomb() -> bytes:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    lines.append("name: *a9")
    lines.append("description: *a9")
    return ("\n".join(lines) + "\n").encode()


def _garbage(seed: int, size: int = 4096) -> bytes:
    return random.Random(seed).randbytes(size)


def corruptions(good: bytes, text_kind: str) -> list[tuple[str, Callable[[], bytes] | None, bool]]:
    """(name, bytes maker or None for "a directory", must_refuse) for one file kind.

    text_kind: json | jsonl | yaml | csv | npy | gz | pt
    """
    out = [
        ("latin1", _const(_latin1(good)), text_kind not in ("npy", "pt", "gz")),
        ("utf16", _const(good.decode("utf-8", "replace").encode("utf-16")), text_kind != "pt"),
        ("nul-byte", _const(good[:10] + b"\0" + good[10:]), text_kind not in ("npy", "pt", "gz")),
        ("empty", _const(b""), True),
        ("truncated", _const(good[: max(1, len(good) // 2)]), text_kind not in ("jsonl", "csv")),
        ("garbage", _const(_garbage(len(good))), True),
        ("directory", None, True),
        ("named-pipe", FIFO, True),
    ]
    if text_kind in ("json", "jsonl"):
        out += [("deep-nesting", _const(_deep_json()), True),
                ("huge-integer", _const(b"[" + b"9" * 5000 + b"]\n"), True)]
    if text_kind == "yaml":
        out += [("deep-nesting", _const(_deep_yaml()), True), ("alias-bomb", _const(_alias_bomb()), True),
                ("duplicate-key", _const(good + b"seed: 1\n"), True)]
    if text_kind == "gz":
        raw = gzip.compress(good)
        out += [("gz-corrupt-body", _const(raw[:15] + b"\xff" * 40 + raw[55:]), True),
                ("gz-truncated", _const(raw[: len(raw) // 2]), True)]
    return out


def _records_lines() -> bytes:
    return b"".join(GLOO.joinpath("gloo_records.jsonl").read_bytes().splitlines(keepends=True)[:NUM_RECORD_LINES])


def _npy(array) -> bytes:
    import numpy as np
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def file_cases() -> list[Case]:
    """Every file kind each command reads x every corruption; `/dev/zero` for each reader."""
    scenario = _yaml(SCENARIO)
    profile = GLOO.joinpath("gloo_profile.json").read_bytes()
    records = _records_lines()
    hf = json.dumps(HF_CONFIG).encode()
    loads = json.dumps(LOADS).encode()
    csv = "\n".join(",".join(str(v) for v in row) for row in LOADS).encode()
    previous = json.dumps({"phy2log": [list(range(16))] * 2}).encode()
    arrivals_csv = b"arrival_s,input_len,output_len\n0.0,64,8\n0.05,64,8\n0.1,32,4\n"
    trace = b"".join(json.dumps({"loads": [[1.0] * 128] * 48}).encode() + b"\n" for _ in range(3))
    results_csv = (b"point,point_id,deployment.ep_size,num_gpus,error\n0,a,2,2,\n1,b,4,4,\n")
    with_hf = _yaml({**SCENARIO, "model": {"hf_config": "f.json"}})
    with_arrivals = _yaml({**SCENARIO, "workload": {**SCENARIO["workload"],
                                                    "arrivals": {"kind": "trace", "path": "f.csv"}}})
    with_trace = _yaml({**SCENARIO, "workload": {**SCENARIO["workload"],
                                                 "skew": {"kind": "trace", "path": "f.jsonl"}}})
    kinds = [  # (label, file name, good bytes, kind, command argv, extra files)
        ("scenario", "f.yaml", scenario, "yaml", ("simulate", "{d}/f.yaml"), ()),
        ("plan-base", "f.yaml", scenario, "yaml", ("plan", "{d}/f.yaml", "--sweep", "seed=0,1",
                                                   "--workers", "1", "--no-plots"), ()),
        ("profile", "f.json", profile, "json", ("simulate", "{d}/s.yaml", "--profile", "{d}/f.json"),
         (("s.yaml", scenario),)),
        ("validate-profile", "f.json", profile, "json",
         ("validate", "--profile", "{d}/f.json", "--records", "{d}/r.jsonl", "--no-plots",
          "--out", "{d}/v"), (("r.jsonl", records),)),
        ("records", "f.jsonl", records, "jsonl", ("calibrate", "--records", "{d}/f.jsonl", "--strict"), ()),
        ("records-gz", "f.jsonl.gz", records, "gz", ("calibrate", "--records", "{d}/f.jsonl.gz"), ()),
        ("validate-records", "f.jsonl", records, "jsonl",
         ("validate", "--profile", "{d}/p.json", "--records", "{d}/f.jsonl", "--no-plots", "--strict",
          "--out", "{d}/v"), (("p.json", profile),)),
        ("loads-json", "f.json", loads, "json", ("eplb", "{d}/f.json", "--replicas", "16", "--gpus", "4"), ()),
        ("loads-csv", "f.csv", csv, "csv", ("eplb", "{d}/f.csv", "--replicas", "16", "--gpus", "4"), ()),
        ("loads-npy", "f.npy", _npy(LOADS), "npy", ("eplb", "{d}/f.npy", "--replicas", "16", "--gpus", "4"), ()),
        ("eplb-previous", "f.json", previous, "json",
         ("eplb", "{d}/l.json", "--replicas", "16", "--gpus", "4", "--algorithm", "sticky",
          "--previous", "{d}/f.json"), (("l.json", loads),)),
        ("hf-config", "f.json", hf, "json", ("cost", "--model", "{d}/f.json", "--backend", "torch",
                                             "--ep", "8", "--tokens-per-rank", "64"), ()),
        ("scenario-hf-config", "f.json", hf, "json", ("simulate", "{d}/s.yaml"), (("s.yaml", with_hf),)),
        ("arrival-trace", "f.csv", arrivals_csv, "csv", ("simulate", "{d}/s.yaml"),
         (("s.yaml", with_arrivals),)),
        ("skew-trace", "f.jsonl", trace, "jsonl", ("simulate", "{d}/s.yaml"), (("s.yaml", with_trace),)),
        ("plan-arrival-trace", "f.csv", arrivals_csv, "csv", ("plan", "{d}/s.yaml", "--sweep", "seed=0,1",
                                                               "--workers", "1", "--no-plots"),
         (("s.yaml", with_arrivals),)),
        ("app-results", "f.csv", results_csv, "csv", ("results", "{d}/f.csv"), ()),
        ("app-scenario", "f.yaml", scenario, "yaml", ("scenario", "{d}/f.yaml"), ()),
        ("app-validation", "f.jsonl", records, "jsonl", ("validation", "{d}/f.jsonl", "{d}/p.json"),
         (("p.json", profile),)),
    ]
    cases = []
    for label, fname, good, kind, argv, extra in kinds:
        command = "app" if label.startswith("app-") else argv[0]
        extra_files = tuple((n, _const(b)) for n, b in extra)
        for name, maker, refuse in corruptions(good, kind):
            if command == "app" and maker in (None, FIFO):
                continue                                     # an upload is bytes, never a folder
            files = extra_files + (((fname, maker),) if maker is not None else ())
            if maker is None:
                files += ((fname + "/x", _const(b"")),)          # a directory where a file goes
            cases.append(Case(f"file/{label}/{name}", command, argv, files, refuse))
        if command != "app":
            missing = tuple(a.replace(fname, "missing-" + fname) for a in argv)
            cases.append(Case(f"file/{label}/missing", command, missing, extra_files, True))
        dev_zero = tuple("/dev/zero" if a == "{d}/" + fname else a for a in argv)
        cases.append(Case(f"file/{label}/dev-zero", command, dev_zero, extra_files, True))
    return cases


# -- fields of JSON inputs ------------------------------------------------------------------------
def _json_mutations(base: dict, keys: list[str]) -> list[tuple[str, bytes, bool]]:
    out = []
    for key in keys:
        for value, refuse in JSON_VALUES:
            data = copy.deepcopy(base)
            data[key] = value
            empty_of_its_type = value in ([], {}) and type(value) is type(base[key])
            out.append((f"{key}={json.dumps(value)}", json.dumps(data).encode(),
                        refuse and not empty_of_its_type))
    return out


def profile_cases() -> list[Case]:
    """Every parameter name of the profile x the JSON palette, then `valid_range` shapes."""
    profile = json.loads(GLOO.joinpath("gloo_profile.json").read_text())
    scenario = _yaml(SCENARIO)
    cases = []
    seen = set()
    for key, comp in profile["components"].items():
        for param in comp["params"]:
            if param in seen:
                continue
            seen.add(param)
            for value, refuse in JSON_VALUES:
                data = copy.deepcopy(profile)
                data["components"][key]["params"][param] = value
                cases.append(Case(f"profile-param/{param}={json.dumps(value)}", "simulate",
                                  ("simulate", "{d}/s.yaml", "--profile", "{d}/p.json"),
                                  (("s.yaml", _const(scenario)), ("p.json", _const(json.dumps(data).encode()))),
                                  refuse or (value == -1 and param != "sync_us")))  # signed term
    key = next(k for k, c in profile["components"].items() if c.get("valid_range"))
    for bounds in ([1], [], [float("nan"), 1], [5, 1], "x", [1, 2, 3]):
        data = copy.deepcopy(profile)
        data["components"][key]["valid_range"]["num_tokens_per_rank"] = bounds
        cases.append(Case(f"profile-range/{json.dumps(bounds)}", "validate",
                          ("validate", "--profile", "{d}/p.json", "--records", "{d}/r.jsonl", "--no-plots",
                           "--out", "{d}/v"),
                          (("p.json", _const(json.dumps(data).encode())),
                           ("r.jsonl", _const(_records_lines()))), True))
    return cases


def record_cases() -> list[Case]:
    """Every field of a record line x the JSON palette (line 2 of the file), strict."""
    lines = _records_lines().splitlines()
    first = json.loads(lines[1])
    keys = [k for k in first if k not in ("schema", "provenance", "extra", "value", "loads",
                                          "forward_pass_id")]
    cases = []
    for i, (name, line, refuse) in enumerate(_json_mutations(first, keys)):
        body = b"\n".join([lines[0], line] + lines[2:]) + b"\n"
        strict = i % 2 == 0
        argv = ("calibrate", "--records", "{d}/r.jsonl") + (("--strict",) if strict else ())
        cases.append(Case(f"record-field/{name}{'/strict' if strict else ''}", "calibrate", argv,
                          (("r.jsonl", _const(body)),), refuse and strict and name.split("=")[0] not in
                          ("model", "dispatch_dtype", "mode")))
    return cases


def hf_config_cases() -> list[Case]:
    cases = []
    for name, body, refuse in _json_mutations(HF_CONFIG, list(HF_CONFIG)):
        key = name.split("=")[0]
        optional = key in ("architectures", "mlp_only_layers")   # not read, or an empty default
        cases.append(Case(f"hf-config/{name}", "cost",
                          ("cost", "--model", "{d}/config.json", "--backend", "torch", "--ep", "8",
                           "--tokens-per-rank", "64"),
                          (("config.json", _const(body)),), refuse and not optional))
    for name, body in (("list", b"[1, 2]"), ("number", b"5"), ("string", b'"x"'), ("null", b"null")):
        cases.append(Case(f"hf-config/whole-{name}", "cost",
                          ("cost", "--model", "{d}/config.json", "--backend", "torch", "--ep", "8",
                           "--tokens-per-rank", "64"), (("config.json", _const(body)),), True))
    return cases


# -- command-line values -------------------------------------------------------------------------
def arg_cases() -> list[Case]:
    scenario = (("s.yaml", _const(_yaml(SCENARIO))),)
    loads = (("l.json", _const(json.dumps(LOADS).encode())),)
    records = (("r.jsonl", _const(_records_lines())),)
    cost = ("cost", "--model", "Qwen3-30B-A3B", "--backend", "torch", "--ep", "8", "--tokens-per-rank", "64")
    eplb = ("eplb", "{d}/l.json", "--replicas", "16", "--gpus", "4")
    targets = [  # (name, argv, option, files)
        ("simulate--seed", ("simulate", "{d}/s.yaml"), "--seed", scenario),
        ("simulate--set", ("simulate", "{d}/s.yaml"), "--set", scenario),
        ("cost--ep", cost, "--ep", ()),
        ("cost--tokens-per-rank", cost, "--tokens-per-rank", ()),
        ("cost--seed", cost, "--seed", ()),
        ("cost--skew", cost, "--skew", ()),
        ("cost--cluster", cost, "--cluster", ()),
        ("eplb--replicas", eplb, "--replicas", loads),
        ("eplb--gpus", eplb, "--gpus", loads),
        ("eplb--groups", eplb, "--groups", loads),
        ("eplb--nodes", eplb, "--nodes", loads),
        ("eplb--algorithm", eplb, "--algorithm", loads),
        ("calibrate--holdout", ("calibrate", "--records", "{d}/r.jsonl"), "--holdout", records),
        ("validate--max-mape", ("validate", "--records", "{d}/r.jsonl", "--no-plots", "--out", "{d}/v"),
         "--max-mape", records),
        ("plan--workers", ("plan", "{d}/s.yaml", "--sweep", "seed=0,1", "--no-plots"), "--workers", scenario),
        ("plan--sweep", ("plan", "{d}/s.yaml", "--workers", "1", "--no-plots"), "--sweep", scenario),
        ("plan--constraint", ("plan", "{d}/s.yaml", "--sweep", "seed=0,1", "--workers", "1", "--no-plots"),
         "--constraint", scenario),
    ]
    values = {"--skew": ["zipf:inf", "zipf:-1", "zipf:x", "hotset:0:2", "hotset:4:nan", "trace:/nope.jsonl",
                         "zipf:1e400", "uniform:3"],
              "--set": ["seed=.inf", "workload.duration_s=.nan", "deployment.ep_size=true", "x=",
                        "=1", "a..b=1", "workload=[[[[[[[[", "deployment.ep_size=1e30"],
              "--sweep": ["seed=", "seed=0:1e9:+1", "seed=1:1000000:x2:3", "deployment.ep_size=1:9999:+1",
                          "nope=1,2", "seed=[[[[[", "seed=0,.inf", "workload.duration_s=.nan,0.2"],
              "--constraint": ["tpot<=", "nope<=1", "tpot_ms.p99<=inf", "tpot_ms.p99<<1", "x", "", "a=b",
                               "tpot_ms.p99<=nan"],
              "--cluster": ["XX", "", "H200 ", "h200", "1e20", "nan", "-1", "B200/2"],
              "--algorithm": ["nope", "", "DEEPSEEK", "sticky ", "1", "-1", "nan", "deepseek_global "],
              "--holdout": ["tokens=abc", "skew=", ";;;", "x=1", "tokens=-1", "tokens=1e400", "none;x", ""]}
    cases = []
    for name, argv, option, files in targets:
        for value in values.get(option, ARG_VALUES):
            if option in argv:                       # replace the value already given
                i = argv.index(option)
                full = argv[:i + 1] + (value,) + argv[i + 2:]
            else:
                full = argv + (option, value)
            must = value not in REFUSE_EXCEPT.get(option, ARG_VALUES)
            cases.append(Case(f"args/{name}={value!r}", full[0], full, files, must))
    cases.append(Case("args/plan--ray-address=unreachable", "plan",
                      ("plan", "{d}/s.yaml", "--sweep", "seed=0,1", "--executor", "ray",
                       "--ray-address", "127.0.0.1:9"), scenario, True))
    for output in ("/dev/null/x", "{d}/a-file"):              # under a device, under a file
        a_file = (("a-file", _const(b"x")),)
        cases.append(Case(f"args/simulate--out={output}", "simulate",
                          ("simulate", "{d}/s.yaml", "--out", output), scenario + a_file, True))
        cases.append(Case(f"args/calibrate--out={output}/p.json", "calibrate",
                          ("calibrate", "--records", "{d}/r.jsonl", "--out", output + "/p.json"),
                          records + a_file, True))
        cases.append(Case(f"args/validate--published--out={output}/t.md", "validate",
                          ("validate", "--published", "--out", output + "/t.md"), a_file, True))
        cases.append(Case(f"args/validate--doc={output}", "validate",
                          ("validate", "--records", "{d}/r.jsonl", "--doc", output), records + a_file, True))
        cases.append(Case(f"args/plan--out={output}", "plan",
                          ("plan", "{d}/s.yaml", "--sweep", "seed=0,1", "--out", output), scenario + a_file,
                          True))
    for argv in (("simulat",), ("cost",), ("eplb",), ("calibrate",), ("plan",), ("--nope",),
                 ("simulate", "a", "b"), ("calibrate", "--live", "--records", "x")):
        cases.append(Case(f"args/usage={' '.join(argv)}", "cli", argv, (), True))
    return cases


# -- eplb loads and SGLang dumps -------------------------------------------------------------------
def _pt(obj_maker: Callable[[], object]) -> Callable[[], bytes]:
    def make() -> bytes:
        import torch
        buffer = io.BytesIO()
        torch.save(obj_maker(), buffer)
        return buffer.getvalue()
    return make


class NotAllowed:
    """A pickled class instance: `weights_only=True` must refuse it (never unpickle)."""


def _torch_values() -> list[tuple[str, Callable[[], object]]]:
    def t(*shape, dtype="float32", fill=1.0):
        import torch
        return torch.full(shape, fill, dtype=getattr(torch, dtype))
    p2l = lambda: t(2, 16, dtype="int64", fill=0)                                  # noqa: E731
    return [
        ("list", lambda: [1, 2, 3]),
        ("tensor", lambda: t(2, 16)),
        ("empty-dict", dict),
        ("logical-count-1d", lambda: {"logical_count": t(16)}),
        ("logical-count-nan", lambda: {"logical_count": t(1, 2, 16, fill=float("nan"))}),
        ("logical-count-negative", lambda: {"logical_count": t(1, 2, 16, fill=-1.0)}),
        ("logical-count-string", lambda: {"logical_count": "x"}),
        ("records-not-list", lambda: {"records": 5, "last_physical_to_logical_map": p2l()}),
        ("records-empty", lambda: {"records": [], "last_physical_to_logical_map": p2l()}),
        ("records-wrong-shape", lambda: {"records": [{"forward_pass_id": 0, "rank": 0,
                                                       "global_physical_count": t(3, 5)}],
                                         "last_physical_to_logical_map": p2l()}),
        ("records-missing-count", lambda: {"records": [{"forward_pass_id": 0}],
                                           "last_physical_to_logical_map": p2l()}),
        ("p2l-float", lambda: {"records": [{"forward_pass_id": 0, "rank": 0,
                                             "global_physical_count": t(2, 16)}],
                               "last_physical_to_logical_map": t(2, 16, fill=0.5)}),
        ("p2l-1d", lambda: {"records": [], "last_physical_to_logical_map": t(16, dtype="int64")}),
        ("bf16-counts", lambda: {"logical_count": t(1, 2, 16, dtype="bfloat16")}),
        ("pickled-class", NotAllowed),
    ]


def loads_cases() -> list[Case]:
    shapes = {"negative": [[-1.0, 2.0]], "nan-string": [["nan", 1]], "empty": [], "empty-rows": [[]],
              "ragged": [[1, 2], [3]], "nested-4d": [[[[1.0]]]], "strings": [["a", "b"]],
              "scalar": 5, "dict-no-loads": {"x": 1}, "huge": [[1e300] * 16] * 2,
              "bool": [[True, False]], "loads-null": {"loads": None}}
    cases = []
    for name, value in shapes.items():
        cases.append(Case(f"loads/{name}", "eplb", ("eplb", "{d}/l.json", "--replicas", "16", "--gpus", "4"),
                          (("l.json", _const(json.dumps(value).encode())),), name != "huge"))
    for name, maker in _torch_values():
        cases.append(Case(f"sglang-dump/{name}", "eplb", ("eplb", "{d}/d.pt", "--replicas", "16", "--gpus", "4"),
                          (("d.pt", _pt(maker)),), True))
    for replicas in ("400000000", "2000000", "17"):
        cases.append(Case(f"loads/replicas={replicas}", "eplb",
                          ("eplb", "{d}/l.json", "--replicas", replicas, "--gpus", "1"),
                          (("l.json", _const(json.dumps(LOADS).encode())),), replicas != "17"))
    cases.append(Case("loads/sticky-replicas=100000", "eplb",
                      ("eplb", "{d}/l.json", "--replicas", "100000", "--gpus", "1", "--algorithm", "sticky"),
                      (("l.json", _const(json.dumps(LOADS).encode())),), True))
    return cases


def all_cases() -> list[Case]:
    """Every case, in a fixed order (names unique)."""
    cases = (scenario_cases() + plan_cases() + file_cases() + profile_cases() + record_cases()
             + hf_config_cases() + arg_cases() + loads_cases())
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases
