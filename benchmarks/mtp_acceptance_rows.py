"""MTP rows priced at the acceptance their prompts give (issues 38, 39): every silicon row run
with MTP, epsim's TPOT and TTFT with DeepSeek-V3's natural-text acceptance (before) and with the
published acceptance of InferenceX's prompts (after).

    python benchmarks/mtp_acceptance_rows.py [--write]
    python benchmarks/mtp_acceptance_rows.py --accept-length 2.5    # a what-if, printed only

The rows: those of the whole-set record (benchmarks/results/silicon_rows.json.gz) whose
assumptions name the MTP draft (`speculative_*`, NEXTN), planned as `epsim validate --silicon
--approximate` plans them (`plan_row`) and predicted as it predicts them (`predict`). InferenceX
sends random token ids in DeepSeek-R1's chat template on its MTP runs (`mapping.MTP_PROMPTS`),
so each plan's decoding instances carry `workload.prompt_kind: random_chat` and take InferenceX
PR #649's acceptance (`epsim.sim.accept_sources`: a = 0.691 a position, 2.17 tokens a verify at
the rows' 2 draft steps); before takes the field off (natural text: the DeepSeek-V3 report's
0.85 a position, 2.57 tokens). Nothing is fitted or chosen here: the silicon rows are
validation data, and the acceptance comes from a published measurement on other runs
(MI355X, not these rows). `--accept-length L` prices the decoding instances at a stated
`speculative_accept_length` instead (e.g. 2.5: PR #649's chat-template figure read at 2 draft
steps, the alternative reading of its unstated depth).
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.mapping import MTP_PROMPTS, plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import predict  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "mtp_acceptance_rows.md"
DRAFT = re.compile(r"speculative|NEXTN", re.I)


def mtp_ids() -> list[str]:
    """Ids of the record's rows whose assumptions name the MTP draft."""
    with gzip.open(RECORD, "rt") as f:
        rows = json.load(f)["rows"]
    return [r["id"] for r in rows
            if any(DRAFT.search(a) for a in (r.get("epsim") or {}).get("assumptions", []))]


def _priced(plan, kind: str | None, accept_length: float | None = None):
    """The plan with its decoding instances' prompts `kind` (None: the field off, natural
    text) and, with `accept_length`, that stated length."""
    instances = []
    for inst in plan.instances:
        data = copy.deepcopy(inst.data)
        if data["deployment"].get("speculative_algorithm") is not None:
            if kind is None:
                data["workload"].pop("prompt_kind", None)
            else:
                data["workload"]["prompt_kind"] = kind
            if accept_length is not None:
                data["deployment"]["speculative_accept_length"] = accept_length
        instances.append(replace(inst, data=data))
    assumptions = tuple(a for a in plan.assumptions if a != MTP_PROMPTS or kind is not None)
    return replace(plan, instances=tuple(instances), assumptions=assumptions)


def _group(row) -> str:
    return f"{row.system} {row.mode} {row.gemm_quant_mode}"


def _ape(pred: float, measured: float) -> float:
    return abs(pred / measured - 1)


def table(accept_length: float | None = None) -> str:
    """Per row and per group: measured TPOT / TTFT, before and after (ms), and the MAPEs."""
    wanted = set(mtp_ids())
    rows = sorted((r for r in read_rows(default_csv_path()) if r.id in wanted),
                  key=lambda r: (_group(r), r.isl, r.osl, r.concurrency, r.id))
    after_name = "after" if accept_length is None else f"stated {accept_length:g}"
    lines = [f"| row | group | ISL/OSL | clients | TPOT measured | before | {after_name} | "
             f"TTFT measured | before | {after_name} |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    errs = defaultdict(lambda: defaultdict(list))       # group -> metric -> [(before, after)]
    signed = defaultdict(list)                           # metric -> [(before, after)] log ratios
    for row in rows:
        plan = plan_row(row, approximate=True)
        before = predict(_priced(plan, None))
        after = predict(_priced(plan, "random_chat", accept_length))
        if before["tpot_ms"] is None or after["tpot_ms"] is None:
            lines.append(f"| {row.id} | {_group(row)} | {row.isl}/{row.osl} | {row.concurrency} | "
                         f"{row.tpot_ms:.1f} | {before['status']} | {after['status']} | | | |")
            continue
        for metric, measured in (("tpot", row.tpot_ms), ("ttft", row.ttft_ms)):
            pair = (before[f"{metric}_ms"], after[f"{metric}_ms"])
            for g in (_group(row), "all"):
                errs[g][metric].append(tuple(_ape(p, measured) for p in pair))
            signed[metric].append(tuple(math.log(p / measured) for p in pair))
        lines.append(f"| {row.id} | {_group(row)} | {row.isl}/{row.osl} | {row.concurrency} | "
                     f"{row.tpot_ms:.1f} | {before['tpot_ms']:.1f} | {after['tpot_ms']:.1f} | "
                     f"{row.ttft_ms:.0f} | {before['ttft_ms']:.0f} | {after['ttft_ms']:.0f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines += ["", f"| group | rows | TPOT MAPE before | {after_name} | TTFT MAPE before | "
              f"{after_name} |", "|---|---:|---:|---:|---:|---:|"]
    for g in sorted(errs, key=lambda g: (g == "all", g)):
        tp, tt = errs[g]["tpot"], errs[g]["ttft"]
        lines.append(f"| {g} | {len(tp)} | " + " | ".join(
            f"{100 * sum(e[i] for e in m) / len(m):.1f} %" for m in (tp, tt) for i in (0, 1)) + " |")
    for metric in ("tpot", "ttft"):
        s = signed[metric]
        if s:
            lines.append(f"\n{metric.upper()} geometric-mean ratio epsim / measured: before "
                         f"{math.exp(sum(x[0] for x in s) / len(s)):.3f}, {after_name} "
                         f"{math.exp(sum(x[1] for x in s) / len(s)):.3f} ({len(s)} rows).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    check = (lambda v: "" if 1.0 <= v <= 3.0 else
             f"--accept-length ({v}) must be in [1, 3] (the rows draft 2 tokens)")
    return recorded_main(argv, __doc__, RESULTS, "MTP rows at their prompts' acceptance",
                         "python benchmarks/mtp_acceptance_rows.py --write", table,
                         ("--accept-length", "price the decoding instances at this stated "
                          "accept length (printed only)", check))


if __name__ == "__main__":
    sys.exit(main())
