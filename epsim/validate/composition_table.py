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


def _baseline_cells(rows, baselines) -> list[str]:
    """`MAPE (bias)` of the constant and the log-log baseline over `rows`."""
    return [_cell([b[i] for b in baselines], [r.measured_us for r in rows]) for i in (0, 1)]


def skill_lines(comp: Composition) -> list[str]:
    """Per backend: layer and stack MAPE over every point, the best baseline's, the skill
    `1 - model / best baseline` and whether the model beats both baselines."""
    out = []
    for what, rows, base, priced in (
            ("layer", comp.layers, comp.layer_baselines,
             lambda r, b: r.priced[b].layer_us),
            ("stack", [r for r in comp.stacks if r.one_us],
             [x for r, x in zip(comp.stacks, comp.stack_baselines) if r.one_us],
             lambda r, b: r.priced_us[b])):
        if not rows or not base:
            continue
        measured = [r.measured_us for r in rows]
        best = min(mape_pct([x[i] for x in base], measured) for i in (0, 1))
        cells = []
        for b in comp.backends:
            model = mape_pct([priced(r, b) for r in rows], measured)
            cells.append(f"`{b}` {model:.1f} % (skill {1 - model / best:+.2f}, beats both: "
                         f"{'yes' if model < best else '**no**'})")
        out.append(f"- {what}s, every point: best baseline {best:.1f} %; " + "; ".join(cells))
    return out


def markdown(comp: Composition) -> str:
    """The composition tables: layer and stack MAPE per shape x EP for each backend with two
    baselines, the parts (one table where every backend prices them alike), the attention
    block's ops refitted on one shape, and the measured layers at the issue's points."""
    b = comp.backends
    lines = [f"- measured: {', '.join(comp.devices)}; {TIMINGS.get(comp.timing, comp.timing)}; "
             f"records {'; '.join(comp.sources)}",
             "- priced: `CostModel.layer` of one decode step, BF16, DP attention, the measured "
             "rows per expert as loads; EP 1 as charged, virtual EP n the rank's own work (no "
             "dispatch, combine, backend layout or sync); plus the per-layer step overhead",
             "- cells: MAPE % over the points (mean signed error %, + = the simulator slower); "
             "baselines, leave-one-out over the measured grid: constant = median of the other "
             "points of the shape and EP (and N), log-log = the other points of the shape, EP "
             "and context (N) along the batch", ""]
    lines += ["**Layer** (the simulator's layer against transformers' whole layer)", "",
              "| shape | EP | points | measured µs | " + " | ".join(f"{x} MAPE %" for x in b)
              + " | constant MAPE % | log-log MAPE % |", "|---|---|---|---|" + "---|" * (len(b) + 2)]
    base = {id(r): x for r, x in zip(comp.layers, comp.layer_baselines)}
    groups = _groups(comp.layers, lambda r: (r.model, r.ep_size))
    for (model, ep), rows in groups.items():
        measured = [r.measured_us for r in rows]
        lines.append(f"| {model} | {ep} | {len(rows)} | {min(measured):.0f}-{max(measured):.0f} | "
                     + " | ".join(_cell([r.priced[x].layer_us for r in rows], measured) for x in b)
                     + " | " + " | ".join(_baseline_cells(rows, [base[id(r)] for r in rows]))
                     + " |")
    every = comp.layers
    lines.append(f"| all | {min(r.ep_size for r in every)}-{max(r.ep_size for r in every)} | "
                 f"{len(every)} | | " + " | ".join(
                     _cell([r.priced[x].layer_us for r in every], [r.measured_us for r in every])
                     for x in b) + " | "
                 + " | ".join(_baseline_cells(every, comp.layer_baselines)) + " |")
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
              + " | constant MAPE % | log-log MAPE % |", "|---|---|---|---|---|" + "---|" * (len(b) + 2)]
    stack_base = {id(r): x for r, x in zip(comp.stacks, comp.stack_baselines)}
    for (model, ep, n), rows in _groups(comp.stacks, lambda r: (r.model, r.ep_size,
                                                               r.num_layers)).items():
        paired = [r for r in rows if r.one_us]
        composes = (f"{np.mean([r.measured_us / (n * r.one_us) - 1 for r in paired]) * 100:+.1f}"
                    if paired else "-")
        lines.append(f"| {model} | {ep} | {n} | {len(rows)} | {composes} | " + " | ".join(
            _cell([r.priced_us[x] for r in paired], [r.measured_us for r in paired]) for x in b)
            + " | " + " | ".join(_baseline_cells(rows, [stack_base[id(r)] for r in rows])) + " |")
    lines += ["", "**Against the baselines**", "", *skill_lines(comp)]
    lines += ["", *held_out_lines(comp)]
    alike = all(np.isclose(r.priced[x].layer_us, r.priced[b[0]].layer_us, rtol=1e-9)
                for r in every for x in b)
    for x in (b[:1] if alike else [p for p in PARTS_BACKENDS if p in b]):
        lines += ["", *parts_table(comp, x, "every backend" if alike else f"backend `{x}`")]
    lines += ["", *issue_points(comp, b[0])]
    return "\n".join(lines) + "\n"


def held_out_lines(comp: Composition) -> list[str]:
    """The attention block's ops refitted on one shape: the other shapes' layer MAPE."""
    held = comp.held_out
    if held is None or not comp.held_out_layers:
        return []
    b = comp.backends[0]
    params = ", ".join(f"{k} {v:.4g}" for k, v in sorted(held.params.items()))
    cells = []
    for model, rows in _groups(comp.held_out_layers, lambda r: r.model).items():
        cells.append(f"{model} {_cell([r.priced[b].layer_us for r in rows], [r.measured_us for r in rows])}"
                     f" over {len(rows)} layers")
    return [f"**Held-out shape**: the attention block's own ops refitted on {held.fit_shape}'s "
            f"{held.num_records} attention-block parts alone ({params}); layer MAPE % (bias) "
            f"of the other shapes, EP 1-16: " + "; ".join(cells) + "."]


def _part_cell(rows, predicted, measured) -> str:
    have = [r for r in rows if all(r.parts_us.get(p) for p in measured)]
    return _cell([predicted(r) for r in have], [sum(r.parts_us[p] for p in measured) for r in have])


def _mean_pct(rows, ratio, parts, sign: str = "+") -> str:
    have = [r for r in rows if all(r.parts_us.get(p) for p in parts)]
    return f"{np.mean([ratio(r) for r in have]) * 100:{sign}.1f}" if have else "-"


def parts_table(comp: Composition, backend: str, label: str = "") -> list[str]:
    """Which part the simulator misprices: each of its parts against the same part measured
    alone in the same run, MAPE % (bias %), per shape x EP."""
    lines = [f"**Parts, {label or f'backend `{backend}`'}** (MAPE % (bias %) of the simulator's "
             "part against the part measured alone; `kernel share`: the SDPA kernel alone / the "
             "attention block, mean %; `whole / parts`: the measured layer / (attention block + "
             "MoE block) - 1, mean %)", "",
             "| shape | EP | attention + its ops vs attention block | kernel share % | experts + "
             "block ops vs grouped GEMM + block ops | MoE vs MoE block | whole / parts % |",
             "|---|---|---|---|---|---|---|"]
    for (model, ep), rows in _groups(comp.layers, lambda r: (r.model, r.ep_size)).items():
        p = {id(r): r.priced[backend] for r in rows}
        lines.append(
            f"| {model} | {ep} | "
            + _part_cell(rows, lambda r: p[id(r)].attention_us + p[id(r)].attention_ops_us,
                         ("attention_block",)) + " | "
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
                     f"{p.attention_us + p.attention_ops_us:.0f} | {_num(part['moe_block'])} | "
                     f"{p.moe_us:.0f} "
                     f"({p.experts_us:.0f} + {p.block_ops_us:.0f} + "
                     f"{_num(p.moe_us - p.experts_us - p.block_ops_us)}) |")
    return lines


def _num(value) -> str:
    """A µs figure to the unit ("-" for none; a rounding residue prints 0, not -0)."""
    return "-" if value is None else f"{value if abs(value) >= 0.5 else 0.0:.0f}"


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
                            priced={b: p.__dict__ for b, p in r.priced.items()},
                            constant_us=base[0], loglog_us=base[1])
                       for r, base in zip(comp.layers, comp.layer_baselines)],
            "stacks": [r.__dict__ for r in comp.stacks]}


def write_csv(comp: Composition, path: Path) -> Path:
    """One row per measured layer: the point, measured whole and parts, and per backend the
    priced layer and parts (µs)."""
    fields = ("layer_us", "attention_us", "attention_ops_us", "experts_us", "block_ops_us",
              "shared_us", "layout_us", "comm_us", "sync_us")
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
