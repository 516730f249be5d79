"""Which SGLang versions aiconfigurator-core's op tables were collected at, per system and table,
against the versions the silicon rows ran; how the ops moved between collections at like-for-like
points; and which version part of the profile (`epsim.calibrate.aic_versions`) prices each row.

    python benchmarks/aic_versions.py [--write]     # records benchmarks/results/aic_versions.md

Reads the op tables (calibration data) and the silicon rows' stated SGLang versions only (never
their measurements). Needs the optional aiconfigurator-core (`pip install 'epsim[aic]'`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import split_allreduce  # noqa: E402
from benchmarks.recorded import write_recorded  # noqa: E402
from epsim.calibrate.aic import import_source, write_records_gz  # noqa: E402
from epsim.calibrate.aic_tables import (AIC_TO_ZOO, TABLES, _sorted_versions,  # noqa: E402
                                        current_version, package_root, package_version,
                                        parse_source)
from epsim.calibrate.inputs import load_records  # noqa: E402
from epsim.cost.allreduce import allreduce_us  # noqa: E402
from epsim.default_profile import (aic_profile_version, choose_part,  # noqa: E402
                                   default_profile, version_parts, versioned_profile)
from epsim.validate.extrapolation import judge, stats  # noqa: E402
from epsim.validate.silicon.needs import GPUS  # noqa: E402
from epsim.validate.silicon.report import md_table  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.scoreboard import select  # noqa: E402

FRAMEWORK = "sglang"
SMALL_BYTES = 256 * 1024          # a decode step's all-reduce (<= 256 KiB) vs a prefill's
# like-for-like comparisons of the other tables that AIC holds at two versions on some systems:
# (op folder, table, old version, new version, the columns that key a point, the times compared)
MOVED = (("comm", "wideep_deepep_ll_perf", "0.5.6.post2", "0.5.12",
          ("node_num", "num_token", "hidden_size", "num_topk", "num_experts"),
          ("dispatch_avg_t_us", "combine_avg_t_us")),
         ("comm", "wideep_deepep_normal_perf", "0.5.6.post2", "0.5.12",
          ("node_num", "num_token", "hidden_size", "num_topk", "num_experts", "dispatch_sms"),
          ("dispatch_transmit_us", "combine_transmit_us")),
         ("moe", "wideep_generation_moe_perf", "0.5.6.post2", "0.5.10", None, ("latency",)),
         ("moe", "wideep_context_moe_perf", "0.5.6.post2", "0.5.10", None, ("latency",)),
         ("gemm", "gemm_perf", "0.5.6.post2", "0.5.14", None, ("latency",)),
         ("moe", "moe_perf", "0.5.10", "0.5.14", None, ("latency",)))
_NOT_KEYS = ("latency", "version", "framework", "device", "op_name")
# DeepSeek-V3's decode all-reduce (hidden 7168, BF16) at a few batch sizes, priced per part
PRICED_TOKENS = (1, 16, 64, 256)
HIDDEN_BYTES = 7168 * 2


def _data(system: str) -> Path:
    return package_root() / "data" / system


def collected(system: str) -> list[list[str]]:
    """One line per table the importer reads: the SGLang versions it was collected at."""
    lines = []
    at = current_version(package_root(), system, FRAMEWORK)
    for op, name in TABLES:
        folder = _data(system) / op / FRAMEWORK
        have = _sorted_versions(v.name for v in folder.iterdir() if (v / f"{name}.parquet").is_file()) \
            if folder.is_dir() else []
        if have:
            lines.append([system, name, ", ".join(f"**{v}**" if v == at else v for v in have)])
    return lines


def _frame(system: str, op: str, version: str, name: str):
    import pandas as pd
    path = _data(system) / op / FRAMEWORK / version / f"{name}.parquet"
    return pd.read_parquet(path) if path.is_file() else None


def _ratio(merged, column: str) -> str:
    ratio = merged[f"{column}_old"] / merged[f"{column}_new"]
    ratio = ratio[ratio.notna() & (ratio > 0)]
    if not len(ratio):
        return "-"
    return f"{ratio.median():.2f} [{ratio.quantile(0.1):.2f}, {ratio.quantile(0.9):.2f}] (n {len(ratio)})"


def allreduce_moves(system: str) -> list[list]:
    """Each older custom all-reduce table / the profile's, median [p10, p90] at the same GPUs and
    size, decode-sized (<= 256 KiB) and larger apart, graph-captured and eager."""
    at = current_version(package_root(), system, FRAMEWORK)
    new = _frame(system, "comm", at, "custom_allreduce_perf")
    out = []
    for version in _sorted_versions(v.name for v in (_data(system) / "comm" / FRAMEWORK).iterdir()):
        old = _frame(system, "comm", version, "custom_allreduce_perf")
        if version == at or old is None:
            continue
        if "backend" not in old.columns:           # another framework's kernel (TRT-LLM's)
            kernels = ", ".join(sorted(set(old["kernel_source"].astype(str))))
            out.append([system, version, f"{kernels} rows: not SGLang's kernel", "-", "-"])
            continue
        for mode in ("graph", "eager"):
            keys = ["num_gpus", "message_size", "allreduce_dtype"]
            merged = old[old.backend == f"sglang_{mode}"].merge(
                new[new.backend == f"sglang_{mode}"], on=keys, suffixes=("_old", "_new"))
            small = merged.message_size * 2 <= SMALL_BYTES
            out.append([system, f"{version} / {at}", mode, _ratio(merged[small], "latency"),
                        _ratio(merged[~small], "latency")])
    return out


def other_moves(system: str) -> list[list]:
    out = []
    for op, name, old_v, new_v, keys, columns in MOVED:
        old, new = _frame(system, op, old_v, name), _frame(system, op, new_v, name)
        if old is None or new is None:
            continue
        on = list(keys) if keys else [c for c in old.columns if c in new.columns
                                      and c not in _NOT_KEYS]
        if "kernel_source" in on and not set(old.kernel_source) & set(new.kernel_source):
            on.remove("kernel_source")        # renamed kernels (GEMM: one per dtype either way)
        # one time per point on each side (a table may hold a point twice)
        merged = old.groupby(on, as_index=False)[list(columns)].median().merge(
            new.groupby(on, as_index=False)[list(columns)].median(), on=on,
            suffixes=("_old", "_new"))
        for column in columns:
            out.append([system, name, f"{old_v} / {new_v}", column, _ratio(merged, column)])
    return out


def priced(system: str) -> list[list]:
    """The all-reduce of a DeepSeek-V3 decode step on 8 GPUs (TP 8) by the profile and by each
    of its parts (µs)."""
    gpu = AIC_TO_ZOO[system]
    base = default_profile(gpu)
    out = []
    for label, profile in [(base.name, base)] + [(f"+ {v}", versioned_profile(gpu, v))
                                                for v in version_parts(gpu)]:
        params = {k.split("/")[-1]: c.params for k, c in profile.components.items()
                  if k.startswith("any/allreduce/graph/")}
        if not {"oneshot", "twoshot", "nccl"} <= set(params):
            continue
        ranks = 4 if system.startswith("gb") else 8
        out.append([system, label, ranks] + [f"{allreduce_us(t * HIDDEN_BYTES, ranks, 1, params):.1f}"
                                             for t in PRICED_TOKENS])
    return out


# the version hold-out: the all-reduce fitted on one collection, judged on another's points
# (fit -> judged): how well the nearest collection stands in for a version AIC did not collect
# (0.5.10 -> 0.5.9, the rule's claim), against the profile's (0.5.14 -> 0.5.9 / 0.5.10)
VERSION_PAIRS = (("0.5.10", "0.5.9"), ("0.5.9", "0.5.10"), ("0.5.14", "0.5.9"),
                 ("0.5.14", "0.5.10"))


def _allreduce_records(system: str, version: str, folder: Path):
    """(records, files) of one collection's graph-captured custom all-reduce (fit records)."""
    source = parse_source(f"aic:{system}/{FRAMEWORK}/{version}")
    tables = [t for t in source.tables()
              if t.name == "custom_allreduce_perf" and t.version == version]
    path = folder / f"{system}_{version}.jsonl.gz"
    write_records_gz(import_source(source, tables).fit, path)
    return load_records([path])


def version_holdout(system: str, folder: Path) -> list[list]:
    """Per `VERSION_PAIRS` pair and algorithm: the model fitted on one collection judged on the
    other's points, beside both baselines (`epsim.validate.extrapolation.judge`'s: the fit
    collection's own median and log-log line at the same configuration)."""
    out = []
    for fit_v, judged_v in VERSION_PAIRS:
        fit, files = _allreduce_records(system, fit_v, folder)
        judged, _ = _allreduce_records(system, judged_v, folder)
        if not fit or not judged:
            continue
        for s in stats(judge("system", fit, judged, files, pair=f"{fit_v} -> {judged_v}")):
            if "nccl" in s.component:     # its largest messages, NCCL's: not the part's
                continue
            out.append([system, s.pair, s.component, s.num, f"{s.model_mape:.1f}",
                        f"{s.constant_mape:.1f}", f"{s.loglog_mape:.1f}"])
    return out


def part_holdouts(system: str, folder: Path) -> list[list]:
    """`benchmarks/aic_holdout.py`'s size and TP hold-outs of the all-reduce on each part's
    collection (the profile's own collection's are in benchmarks/results/aic_holdout.md)."""
    out = []
    for version in version_parts(AIC_TO_ZOO[system]):
        raw, files = _allreduce_records(system, version, folder)
        for axis, (fit, judged) in split_allreduce(raw).items():
            if not fit or not judged:
                continue
            for s in stats(judge(axis, fit, judged, files, pair=version)):
                if "nccl" in s.component:
                    continue
                out.append([system, version, axis, s.component, s.num, f"{s.model_mape:.1f}",
                            f"{s.constant_mape:.1f}", f"{s.loglog_mape:.1f}",
                            "yes" if s.beats_both else "**no**"])
    return out


def row_versions() -> list[list]:
    """The in-scope silicon rows by system and stated SGLang version, and the part that prices
    them (`epsim.default_profile.choose_part`)."""
    rows, _ = select(read_rows(default_csv_path()))
    counts = Counter((r.system, r.backend_version) for r in rows if r.system in AIC_TO_ZOO)
    out = []
    for (system, version), num in sorted(counts.items()):
        gpu = GPUS[system]
        part, why = choose_part(list(version_parts(gpu)), version, aic_profile_version(gpu))
        out.append([system, version or "(not stated)", num, part or "-", why])
    return out


def markdown() -> str:
    systems = [s for s in AIC_TO_ZOO if _data(s).is_dir()]
    lines = [f"aiconfigurator-core {package_version()}; framework {FRAMEWORK}. **Bold**: the "
             "version each system's profile (`aic_<gpu>`) is fitted at (AIC's `current`; a table "
             "not collected there is read at its newest older collection).", "",
             "## Tables by SGLang version", ""]
    lines += md_table(["system", "table", "SGLang versions collected"],
                      [line for s in systems for line in collected(s)])
    lines += ["", "## Silicon rows by SGLang version, and the part that prices them", ""]
    lines += md_table(["system", "row's SGLang", "rows", "part", "why"], row_versions())
    lines += ["", "## SGLang's custom all-reduce: older table / the profile's at the same GPUs "
              "and size", "", "Median [p10, p90] of the latency ratio (n points); > 1: the older "
              "collection is slower.", ""]
    lines += md_table(["system", "versions", "timing", "<= 256 KiB", "> 256 KiB"],
                      [line for s in systems for line in allreduce_moves(s)])
    lines += ["", "## Version hold-out: the all-reduce fitted on one collection, judged on "
              "another's", "", "MAPE %, graph-captured points of SGLang's custom all-reduce; "
              "baselines from the fitted collection at the same configuration (its median over "
              "sizes; its log-log line: the fitted version's own table read at the point).", ""]
    with tempfile.TemporaryDirectory() as folder:
        lines += md_table(["system", "fit -> judged", "component", "n", "model", "constant",
                           "log-log"],
                          [line for s in systems for line in version_holdout(s, Path(folder))])
        lines += ["", "## Each part's own hold-outs (benchmarks/aic_holdout.py's size and TP "
                  "axes on its collection)", "", "MAPE %; size: fit up to a quarter of each "
                  "GPU count's largest message, judge the top two octaves; TP: fit the smaller "
                  "GPU counts, judge the largest.", ""]
        lines += md_table(["system", "part", "axis", "component", "n", "model", "constant",
                           "log-log", "beats both"],
                          [line for s in systems for line in part_holdouts(s, Path(folder))])
    lines += ["", "## Other tables collected at two versions: older / newer at the same point", ""]
    lines += md_table(["system", "table", "versions", "time", "ratio median [p10, p90]"],
                      [line for s in systems for line in other_moves(s)])
    lines += ["", "## Priced: DeepSeek-V3 decode all-reduce (hidden 7168, BF16) by profile and "
              "part, µs", "", "8 GPUs (4 on a GB200 / GB300 tray), graph-captured, SGLang's "
              "algorithm at each size (`epsim.cost.allreduce`).", ""]
    lines += md_table(["system", "profile", "GPUs"] + [f"{t} tokens" for t in PRICED_TOKENS],
                      [line for s in systems for line in priced(s)])
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--write", action="store_true",
                        help="record benchmarks/results/aic_versions.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    package_root()
    body = markdown()
    print(body)
    if args.write:
        path = ROOT / "benchmarks" / "results" / "aic_versions.md"
        write_recorded(path, "aiconfigurator-core's tables by SGLang version",
                       "python benchmarks/aic_versions.py --write", started, body)
        print(f"wrote {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
