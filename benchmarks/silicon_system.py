"""One system's in-scope silicon rows, predicted one at a time under each profile named, side by
side: TPOT and TTFT MAPE by EP bucket and every row's signed error. Validation only: the rows
are never fitted on and choose nothing (epsim.validate.silicon.rows).

  datasheet   no profile: every part at its formula's datasheet default (what prices a GPU
              that has no shipped profile)
  default     the GPU's shipped default (epsim.default_profile: `aic_<gpu>` where it ships),
              with the version part of the row's SGLang version (`part_for`) where one ships
  unversioned the GPU's shipped default alone (no version part: every row at its tables' version)
  NAME        a shipped profile (`aic_b300`) or a profile JSON

Beside them, epsim's figures as the whole-set record keeps them (`recorded`:
benchmarks/results/silicon_rows.json.gz, the code and profiles of its commit) and the peer's
there (AIConfigurator 0.12's `estimate`), on the rows each predicts.

    python benchmarks/silicon_system.py --system b300_sxm [--profiles datasheet default]
        [--sample N [--seed S]]                    # N rows drawn (epsim.validate.silicon.rows.sample)
        [--approximate]                            # approximated rows too (--silicon --approximate)
        [--write]                                  # records benchmarks/results/silicon_<gpu>.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.recorded import write_recorded  # noqa: E402
from epsim.default_profile import default_profile  # noqa: E402
from epsim.profile import Profile  # noqa: E402
from epsim.validate.silicon import report  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.needs import GPUS  # noqa: E402
from epsim.validate.silicon.resolve import resolve  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows, sample  # noqa: E402
from epsim.validate.silicon.candidates import predict_plan  # noqa: E402
from epsim.validate.silicon.scoreboard import ep_bucket, layout, select  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RECORDED = "recorded"
PRICED = {"predicted"}        # entry statuses counted (`--approximate` adds "approximated")
UNVERSIONED = "unversioned"
_NONE = {"status": "absent", "shares": {}}              # a row the record does not hold


def profile_file(name: str, gpu: str, folder: Path) -> tuple[str | None, str]:
    """(the scenario's `profile` value, its label) for a `--profiles` item: `default` leaves
    the scenario's profile unset (its GPU's default), `datasheet` names an empty profile."""
    if name == "default":
        return None, default_profile(gpu).name
    if name == UNVERSIONED:
        return UNVERSIONED, f"{default_profile(gpu).name} (no version part)"
    if name == "datasheet":
        path = folder / f"datasheet-{gpu}.json"
        path.write_text(json.dumps(Profile(name=f"datasheet-{gpu}", hardware=gpu)
                                   .model_dump(by_alias=True)))
        return str(path), f"datasheet-{gpu}"
    return name, name


def priced_as(plan, profile: str | None):
    """`plan` (and each of its candidates) with every instance priced by `profile` (None: as
    planned, the GPU's default with the row's version part; `unversioned`: without the part)."""
    if profile is None:
        return plan
    if profile == UNVERSIONED:
        instances = tuple(replace(i, profile_part="") for i in plan.instances)
    else:
        instances = tuple(replace(i, data={**i.data, "profile": profile}) for i in plan.instances)
    return replace(plan, instances=instances,
                   candidates=tuple(priced_as(c, profile) for c in plan.candidates))


def row_prediction(row, profile: str | None, approximate: bool = False) -> dict:
    """epsim's entry for `row` (`epsim.validate.silicon.candidates.predict_plan`: a row several
    deployments fit, under `approximate`, as their geometric mean) priced by `profile`
    (`priced_as`)."""
    return predict_plan(priced_as(plan_row(row, approximate), profile))


def recorded_rows() -> dict[str, dict]:
    """The whole-set record's entry per row id (empty when absent)."""
    if not RECORD.is_file():
        return {}
    return {r["id"]: r for r in json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]}


def entries_of(system: str, profiles: list[str], num: int | None = None, seed: int = 0,
               approximate: bool = False) -> tuple[list[dict], list[str]]:
    """One entry per in-scope row of `system` (the scoreboard's entry shape, `epsim` and
    `peer`, plus `by_profile`: epsim's entry under each profile, `recorded` the whole-set
    record's), and the profiles' labels (`recorded` first)."""
    rows, _ = select(read_rows(default_csv_path()))
    rows = sample([r for r in rows if r.system == system], num, seed)
    gpu = GPUS[system]
    recorded = recorded_rows()
    entries, labels = [], []
    with tempfile.TemporaryDirectory() as folder:
        chosen = [profile_file(p, gpu, Path(folder)) for p in profiles]
        labels = [RECORDED] + [label for _, label in chosen]
        for row in rows:
            ran = resolve(row)
            as_run = ran.row if ran.error is None else row
            entry = {"id": row.id, "layout": layout(row), "concurrency": row.concurrency,
                     "ep": ep_bucket(as_run.tpot_side.moe_ep_size),
                     "measured": {"ttft_ms": row.ttft_ms, "tpot_ms": row.tpot_ms},
                     "peer": recorded.get(row.id, {}).get("peer"),
                     "by_profile": {RECORDED: recorded.get(row.id, {}).get("epsim") or _NONE,
                                    **{label: row_prediction(row, value, approximate)
                                       for value, label in chosen}}}
            entries.append(entry)
    return entries, labels


def _predicted(entries: list[dict], label: str) -> list[dict]:
    return [{**e, "epsim": e["by_profile"][label]} for e in entries
            if e["by_profile"][label]["status"] in PRICED]


def _cell(entries: list[dict], who: str, metric: str) -> str:
    n, mape, median = report.errors(entries, who, metric)
    return "-" if not n else f"{mape:.1f} / {median:.1f}"


def markdown(system: str, entries: list[dict], labels: list[str]) -> str:
    """MAPE / median |error| by EP bucket under each profile (and the peer's on the rows it
    predicts), then every row's signed error, worst TPOT first under the last profile."""
    buckets = sorted({e["ep"] for e in entries}) + ["all"]
    lines = [f"{len(entries)} in-scope rows of {system}; error = (predicted - measured) / measured. "
             f"MAPE / median |error|, %, over the rows each predicts (n).", ""]
    table = []
    for bucket in buckets:
        some = [e for e in entries if bucket in ("all", e["ep"])]
        for label in labels:
            got = _predicted(some, label)
            table.append([bucket, label, len(got), _cell(got, "epsim", "tpot_ms"),
                          _cell(got, "epsim", "ttft_ms"), _shares(got)])
        peer = [e for e in some if (e["peer"] or {}).get("status") in PRICED]
        table.append([bucket, "peer (AIConfigurator, recorded)", len(peer),
                      _cell(peer, "peer", "tpot_ms"), _cell(peer, "peer", "ttft_ms"), "-"])
    lines += report.md_table(["EP", "priced by", "n", "TPOT MAPE / median", "TTFT MAPE / median",
                              "step time fitted / extrapolated / datasheet"], table)
    last = labels[-1]
    lines += ["", f"Every row, worst |TPOT error| under {last} first (signed errors, %):", ""]
    order = sorted(entries, key=lambda e: -_abs(e["by_profile"][last], e, "tpot_ms"))
    cols = ["row", "layout", "clients", "EP"] + [f"TPOT {x}" for x in labels] + \
        [f"TTFT {x}" for x in labels] + ["TPOT peer", "TTFT peer"]
    lines += report.md_table(cols, [[e["id"], e["layout"], e["concurrency"], e["ep"]]
                                    + [_signed(e["by_profile"][x], e, "tpot_ms") for x in labels]
                                    + [_signed(e["by_profile"][x], e, "ttft_ms") for x in labels]
                                    + [_signed(e["peer"], e, "tpot_ms"), _signed(e["peer"], e, "ttft_ms")]
                                    for e in order])
    return "\n".join(lines)


def _abs(side: dict | None, entry: dict, metric: str) -> float:
    if not side or side.get(metric) is None:
        return -1.0
    return abs(side[metric] - entry["measured"][metric]) / entry["measured"][metric]


def _signed(side: dict | None, entry: dict, metric: str) -> str:
    if not side or side.get("status") not in PRICED or side.get(metric) is None:
        return "-"
    return f"{100.0 * (side[metric] - entry['measured'][metric]) / entry['measured'][metric]:+.1f}"


def _shares(entries: list[dict]) -> str:
    """Mean shares of step time over the rows' instances, percent."""
    got = [s for e in entries for s in e["epsim"]["shares"].values()]
    if not got:
        return "-"
    mean = lambda k: 100.0 * sum(s.get(k, 0.0) for s in got) / len(got)       # noqa: E731
    return f"{mean('measured'):.0f} / {mean('extrapolated'):.0f} / {mean('datasheet'):.0f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--system", required=True, choices=sorted(GPUS))
    parser.add_argument("--profiles", nargs="+", default=["datasheet", "default"])
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="N of the system's rows, drawn with --seed (default: every row)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--approximate", action="store_true",
                        help="plan rows as `epsim validate --silicon --approximate` does and "
                             "count its approximated rows too")
    parser.add_argument("--write", action="store_true",
                        help="record benchmarks/results/silicon_<gpu>.md and its rows (.json.gz)")
    args = parser.parse_args(argv)
    if default_csv_path() is None:
        print("silicon_system: needs aiconfigurator-core's silicon_sample.csv "
              "(pip install 'epsim[aic]')")
        return 2
    started = time.perf_counter()
    if args.approximate:
        PRICED.add("approximated")
    entries, labels = entries_of(args.system, args.profiles, args.sample, args.seed,
                                 args.approximate)
    body = markdown(args.system, entries, labels)
    print(body)
    if args.write:
        gpu = GPUS[args.system].lower()
        path = ROOT / "benchmarks" / "results" / f"silicon_{gpu}.md"
        command = f"python benchmarks/silicon_system.py --system {args.system} --profiles " \
                  f"{' '.join(args.profiles)}" \
                  f"{f' --sample {args.sample} --seed {args.seed}' if args.sample else ''}" \
                  f"{' --approximate' if args.approximate else ''} --write"
        write_recorded(path, f"The silicon rows of {args.system}, by profile", command, started, body)
        rows = path.with_suffix(".json.gz")
        tmp = rows.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress((json.dumps(entries, indent=1, sort_keys=True) + "\n")
                                      .encode(), mtime=0))
        tmp.replace(rows)
        print(f"wrote {path.name}, {rows.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
