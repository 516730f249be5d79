"""The composition axis as tables: layer and stack MAPE per shape x EP for each a2a backend,
the parts for the issue's backend and for one whose experts are the kernel fit, the issue's
points; a one-screen summary, `--json` rows and a CSV (`epsim validate --composition`)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from epsim.io.write import replacing_file
from epsim.text import table
from epsim.validate.composition import PARTS, Composition

DOC_MARKERS = ("<!-- BEGIN epsim validate --composition (generated; do not edit by hand) -->",
               "<!-- END epsim validate --composition -->")
TIMINGS = {"device": "device time (CUDA-graph replays, L2 flushed)",
           "eager": "eager time (one call from an idle device, or the CPU's clock)"}
PARTS_BACKENDS = ("none", "deepep")   # the issue's backend; one whose experts are the kernel fit


def mape_pct(predicted, measured) -> float:
    """Mean absolute percentage error of paired values (NaN when empty)."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    return float(np.mean(np.abs(p - m) / m) * 100.0) if m.size else float("nan")


def bias_pct(predicted, measured) -> float:
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    return float(np.mean((p - m) / m) * 100.0) if m.size else float("nan")


def _cell(predicted, measured) -> str:
    """`MAPE (bias)` of paired values, `-` when none."""
    if not len(measured):
        return "-"
    return f"{mape_pct(predicted, measured):.1f} ({bias_pct(predicted, measured):+.0f})"


def _groups(rows, key):
    out: dict = {}
    for row in rows:
        out.setdefault(key(row), []).append(row)
    return out


def markdown(comp: Composition) -> str:
    """The composition tables: layer and stack MAPE per shape x EP for each backend, the parts
    for the issue's backend (`none`), and the measured layers at the issue's points."""
    b = comp.backends
    lines = [f"- measured: {', '.join(comp.devices)}; {TIMINGS.get(comp.timing, comp.timing)}; "
             f"records {'; '.join(comp.sources)}",
             "- priced: `CostModel.step` of one decode step, BF16, DP attention, the measured "
             "rows per expert as loads; EP 1 as charged, virtual EP n without dispatch and "
             "combine; plus the per-layer step overhead",
             "- cells: MAPE % over the points (mean signed error %, + = the simulator slower)", ""]
    lines += ["**Layer** (the simulator's layer against transformers' whole layer)", "",
              "| shape | EP | points | measured µs | " + " | ".join(f"{x} MAPE %" for x in b)
              + " |", "|---|---|---|---|" + "---|" * len(b)]
    groups = _groups(comp.layers, lambda r: (r.model, r.ep_size))
    for (model, ep), rows in groups.items():
        measured = [r.measured_us for r in rows]
        lines.append(f"| {model} | {ep} | {len(rows)} | {min(measured):.0f}-{max(measured):.0f} | "
                     + " | ".join(_cell([r.priced[x].layer_us for r in rows], measured) for x in b)
                     + " |")
    every = comp.layers
    lines.append(f"| all | {min(r.ep_size for r in every)}-{max(r.ep_size for r in every)} | "
                 f"{len(every)} | | " + " | ".join(
                     _cell([r.priced[x].layer_us for r in every], [r.measured_us for r in every])
                     for x in b) + " |")
    priced_by = {x: sorted({r.priced[x].experts_component for r in every}) for x in b}
    lines += ["", "Experts priced by: " + "; ".join(
        f"`{x}` {', '.join(f'`{c}`' for c in priced_by[x])}" for x in b) + "."]
    ep1 = [r for r in every if r.ep_size == 1]
    if ep1:
        lines += ["Dispatch + combine charged at EP 1, where nothing leaves the GPU (mean µs): "
                  + "; ".join(f"`{x}` {np.mean([r.priced[x].comm_us for r in ep1]):.0f}"
                              for x in b) + "."]
    lines += ["", "**Stack** (N layers in one graph; `composes`: measured stack / (N x measured "
              "layer) - 1, mean %)", "",
              "| shape | EP | N | points | composes % | " + " | ".join(f"{x} MAPE %" for x in b)
              + " |", "|---|---|---|---|---|" + "---|" * len(b)]
    for (model, ep, n), rows in _groups(comp.stacks, lambda r: (r.model, r.ep_size,
                                                               r.num_layers)).items():
        paired = [r for r in rows if r.one_us]
        composes = (f"{np.mean([r.measured_us / (n * r.one_us) - 1 for r in paired]) * 100:+.1f}"
                    if paired else "-")
        lines.append(f"| {model} | {ep} | {n} | {len(rows)} | {composes} | " + " | ".join(
            _cell([r.priced_us[x] for r in paired], [r.measured_us for r in paired]) for x in b)
            + " |")
    for x in PARTS_BACKENDS:
        if x in b:
            lines += ["", *parts_table(comp, x)]
    lines += ["", *issue_points(comp, b[0])]
    return "\n".join(lines) + "\n"


def _part_cell(rows, predicted, measured) -> str:
    have = [r for r in rows if all(r.parts_us.get(p) for p in measured)]
    return _cell([predicted(r) for r in have], [sum(r.parts_us[p] for p in measured) for r in have])


def _mean_pct(rows, ratio, parts, sign: str = "+") -> str:
    have = [r for r in rows if all(r.parts_us.get(p) for p in parts)]
    return f"{np.mean([ratio(r) for r in have]) * 100:{sign}.1f}" if have else "-"


def parts_table(comp: Composition, backend: str) -> list[str]:
    """Which part the simulator misprices: each of its parts against the same part measured
    alone in the same run, MAPE % (bias %), per shape x EP."""
    lines = [f"**Parts, backend `{backend}`** (MAPE % (bias %) of the simulator's part against "
             "the part measured alone; `kernel share`: the SDPA kernel alone / the attention "
             "block, mean %; `whole / parts`: the measured layer / (attention block + MoE "
             "block) - 1, mean %)", "",
             "| shape | EP | attention vs attention block | kernel share % | experts + block ops "
             "vs grouped GEMM + block ops | MoE vs MoE block | whole / parts % |",
             "|---|---|---|---|---|---|---|"]
    for (model, ep), rows in _groups(comp.layers, lambda r: (r.model, r.ep_size)).items():
        p = {id(r): r.priced[backend] for r in rows}
        lines.append(
            f"| {model} | {ep} | "
            + _part_cell(rows, lambda r: p[id(r)].attention_us, ("attention_block",)) + " | "
            + _mean_pct(rows, lambda r: (r.parts_us["attention_kernel"]
                                         / r.parts_us["attention_block"]),
                        ("attention_kernel", "attention_block"), sign="") + " | "
            + _part_cell(rows, lambda r: p[id(r)].experts_us + p[id(r)].block_ops_us,
                         ("experts_kernel", "block_ops")) + " | "
            + _part_cell(rows, lambda r: p[id(r)].moe_us, ("moe_block",)) + " | "
            + _mean_pct(rows, lambda r: r.measured_us / (r.parts_us["attention_block"]
                                                        + r.parts_us["moe_block"]) - 1,
                        ("attention_block", "moe_block")) + " |")
    return lines


ISSUE_POINTS = (("Qwen3-30B-A3B", 1, 8, 8192), ("Qwen3-30B-A3B", 1, 64, 512))


def issue_points(comp: Composition, backend: str) -> list[str]:
    """The measured and priced layer, attention and MoE at the issue's two points (µs)."""
    rows = [r for r in comp.layers if (r.model, r.ep_size, r.num_seqs, r.context_len)
            in ISSUE_POINTS]
    if not rows:
        return []
    lines = [f"**The issue's points** (µs; simulated with backend `{backend}`)", "",
             "| shape | EP | requests | context | layer | simulated | attention block | "
             "simulated | MoE block | simulated (experts + block ops + rest) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, part = r.priced[backend], r.parts_us
        lines.append(f"| {r.model} | {r.ep_size} | {r.num_seqs} | {r.context_len} | "
                     f"{r.measured_us:.0f} | {p.layer_us:.0f} | {_num(part['attention_block'])} | "
                     f"{p.attention_us:.0f} | {_num(part['moe_block'])} | {p.moe_us:.0f} "
                     f"({p.experts_us:.0f} + {p.block_ops_us:.0f} + "
                     f"{p.moe_us - p.experts_us - p.block_ops_us:.0f}) |")
    return lines


def _num(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def _layer_mape(rows, backend: str) -> str:
    return _cell([r.priced[backend].layer_us for r in rows], [r.measured_us for r in rows])


def summary_lines(comp: Composition) -> list[str]:
    """One screen: layer MAPE at EP 1, at virtual EP 2-16 and for the stacks, per backend."""
    ep1 = [r for r in comp.layers if r.ep_size == 1]
    virtual = [r for r in comp.layers if r.ep_size > 1]
    stacks = [r for r in comp.stacks if r.one_us]
    head = (f"measured     {', '.join(comp.devices)}: {len(comp.layers)} layers, "
            f"{len(comp.stacks)} stacks ({comp.timing} time)")
    rows = [[b, _layer_mape(ep1, b), _layer_mape(virtual, b),
             _cell([r.priced_us[b] for r in stacks], [r.measured_us for r in stacks])]
            for b in comp.backends]
    return [head, "", *table(["backend", "layer EP 1 MAPE % (bias)",
                              "layer virtual EP 2-16", "stacks"], rows, indent="")]


def rows_json(comp: Composition) -> dict:
    """Every layer and stack with what each backend prices (`--json`)."""
    return {"timing": comp.timing, "records": comp.sources, "devices": comp.devices,
            "backends": list(comp.backends),
            "layers": [dict(model=r.model, ep_size=r.ep_size, num_seqs=r.num_seqs,
                            context_len=r.context_len, measured_us=r.measured_us,
                            parts_us=r.parts_us,
                            priced={b: p.__dict__ for b, p in r.priced.items()})
                       for r in comp.layers],
            "stacks": [r.__dict__ for r in comp.stacks]}


def write_csv(comp: Composition, path: Path) -> Path:
    """One row per measured layer: the point, measured whole and parts, and per backend the
    priced layer and parts (µs)."""
    fields = ("layer_us", "attention_us", "experts_us", "block_ops_us", "shared_us", "comm_us",
              "sync_us")
    with replacing_file(path, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "ep_size", "num_seqs", "context_len", "measured_us",
                    *(f"measured_{p}_us" for p in PARTS),
                    *(f"{b}_{f}" for b in comp.backends for f in fields)])
        for r in comp.layers:
            w.writerow([r.model, r.ep_size, r.num_seqs, r.context_len, f"{r.measured_us:.2f}",
                        *("" if r.parts_us[p] is None else f"{r.parts_us[p]:.2f}" for p in PARTS),
                        *(f"{getattr(r.priced[b], f):.2f}" for b in comp.backends for f in fields)])
    return Path(path)
