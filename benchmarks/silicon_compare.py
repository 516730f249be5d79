"""Two whole-set silicon records side by side, by epsim's own buckets (system x mode x weight quant).

    python benchmarks/silicon_compare.py --before REV [--after PATH]

`--before` is a git revision whose `benchmarks/results/silicon_rows.json.gz` is read (or a path to
a record); `--after` the record to compare (default: the committed one). Over the rows epsim
predicts as stated in both, per bucket: the rows, TPOT MAPE and TTFT MAPE before -> after (the
mean of |predicted / measured - 1|). It prints a markdown table; docs/silicon.md's results
paragraph quotes it (`--before 841a724`: the twelfth record against the thirteenth). Then, for
the `--after` record, the rows both epsim and the peer predict split by whether the row's run had
no warm-up (its assumptions say "benchmark without warm-up"): rows, TTFT MAPE and their share of
the summed TTFT error. The measured values are the records' own; nothing is fitted.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = "benchmarks/results/silicon_rows.json.gz"


def load(where: str) -> dict[str, dict]:
    """id -> row of a record: a file path, or a git revision's committed record."""
    path = Path(where)
    if path.is_file():
        raw = path.read_bytes()
    else:
        done = subprocess.run(["git", "show", f"{where}:{RECORD}"], cwd=ROOT, capture_output=True)
        if done.returncode != 0:
            raise ValueError(f"--before/--after ({where}): neither a file nor a revision holding "
                             f"{RECORD}")
        raw = done.stdout
    rows = json.load(io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(raw))))["rows"]
    return {r["id"]: r for r in rows}


def buckets(before: dict[str, dict], after: dict[str, dict]) -> dict[tuple, list[list[float]]]:
    """(system, mode, quant) -> [[TPOT err before, after, TTFT err before, after], ...] (fractions)
    over the rows both records predict as stated; the key ("all",) holds every such row."""
    out = defaultdict(list)
    for rid, row in after.items():
        new, old = row.get("epsim") or {}, (before.get(rid) or {}).get("epsim") or {}
        if new.get("status") != "predicted" or old.get("status") != "predicted":
            continue
        m = row["measured"]
        errs = [abs(old["tpot_ms"] / m["tpot_ms"] - 1), abs(new["tpot_ms"] / m["tpot_ms"] - 1),
                abs(old["ttft_ms"] / m["ttft_ms"] - 1), abs(new["ttft_ms"] / m["ttft_ms"] - 1)]
        out[("all",)].append(errs)
        out[(row["bucket"]["system"], row["bucket"]["mode"][:6], row.get("gemm_quant_mode"))].append(errs)
    return out


def table(groups: dict[tuple, list[list[float]]]) -> str:
    lines = ["| bucket | rows | TPOT MAPE before -> after | TTFT MAPE before -> after |",
             "|---|---:|---|---|"]
    for key in sorted(groups, key=lambda k: (k != ("all",), [str(p) for p in k])):
        errs = groups[key]
        mean = [100 * sum(e[i] for e in errs) / len(errs) for i in range(4)]
        lines.append(f"| {' '.join(str(p) for p in key)} | {len(errs)} | {mean[0]:.1f} -> "
                     f"{mean[1]:.1f} % | {mean[2]:.1f} -> {mean[3]:.1f} % |")
    return "\n".join(lines) + "\n"


def warm_up_split(after: dict[str, dict]) -> str:
    """The both-predict rows' TTFT error by warm-up (module doc), as markdown."""
    split = defaultdict(list)
    for row in after.values():
        new, peer = row.get("epsim") or {}, row.get("peer") or {}
        if new.get("status") != "predicted" or peer.get("status") != "predicted":
            continue
        cold = any("without warm-up" in a for a in new.get("assumptions", ()))
        split[cold].append(abs(new["ttft_ms"] / row["measured"]["ttft_ms"] - 1))
    total = sum(sum(v) for v in split.values())
    lines = ["| rows both predict | rows | TTFT MAPE | share of the TTFT error |", "|---|---:|---:|---:|"]
    for cold, name in ((True, "run without a warm-up"), (False, "warmed run")):
        errs = split.get(cold, [])
        if errs:
            lines.append(f"| {name} | {len(errs)} | {100 * sum(errs) / len(errs):.1f} % | "
                         f"{100 * sum(errs) / total:.0f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=str(ROOT / RECORD))
    args = parser.parse_args(argv)
    try:
        before, after = load(args.before), load(args.after)
    except (ValueError, OSError, KeyError) as exc:
        print(f"silicon_compare: {exc}", file=sys.stderr)
        return 2
    print(table(buckets(before, after)) + "\n" + warm_up_split(after), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
