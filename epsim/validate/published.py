"""Published results (DeepEP tables, serving blogs, EPLB reports) reproduced with datasheet
profiles only, as a table: `epsim validate --published` writes `docs/published.md`.

The published figures live in `epsim/data/published/results.yaml` with their source and the
exact quoted text; `epsim.validate.published_predict` predicts each from the conditions the
source states. Nothing is fitted to these figures. A row that misses its target says which
mechanism epsim lacks (the entry's `if_missed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import yaml

from epsim.validate import published_eplb as eplb
from epsim.validate import published_predict as predict

# Targets (issue #14): kernel tables MAPE <= 15 %, end-to-end throughput <= 20 %, EPLB
# imbalance ratios <= 15 %; (issue #44) rebalance stalls <= 25 %, elastic-EP recovery <= 30 %.
TARGET_PCT = {"kernel": 15.0, "throughput": 20.0, "imbalance": 15.0, "rebalance": 25.0,
              "elastic": 30.0}


@dataclass(frozen=True)
class PublishedRow:
    """One published figure and its prediction.

    Attributes:
        table: the group it is judged in (one target per table).
        kind: "kernel" | "throughput" | "imbalance" | "rebalance" (picks the target).
        source: project + file (or blog + table) it comes from.
        conditions: what the source states (shapes, tokens, dtype, EP, GPUs, network).
        case: the row's own conditions (EP, stage, lengths).
        published, predicted: the figure and the prediction, in `unit`.
        quote: the source's text the figure is read from.
        why_missed: the mechanism epsim lacks, shown when the row misses its target.
    """

    table: str
    kind: str
    source: str
    conditions: str
    case: str
    published: float
    predicted: float
    unit: str
    quote: str
    why_missed: str = ""

    @property
    def error_pct(self) -> float:
        """(predicted - published) / published, percent."""
        return 100.0 * (self.predicted - self.published) / self.published

    @property
    def target_pct(self) -> float | None:
        return TARGET_PCT[self.kind]

    @property
    def missed(self) -> bool:
        return self.target_pct is not None and abs(self.error_pct) > self.target_pct


@lru_cache(maxsize=1)
def published_data() -> dict:
    """The published figures file (`epsim/data/published/results.yaml`)."""
    path = resources.files("epsim") / "data" / "published" / "results.yaml"
    return yaml.safe_load(path.read_text())


def _source(src: dict) -> str:
    return f"{src['project']}: {src['file']}"


def _conditions(cond: dict, assumed: str = "") -> str:
    text = ", ".join(f"{k} {v}" for k, v in cond.items())
    return f"{text}; assumed: {assumed}" if assumed else text


def _deepep_rows(data: dict) -> list[PublishedRow]:
    rows = []
    for key, title in (("normal", "DeepEP V1 normal kernels (H800, InfiniBand)"),
                       ("low_latency", "DeepEP V1 low-latency kernels (H800, InfiniBand)"),
                       ("v2", "DeepEP V2 (SM90 / SM100)")):
        entry = data[key]
        cond = entry["conditions"]
        for row in entry["rows"]:
            gpu = row.get("gpu", cond.get("gpu"))
            if key == "low_latency":
                value = predict.deepep_latency_us(gpu, row["ep"], cond["tokens_per_rank"], row["stage"])
            else:
                value = predict.deepep_bandwidth_gbps(gpu, row["ep"], cond["tokens_per_rank"],
                                                      row["stage"], 2 if key == "v2" else 1)
            nodes = max(1, row["ep"] // 8)
            case = f"{gpu} EP{row['ep']} ({nodes} node{'s' if nodes > 1 else ''}) {row['stage']}"
            rows.append(PublishedRow(title, "kernel", _source(entry["source"]),
                                     _conditions(cond, entry.get("assumed", "")), case,
                                     float(row["value"]), value, entry["unit"], row["quote"],
                                     entry.get("if_missed", "")))
    return rows


def _lmsys_rows(data: dict) -> list[PublishedRow]:
    rows = []
    src = data["source"]
    for row in data["rows"]:
        gpu = row.get("gpu", "H100")
        if row["phase"] == "prefill":
            value = predict.serving_throughput("prefill", row["ep"], gpu,
                                               tokens_per_rank=row["tokens_per_rank"],
                                               input_len=row["input_len"])
            case = (f"{gpu} prefill EP{row['ep']}, {row['tokens_per_rank']} tokens/GPU, input "
                    f"{row['input_len']}, routing {row['routing']}"
                    + (f" (assumed: {row['assumed']})" if row.get("assumed") else ""))
        else:
            value = predict.serving_throughput("decode", row["ep"], gpu, redundant=row["redundant"],
                                               batch_per_rank=row["batch_per_rank"],
                                               context=row["context"])
            case = (f"{gpu} decode EP{row['ep']} (+{row['redundant']} redundant), batch "
                    f"{row['batch_per_rank']}/GPU, KV {row['context']}, routing {row['routing']}")
        rows.append(PublishedRow("LMSYS DeepSeek-V3 on 96 H100 (SGLang; DeepSeek's H800 figures)",
                                 "throughput",
                                 _source(src), _conditions(data["conditions"]),
                                 case, float(row["value"]), value, data["unit"], row["quote"],
                                 data.get("if_missed", "")))
    return rows


def _trtllm_rows(data: dict) -> list[PublishedRow]:
    # the input distribution: the no-EPLB per-expert spread, less the sampling noise of a count
    # of that mean (variance ~ mean), which the popularity itself does not carry
    load = data["input_expert_load"]
    cv = float(np.sqrt((load["std"] / load["mean"]) ** 2 - 1.0 / load["mean"]))
    rows = []
    for row in data["rows"]:
        value = predict.eplb_imbalance(row["ep"], row["slots_per_rank"], row["eplb"], cv,
                                       tokens=load["tokens_per_iteration"])
        case = (f"EP{row['ep']}, {row['slots_per_rank']} slots/rank, "
                f"{'EPLB' if row['eplb'] else 'no EPLB'}")
        rows.append(PublishedRow("TensorRT-LLM wide-EP EPLB, DeepSeek-R1 on GB200", "imbalance",
                                 _source(data["source"]),
                                 _conditions(data["conditions"], "input: " + data["input"]), case,
                                 float(row["value"]), value, data["unit"], data["source"]["quote"],
                                 data.get("if_missed", "")))
    return rows


def _rebalance_rows(data: dict) -> list[PublishedRow]:
    rows = []
    for row in data["rows"]:
        c = row["conditions"]
        terms = eplb.rebalance_terms(row["engine"], row["gpu"], c["ep"], row["redundant"],
                                     c["bytes_per_param"], row["tensors_per_expert"],
                                     row["window_steps"], network=c.get("network"),
                                     gpus_per_node=c.get("gpus_per_node"),
                                     version=row.get("version", "0.4.7"),
                                     dispatch_static=row.get("dispatch_static", True))
        parts = ", ".join(f"{k} {t.us * 1e-3:.0f} ms" for k, t in terms.terms.items())
        rows.append(PublishedRow("EPLB rebalance cost (stop-the-world)", "rebalance",
                                 _source(row["source"]), _conditions(c, row.get("assumed", "")),
                                 f"{row['id']} ({parts})", float(row["value"]),
                                 terms.stall_us * 1e-6, row["unit"], row["source"]["quote"],
                                 data.get("if_missed", "")))
    return rows


def _elastic_rows(data: dict) -> list[PublishedRow]:
    cond = data["conditions"]
    source = _source(data["source"])
    conditions = _conditions(cond, data.get("assumed", ""))
    rows = []
    for row in data["rows"]:
        terms = eplb.elastic_failure(cond["ep"], cond["redundant"], row["failed"])
        parts = ", ".join(f"{k} {us * 1e-6:.2f} s" for k, (us, _) in terms.terms.items() if us)
        rows.append(PublishedRow("Elastic EP interruption (SGLang + Mooncake EP)", "elastic", source,
                                 conditions, f"{row['failed']} failed: interruption ({parts})",
                                 float(row["interruption_s"]), terms.interruption_us * 1e-6, "s",
                                 f"{data['quote_header']} ... {row['quote']}",
                                 data.get("if_missed", "")))
    ref = data["throughput_reference_failed"]
    ref_row = next(r for r in data["rows"] if r["failed"] == ref)
    for row in data["rows"]:
        if row["failed"] == ref:
            continue
        rows.append(PublishedRow(
            "Elastic EP throughput after failure (SGLang + Mooncake EP)", "elastic", source,
            conditions,
            f"{row['failed']} failed: throughput / throughput with {ref} failed",
            float(row["throughput"]) / float(ref_row["throughput"]),
            eplb.throughput_ratio(cond["ep"], row["failed"], ref), "ratio",
            f"{data['quote_header']} ... {ref_row['quote']} ... {row['quote']}",
            data.get("if_missed", "")))
    return rows


def _qwen3_rows(data: dict) -> list[PublishedRow]:
    rows = []
    for row in data["rows"]:
        out = predict.offline_throughput_per_gpu("Qwen3-235B-A22B", row["gpu"], row["ep"],
                                                 row["isl"], row["osl"])
        case = (f"{row['gpu']} DEP{row['ep']}, ISL/OSL {row['isl']}/{row['osl']} "
                f"(batch {out['batch_per_gpu']:.0f}/GPU from KV capacity)")
        rows.append(PublishedRow("TensorRT-LLM Qwen3-235B-A22B offline throughput", "throughput",
                                 _source(data["source"]),
                                 _conditions(data["conditions"], data.get("assumed", "")), case,
                                 float(row["value"]), out["tokens_per_s_per_gpu"], data["unit"],
                                 row["quote"], data.get("if_missed", "")))
    return rows


def published_rows() -> list[PublishedRow]:
    """Every published figure with its datasheet prediction, in the file's order."""
    data = published_data()
    return (_deepep_rows(data["deepep"]) + _lmsys_rows(data["lmsys"])
            + _qwen3_rows(data["qwen3"]) + _trtllm_rows(data["trtllm_eplb"])
            + _rebalance_rows(data["rebalance"]) + _elastic_rows(data["elastic"]))


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def summary(rows: list[PublishedRow]) -> list[dict]:
    """Per table: rows, MAPE (%), target (%), rows within target, verdict."""
    out = []
    for table in dict.fromkeys(r.table for r in rows):
        part = [r for r in rows if r.table == table]
        mape = float(np.mean([abs(r.error_pct) for r in part]))
        target = part[0].target_pct
        out.append({"table": table, "rows": len(part), "mape_pct": mape, "target_pct": target,
                    "within": None if target is None else sum(not r.missed for r in part),
                    "verdict": "shown" if target is None else ("pass" if mape <= target else "miss")})
    return out


def markdown(rows: list[PublishedRow]) -> str:
    """docs/published.md: the summary, one table per group, then the sources and quotes."""
    lines = [
        "# Published results, reproduced",
        "",
        "<!-- generated by `epsim validate --published --out docs/published.md`; do not edit -->",
        "",
        "Every row is a figure someone published (a DeepEP table, a serving blog, an EPLB report)",
        "and epsim's prediction of it from **datasheet profiles**, no constant chosen after reading",
        "these figures. The EPLB rebalance and elastic-EP rows price the engines' own code paths",
        "term by term with host CPU times we measured (the shipped profile's `any/rebalance_host`:",
        "SGLang's and vLLM's functions timed by `live.bench.eplb_host` on our CPU), the per-transfer",
        "latency of `any/rebalance` and configured defaults cited from source. The",
        "figures, their sources and the exact quoted text are in `epsim/data/published/results.yaml`;",
        "the predictors in `epsim/validate/published_predict.py` and `published_eplb.py`.",
        "Error = (predicted - published) / published. Targets: kernel tables <= 15 % MAPE,",
        "end-to-end throughput <= 20 %, EPLB imbalance <= 15 %, rebalance stalls <= 25 %, elastic-EP",
        "recovery <= 30 %; a row that misses its target says which mechanism epsim lacks.",
        "",
        "| table | rows | MAPE | target | rows within target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for s in summary(rows):
        target = "-" if s["target_pct"] is None else f"{s['target_pct']:g} %"
        within = "-" if s["within"] is None else f"{s['within']} / {s['rows']}"
        lines.append(f"| {s['table']} | {s['rows']} | {s['mape_pct']:.1f} % | {target} | "
                     f"{within} | {s['verdict']} |")
    for table in dict.fromkeys(r.table for r in rows):
        part = [r for r in rows if r.table == table]
        first = part[0]
        lines += ["", f"## {table}", ""]
        lines += [f"Source: {src}." for src in dict.fromkeys(r.source for r in part)] + [""]
        lines += [f"Conditions: {c}." for c in dict.fromkeys(r.conditions for r in part)] + [""]
        lines += [
                  f"| case | published ({first.unit}) | predicted ({first.unit}) | error |",
                  "|---|---|---|---|"]
        for r in part:
            flag = " (miss)" if r.missed else ""
            lines.append(f"| {r.case} | {_fmt(r.published)} | {_fmt(r.predicted)} | "
                         f"{r.error_pct:+.1f} %{flag} |")
        reasons = dict.fromkeys(r.why_missed for r in part if r.missed or r.target_pct is None)
        for reason in reasons:
            if reason:
                lines += ["", f"Why rows miss: {reason}"]
        quotes = dict.fromkeys(r.quote for r in part)
        lines += ["", "Quoted from the source:", ""]
        lines += [f"> {q}" for q in quotes]
    return "\n".join(lines) + "\n"


def rows_json(rows: list[PublishedRow]) -> dict:
    """The rows and the summary as plain data (`--json`)."""
    return {"summary": summary(rows),
            "rows": [{"table": r.table, "case": r.case, "unit": r.unit, "published": r.published,
                      "predicted": r.predicted, "error_pct": r.error_pct,
                      "target_pct": r.target_pct, "missed": r.missed, "source": r.source}
                     for r in rows]}
