"""Extrapolation hold-outs of the components fitted on aiconfigurator-core's tables, against the
two baselines of `epsim validate` (a constant; log-log interpolation), with its machinery
(`epsim.validate.extrapolation.judge`: refit on one side, judge the other):

  tokens  per system: fit tokens per rank <= 1024, judge 2048-16384 (all-reduces: the size axis)
  size    per system, all-reduces (`epsim.cost.allreduce`: NCCL, SGLang's custom one-shot and
          two-shot): fit each (algorithm, GPU count)'s messages up to a quarter of its largest,
          judge the top two octaves (NCCL 256-512 MiB; a custom kernel up to its 8 MiB buffer)
  shape   per system: fit every shape but each kind's largest, judge the largest (experts and
          dense MLPs: hidden x intermediate; GEMMs: n x k; attention: query heads x head_dim;
          MLA and its BMMs: the heads a GPU holds; DeepEP: hidden, within one node: its
          cross-node rows, measured at one hidden size only, are the ep axis's)
  ep, tp  per system, quantised experts: the fused MoE kernel fitted at EP 1 (NVFP4 on
          Blackwell: EP <= 16, the importer fitting its EP > 1 rows) and MoE-TP 1, judged at
          larger EP and at MoE-TP > 1 (its balanced rows, kept pending by the importer);
          DeepEP's MoE runner fitted at EP <= 16, judged at EP 32-256; DeepEP's dispatch and
          combine fitted on 1-2 nodes (EP <= 16), judged on 4-8 (EP 32-64, the low-latency
          rows AIC measured across nodes); all-reduces: each algorithm fitted on its smaller
          GPU counts, judged at its largest (where it has 3)
  system  fit one system's records, judge another's: the constant and log-log baselines are
          A's own measurements of the same configuration; the quantised GEMMs and experts and
          MLA, fitted as fractions of the datasheet, price B from B's datasheet

    python benchmarks/aic_holdout.py [--systems h200_sxm b200_sxm] [--kinds all|kernels]
        [--only KIND ...] [--out benchmarks/results/aic_holdout.md]

A full run takes ~40 minutes; `--only mla_prefill` (record kinds, or `none/dispatch`: one
backend's, or `gemm:fp8_block`: one weight format's) judges those kinds alone (`quant_experts`
fitted beside the dense GEMMs that hold its NVFP4 rate, as a full run fits it) and replaces their
rows in --out, keeping every other row as recorded, the header saying which: for a change that
moves only those kinds' models (each component is fitted on its own records, so the other rows
are what a full run would give).

Records: runs/aic/<system>_sglang_<version>.jsonl.gz, written by scripts/aic_profiles.py (or
imported here when missing). Needs the optional aiconfigurator-core.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.calibrate.aic import import_source, record_paths, write_records_gz  # noqa: E402
from epsim.calibrate.aic_records import DEEPEP_RANKS_PER_NODE  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO, package_version, parse_source  # noqa: E402
from epsim.calibrate.inputs import SourcedRecord, load_records  # noqa: E402
from epsim.cost.record_kernels import KERNEL_KINDS  # noqa: E402
from epsim.validate.extrapolation import (AXES, _x, allreduce_algorithm, judge,  # noqa: E402
                                          markdown, split_tokens, stats)

SYSTEM_PAIRS = (("h200_sxm", "h100_sxm"), ("h100_sxm", "h200_sxm"), ("b200_sxm", "gb200"),
                ("gb200", "gb300"), ("h200_sxm", "b200_sxm"), ("b200_sxm", "b300_sxm"))
NO_SHAPE_AXIS = ("allreduce",)            # collectives: no shape beyond their bytes
DEEPEP_FIT_EP = 16                        # DeepEP's MoE runner: fitted up to EP 16, judged above
FUSED_FIT_EP = 16          # the fused kernel where its EP > 1 rows are fitted: up to EP 16, judged above


def records_of(system: str):
    """(records, files) of a system's fit set, imported first when runs/aic/ lacks them."""
    source = parse_source(f"aic:{system}/sglang")
    path = ROOT / record_paths(source)[0]
    if not path.is_file():
        write_records_gz(import_source(source).fit, path)
    return load_records([path])


def quant_moe_pending(system: str) -> list[SourcedRecord]:
    """The quantised MoE rows the importer keeps pending (`moe_perf` alone: the whole pending
    set is too large to read back), as records of that table."""
    source = parse_source(f"aic:{system}/sglang")
    imported = import_source(source, [t for t in source.tables() if t.name == "moe_perf"])
    table = imported.tables[0].rel if imported.tables else "moe_perf"
    return [SourcedRecord(r, table, i) for i, r in enumerate(imported.pending, 1)
            if r.kind == "quant_experts"]


def split_ep_tp(raw, pending):
    """The EP and MoE-TP hold-outs of the quantised experts: {axis: (fit, judged)}. The fused
    MoE kernel's fit set is MoE-TP 1 at EP 1 -- up to EP `FUSED_FIT_EP` for a format whose
    EP > 1 rows the profile fits (`epsim.calibrate.aic_records.EP_FIT_FORMATS`) -- with the
    dense GEMMs whose fit holds the NVFP4 kernel's tensor rate
    (`epsim.calibrate.build.experts_held`); judged: its balanced rows above that EP (MoE-TP 1)
    and at MoE-TP > 1 (EP 1), same kernel and format. DeepEP's runner: fit EP <= 16, judge
    EP >= 32."""
    fused = [s for s in raw if s.record.kind == "quant_experts" and s.record.backend != "deepep"]
    kernels = {(s.record.weight_dtype, s.record.extra.get("kernel")) for s in fused}
    top = {k: max([s.record.ep_size for s in fused if s.record.ep_size <= FUSED_FIT_EP
                   and (s.record.weight_dtype, s.record.extra.get("kernel")) == k]) for k in kernels}
    fits = lambda s: s.record.ep_size <= top[(s.record.weight_dtype,                  # noqa: E731
                                              s.record.extra.get("kernel"))]
    gemms = [s for s in raw if s.record.kind == "gemm"]
    same = [s for s in pending if s.record.kind == "quant_experts" and s.record.backend != "deepep"
            and s.record.skew.get("kind") == "balanced" and s.record.local_expert_tokens
            and (s.record.weight_dtype, s.record.extra.get("kernel")) in kernels]
    deepep = [s for s in raw if s.record.kind == "quant_experts" and s.record.backend == "deepep"]
    return {"ep": ([s for s in fused if fits(s)] + gemms
                   + [s for s in deepep if s.record.ep_size <= DEEPEP_FIT_EP],
                   [s for s in same + fused if not fits(s) and s.record.moe_tp_size == 1]
                   + [s for s in deepep if s.record.ep_size > DEEPEP_FIT_EP]),
            "tp": (fused + gemms,
                   [s for s in same if s.record.ep_size == 1 and s.record.moe_tp_size > 1])}


def split_allreduce(raw):
    """The all-reduces' size and TP (GPU count) hold-outs: {axis: (fit, judged)} (module doc);
    other records take no part."""
    groups = defaultdict(list)
    for s in raw:
        if s.record.kind == "allreduce" and s.record.timing != "eager":
            groups[allreduce_algorithm(s.record)].append(s)
    out = {"size": ([], []), "tp": ([], [])}
    for records in groups.values():
        top = defaultdict(float)
        for s in records:
            top[s.record.ep_size] = max(top[s.record.ep_size], s.record.bytes)
        for s in records:
            out["size"][s.record.bytes > top[s.record.ep_size] / 4].append(s)
        counts = sorted(top)
        for s in records:             # the fit needs two counts to tell fixed from per-GPU
            out["tp"][len(counts) >= 3 and s.record.ep_size == counts[-1]].append(s)
    return out


def split_tokens_but_allreduce(raw):
    """`split_tokens`, the all-reduces judged on their size axis instead: fitted up to the
    same tokens (their NCCL fit prices the `none` backend's all-gathers, `ring_us`), never
    judged here."""
    fit, judged = split_tokens(raw)
    return fit, [s for s in judged if s.record.kind != "allreduce"]


def across_nodes(s) -> bool:
    """A DeepEP dispatch or combine record whose ranks span nodes."""
    return (s.record.backend == "deepep" and s.record.kind in ("dispatch", "combine")
            and s.record.ep_size > DEEPEP_RANKS_PER_NODE)


def split_deepep_nodes(raw):
    """DeepEP's dispatch and combine on the ep axis: fit EP <= 16 (one and two nodes), judge
    EP >= 32 (four and eight): (fit, judged); empty where no record spans more than two nodes."""
    deepep = [s for s in raw if s.record.backend == "deepep"
              and s.record.kind in ("dispatch", "combine")]
    judged = [s for s in deepep if s.record.ep_size > DEEPEP_FIT_EP]
    return ([s for s in deepep if s.record.ep_size <= DEEPEP_FIT_EP], judged) if judged else ([], [])


def split_shape(raw):
    """Judged: each kind's records of its largest shape; fit: the rest (collectives and the
    `none` backend's all-gather have no shape axis: left out, and DeepEP's rows across nodes,
    which AIC measured at one hidden size only: the ep axis judges them)."""
    raw = [s for s in raw if s.record.kind not in NO_SHAPE_AXIS and s.record.backend != "none"
           and not across_nodes(s)]
    largest = {}
    for s in raw:
        largest[s.record.kind] = max(largest.get(s.record.kind, 0.0), _x(s.record, "shape"))
    judged = [s for s in raw if _x(s.record, "shape") == largest[s.record.kind]]
    return [s for s in raw if _x(s.record, "shape") < largest[s.record.kind]], judged


def held(record, only: list[str] | None) -> bool:
    """Whether a record not among the `--only` kinds is fitted beside them, as a full run fits
    it: the dense GEMMs whose fit holds the fused NVFP4 experts' tensor rate
    (`epsim.calibrate.build.experts_held`; with `quant_experts:FORMAT`, that format's), the
    all-reduces whose NCCL fit prices the `none` backend's all-gathers
    (`epsim.cost.record.allgather_record_us`) and the MLA prefill whose
    fit holds the MLA decode's tensor rate (`epsim.calibrate.build.mla_decode_held`: without
    it `--only mla_decode` fitted that rate free, and B200's 128-head shape cells came out
    50-80 % high where the full run's are within 20 %)."""
    if not only:
        return False
    # `quant_experts:nvfp4` too: without its dense GEMM the NVFP4 fused MoE's rate was fitted
    # free (B200's tokens cell 16.1 % where the full run's is 9.8)
    return ((record.kind == "gemm" and ("quant_experts" in only
                                        or f"quant_experts:{record.weight_dtype}" in only))
            or (record.kind == "allreduce" and "none/dispatch" in only)
            or (record.kind == "mla_prefill" and "mla_decode" in only))


def _row_key(line: str) -> tuple:
    """A table row's place in `stats` order: (axis, its system pair, component)."""
    label, component = [c.strip() for c in line.strip("|").split("|")[:2]]
    axis, _, pair = label.partition(" (")
    return AXES.index(axis), pair.rstrip(")"), component


def _run_systems(run: str) -> set[str]:
    """The systems a recorded run's command judged (`--systems a b ...`)."""
    return set(run.split("--systems ", 1)[1].split(" --", 1)[0].split()) if "--systems " in run \
        else set(AIC_TO_ZOO)


def merged(recorded: str, fresh: str, only: list[str], run: str) -> tuple[str, str]:
    """(head, body) of the recorded result with the table rows of the `only` kinds on the run's
    systems replaced by `fresh`'s (`markdown` output) and a line saying which rows which run
    regenerated (an earlier run's line keeps the kinds whose rows it still gave: all of them
    where it judged a system this one did not, else those this one did not judge)."""
    head, body = recorded.split("**Extrapolation hold-outs", 1)
    body = "**Extrapolation hold-outs" + body
    rows = lambda text: [x for x in text.splitlines() if x.startswith("| ")           # noqa: E731
                         and not x.startswith(("| axis", "|---"))]
    def chosen(line: str) -> bool:            # a row of an `only` kind, backend/kind or kind:format
        label, _, fmt = _row_key(line)[2].partition(" ")
        backend, kind = label.split("/", 1)
        return (kind in only or f"{backend.split('+')[0]}/{kind}" in only
                or f"{kind}:{fmt}" in only)

    gpus = {AIC_TO_ZOO[s] for s in _run_systems(run) if AIC_TO_ZOO.get(s)}
    ran = lambda line: set(_row_key(line)[1].split(" -> ")) <= gpus                  # noqa: E731
    kept = [x for x in rows(body) if not chosen(x) or not ran(x)] + rows(fresh)
    start = body.index(rows(body)[0])
    # an earlier partial run keeps its line for the kinds whose rows this one leaves as it gave
    # them: all of them where it judged a system this run did not, else those not in `only`
    full, *partial = head.rstrip("\n").split("\n\nRows of ")
    lines = []
    for kinds_ran, r in (p.split(" regenerated by ", 1) for p in partial):
        left = [k for k in kinds_ran.split(", ")
                if k not in only or not _run_systems(r) <= _run_systems(run)]
        if left:
            lines.append(f"Rows of {', '.join(left)} regenerated by {r}")
    lines.append(f"Rows of {', '.join(only)} regenerated by {run}")
    head = full + "".join(f"\n\n{x.split('; the rest as')[0].rstrip('.;')};" for x in lines)
    head = head.rstrip(";") + "; the rest as the full run above gave them.\n\n"
    return head, body[:start] + "\n".join(sorted(kept, key=_row_key)) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--systems", nargs="+", default=[s for s, g in AIC_TO_ZOO.items() if g])
    parser.add_argument("--kinds", choices=("all", "kernels"), default="all",
                        help="kernels: only the quantised GEMMs and experts and MLA "
                             "(epsim.cost.record_kernels), whose fits are fractions of the "
                             "datasheet")
    parser.add_argument("--only", nargs="+", metavar="KIND",
                        help="judge only these record kinds (or BACKEND/KIND: none/dispatch; "
                             "KIND:FORMAT: gemm:fp8_block) and replace their rows in --out")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/aic_holdout.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    start = time.time()

    def chosen(s) -> bool:                  # judged: the `--only` kinds
        return (args.kinds == "all" or s.record.kind in KERNEL_KINDS) and (
            not args.only or s.record.kind in args.only
            or f"{s.record.backend}/{s.record.kind}" in args.only
            or f"{s.record.kind}:{s.record.weight_dtype}" in args.only)

    def kinds(raw):
        return [s for s in raw if chosen(s) or held(s.record, args.only)]

    data = {}
    for system in args.systems:
        raw, files = records_of(system)
        data[system] = (kinds(raw), files)
    rows, notes = [], {}
    for system, (raw, files) in data.items():
        gpu = AIC_TO_ZOO[system]
        splits = {axis: split(raw) for axis, split in (("tokens", split_tokens_but_allreduce),
                                                        ("shape", split_shape))}
        if any(s.record.kind == "quant_experts" for s in raw):     # its pending rows: slow
            splits.update(split_ep_tp(raw, quant_moe_pending(system)))
        for axis, (fit, judged) in [*split_allreduce(raw).items(),
                                    ("ep", split_deepep_nodes(raw))]:
            if judged:
                old_fit, old_judged = splits.get(axis, ([], []))
                splits[axis] = (old_fit + fit, old_judged + judged)
        for axis, (fit, judged) in splits.items():
            judged = [s for s in judged if chosen(s)]
            if not fit or not judged:
                continue
            got = judge(axis, fit, judged, files, pair=gpu)
            rows += got
            notes[f"{axis} ({gpu})"] = f"fit {len(fit)} records, judged {len(got)}"
    for a, b in SYSTEM_PAIRS:
        if a in data and b in data:
            name = f"{AIC_TO_ZOO[a]} -> {AIC_TO_ZOO[b]}"
            got = judge("system", data[a][0], [s for s in data[b][0] if chosen(s)],
                        data[a][1], name)
            rows += got
            notes[f"system ({name})"] = f"fit {len(data[a][0])} records, judged {len(got)}"
    text = markdown(rows, notes)
    run = (f"`python benchmarks/aic_holdout.py --systems {' '.join(args.systems)} --kinds "
           f"{args.kinds}{' --only ' + ' '.join(args.only) if args.only else ''}` "
           f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
           f"{platform.python_version()}, {time.time() - start:.0f} s; aiconfigurator-core "
           f"{package_version()})")
    head = (f"# Hold-outs of the AIC-fitted components\n\nGenerated by {run}. Each axis label's "
            f"system in parentheses; the tokens and shape rows of a system are judged on its own "
            f"records.\n\n")
    if args.only:
        head, text = merged(Path(args.out).read_text(), text, args.only, run)
    tmp = Path(args.out).with_suffix(".md.tmp")
    tmp.write_text(head + text)
    tmp.replace(args.out)                      # never left half-written
    print(head + text)
    print(f"{sum(s.beats_both for s in stats(rows))} of {len(stats(rows))} beat both baselines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
