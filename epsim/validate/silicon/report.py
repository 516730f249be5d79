"""The silicon scoreboard as tables: coverage and errors of epsim and the peer side by side, by
system x mode x model x EP bucket, the worst rows, why rows are not predicted, and speed.

Error = (predicted - measured) / measured; MAPE is the mean of |error|, "median" the median of
|error|, both in percent. epsim's headline counts rows predicted as the row states them
(`status` "predicted"); rows run under `--approximate` are tabled apart and never mixed in.
Errors side by side are over the rows both predict.
"""

from __future__ import annotations

import statistics
from collections import Counter

from epsim.validate.silicon.gaps import GAPS

SYSTEM_ORDER = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
MODE_ORDER = ("agg", "disagg", "disagg, workers not stated")
WORST = 10
TPOT_TARGET_PCT = 10.0      # issue 39's targets: TPOT and TTFT MAPE over the rows predicted
TTFT_TARGET_PCT = 20.0
NONE_NAMED = "none named"


def status(entry: dict, who: str) -> str | None:
    side = entry.get(who)
    return side["status"] if side else None


def ape(entry: dict, who: str, metric: str) -> float:
    """|error| of one prediction, percent."""
    return abs(signed(entry, who, metric))


def signed(entry: dict, who: str, metric: str) -> float:
    measured = entry["measured"][metric]
    return 100.0 * (entry[who][metric] - measured) / measured


def errors(entries: list[dict], who: str, metric: str) -> tuple[int, float | None, float | None]:
    """(rows, MAPE %, median |error| %) of `who`'s predictions of `metric` over `entries`."""
    values = [ape(e, who, metric) for e in entries]
    if not values:
        return 0, None, None
    return len(values), statistics.fmean(values), statistics.median(values)


def bucket_key(entry: dict) -> tuple:
    b = entry["bucket"]
    return (SYSTEM_ORDER.index(b["system"]) if b["system"] in SYSTEM_ORDER else 99, b["system"],
            MODE_ORDER.index(b["mode"]) if b["mode"] in MODE_ORDER else 9, b["mode"], b["model"],
            b["ep"])


def bucket_label(entry: dict) -> list[str]:
    b = entry["bucket"]
    return [b["system"], b["mode"], b["model"], b["ep"]]


def buckets(entries: list[dict]) -> list[tuple[list[str], list[dict]]]:
    """Entries grouped by bucket, in the order systems, modes, models, EP."""
    groups: dict[tuple, list[dict]] = {}
    for entry in sorted(entries, key=bucket_key):
        groups.setdefault(bucket_key(entry), []).append(entry)
    return [(bucket_label(group[0]), group) for group in groups.values()]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def md_table(columns: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _pair(entries: list[dict], metric: str) -> list[str]:
    """epsim's and the peer's MAPE / median of `metric` over `entries` (both predicted)."""
    _, our_mape, our_median = errors(entries, "epsim", metric)
    _, peer_mape, peer_median = errors(entries, "peer", metric)
    return [f"{_pct(our_mape)} / {_pct(peer_mape)}", f"{_pct(our_median)} / {_pct(peer_median)}"]


def headline(entries: list[dict], peer_run: bool) -> list[str]:
    """The few lines every reader needs: coverage and errors of both, on the rows both predict."""
    num = len(entries)
    ours = [e for e in entries if status(e, "epsim") == "predicted"]
    peer = [e for e in entries if status(e, "peer") == "predicted"]
    both = [e for e in ours if status(e, "peer") == "predicted"]
    lines = [f"- in scope: {num} rows",
             f"- epsim predicts {len(ours)} of {num} ({100 * len(ours) / max(num, 1):.1f} %) as the "
             f"rows state them"]
    if not peer_run:
        return lines + ["- the peer was not run (AIConfigurator not installed, or --no-peer)"]
    lines.append(f"- the peer (AIConfigurator) predicts {len(peer)} of {num} "
                 f"({100 * len(peer) / max(num, 1):.1f} %)")
    for metric, name in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
        n, mape, median = errors(peer, "peer", metric)
        lines.append(f"- the peer on its {n} rows: {name} MAPE {_pct(mape)} %, median {_pct(median)} %")
    for metric, name in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
        n, mape, median = errors(ours, "epsim", metric)
        lines.append(f"- epsim on its {n} rows: {name} MAPE {_pct(mape)} %, median {_pct(median)} %")
    if both:
        tpot, ttft = _pair(both, "tpot_ms"), _pair(both, "ttft_ms")
        lines.append(f"- on the {len(both)} rows both predict (epsim / peer): TPOT MAPE {tpot[0]} %, "
                     f"TTFT MAPE {ttft[0]} %")
    else:
        lines.append("- rows both predict: none")
    return lines


def approximated_lines(entries: list[dict]) -> list[str]:
    """Coverage with `--approximate`'s rows, and its two kinds apart: rows whose deployment is
    ambiguous (the candidates' geometric mean, `epsim.validate.silicon.candidates`; their entry
    has `spread`) and rows approximated otherwise, each with its errors."""
    num = len(entries)
    approx = [e for e in entries if status(e, "epsim") == "approximated"]
    ambiguous = [e for e in approx if "spread" in e["epsim"]]
    covered = sum(status(e, "epsim") == "predicted" for e in entries) + len(approx)
    lines = [f"- with them epsim covers {covered} of {num} ({100 * covered / max(num, 1):.1f} %); "
             f"approximated {len(approx)}, of which {len(ambiguous)} ambiguous: candidates' mean"]
    for label, group in (("ambiguous deployments (the candidates' geometric mean)", ambiguous),
                         ("approximated otherwise", [e for e in approx if e not in ambiguous])):
        if group:
            tpot, ttft = errors(group, "epsim", "tpot_ms"), errors(group, "epsim", "ttft_ms")
            lines.append(f"- {label}: {tpot[0]} rows, TPOT MAPE {_pct(tpot[1])} %, "
                         f"TTFT MAPE {_pct(ttft[1])} %")
    return lines


def coverage_table(entries: list[dict]) -> list[str]:
    rows = []
    for label, group in buckets(entries):
        ours = sum(status(e, "epsim") == "predicted" for e in group)
        approx = sum(status(e, "epsim") == "approximated" for e in group)
        peer = sum(status(e, "peer") == "predicted" for e in group)
        both = sum(status(e, "epsim") == "predicted" and status(e, "peer") == "predicted"
                   for e in group)
        rows.append(label + [len(group), ours, approx, peer, both])
    return md_table(["system", "mode", "model", "EP (TPOT side)", "rows", "epsim", "epsim approximated",
                     "peer", "both"], rows)


def error_table(entries: list[dict], who: str, status_of: str = "predicted") -> list[str]:
    """MAPE and median |error| of TPOT and TTFT by bucket, for `who`'s rows of `status_of`."""
    rows = []
    for label, group in buckets([e for e in entries if status(e, who) == status_of]):
        n, tpot_mape, tpot_median = errors(group, who, "tpot_ms")
        _, ttft_mape, ttft_median = errors(group, who, "ttft_ms")
        rows.append(label + [n, _pct(tpot_mape), _pct(tpot_median), _pct(ttft_mape), _pct(ttft_median)])
    if not rows:
        return ["none"]
    return md_table(["system", "mode", "model", "EP (TPOT side)", "rows", "TPOT MAPE %",
                     "TPOT median %", "TTFT MAPE %", "TTFT median %"], rows)


def _gaps_cell(group: list[dict]) -> str:
    """The gaps that name rows of `group`, with how many, in `GAPS` order."""
    counts = Counter(g for e in group for g in e.get("gaps", ()))
    return "; ".join(f"{gap.key} ({counts[gap.key]})" for gap in GAPS if counts[gap.key]) or NONE_NAMED


def error_share(chosen: list[dict], rows_of: list[dict], metric: str) -> float:
    """Percent of epsim's summed |error| of `metric` over `rows_of` that the rows `chosen` carry."""
    total = sum(ape(e, "epsim", metric) for e in rows_of)
    return 100.0 * sum(ape(e, "epsim", metric) for e in chosen) / total if total else 0.0


def gap_rows(entries: list[dict]) -> tuple[list[dict], dict[str, list[dict]]]:
    """epsim's predicted entries, and those each named gap (`gaps.GAPS`, in order) names."""
    rows_of = [e for e in entries if status(e, "epsim") == "predicted"]
    return rows_of, {gap.key: [e for e in rows_of if gap.key in e.get("gaps", ())] for gap in GAPS}


def gaps_table(entries: list[dict]) -> list[str]:
    """Each named gap on epsim's predicted rows: its rows' errors beside the rest's, and the share
    of epsim's whole |error| its rows carry (a row may carry several gaps, so the shares overlap);
    last, the rows no gap names."""
    rows_of, named = gap_rows(entries)
    if not rows_of:
        return ["none"]

    def line(name: str, metric: str, state: str, chosen: list[dict], what: str) -> list:
        picked = {id(e) for e in chosen}
        rest = [e for e in rows_of if id(e) not in picked]
        cells = [name, metric, state, len(chosen)]
        for m in ("tpot_ms", "ttft_ms"):
            cells.append(f"{_pct(errors(chosen, 'epsim', m)[1])} / {_pct(errors(rest, 'epsim', m)[1])}")
        cells += [f"{error_share(chosen, rows_of, m):.0f}" for m in ("tpot_ms", "ttft_ms")]
        return cells + [what]
    table = [line(gap.key, gap.metric, gap.status, named[gap.key], f"{gap.what} ({gap.evidence})")
             for gap in GAPS]
    table.append(line(f"({NONE_NAMED})", "-", "-", [e for e in rows_of if not e.get("gaps")], "-"))
    return md_table(["gap", "moves", "status", "rows", "TPOT MAPE % (its rows / the rest)",
                     "TTFT MAPE % (its rows / the rest)", "share of all TPOT error %",
                     "share of all TTFT error %", "what, and where it is diagnosed"], table)


def gap_lines(entries: list[dict], top: int = 2) -> list[str]:
    """For the CLI: per metric, the named gaps whose rows carry the most of epsim's error."""
    rows_of, named = gap_rows(entries)
    if not rows_of or not any(named.values()):
        return []
    lines = []
    for metric, label in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
        shares = sorted(((error_share(chosen, rows_of, metric), key, len(chosen))
                         for key, chosen in named.items() if chosen), reverse=True)[:top]
        lines.append(f"most {label} error on named gaps: " + "; ".join(
            f"{key} ({n} rows, {share:.0f} %)" for share, key, n in shares))
    return lines


def targets_table(entries: list[dict]) -> list[str]:
    """epsim's buckets above a target (TPOT MAPE > `TPOT_TARGET_PCT` or TTFT MAPE >
    `TTFT_TARGET_PCT`), each with the named gaps its rows carry."""
    rows = []
    for label, group in buckets([e for e in entries if status(e, "epsim") == "predicted"]):
        n, tpot_mape, _ = errors(group, "epsim", "tpot_ms")
        _, ttft_mape, _ = errors(group, "epsim", "ttft_ms")
        if tpot_mape > TPOT_TARGET_PCT or ttft_mape > TTFT_TARGET_PCT:
            rows.append(label + [n, _pct(tpot_mape), _pct(ttft_mape), _gaps_cell(group)])
    if not rows:
        return ["none"]
    return md_table(["system", "mode", "model", "EP (TPOT side)", "rows", "TPOT MAPE %", "TTFT MAPE %",
                     "named gaps (rows)"], rows)


def side_by_side_table(entries: list[dict], ours_status: str = "predicted") -> list[str]:
    """epsim / peer on the rows both predict, by bucket."""
    pairs = [e for e in entries if status(e, "epsim") == ours_status and status(e, "peer") == "predicted"]
    rows = [label + [len(group), *_pair(group, "tpot_ms"), *_pair(group, "ttft_ms")]
            for label, group in buckets(pairs)]
    if not rows:
        return ["none"]
    return md_table(["system", "mode", "model", "EP (TPOT side)", "rows", "TPOT MAPE % (epsim / peer)",
                     "TPOT median %", "TTFT MAPE % (epsim / peer)", "TTFT median %"], rows)


def worst_table(entries: list[dict], who: str, status_of: str = "predicted") -> list[str]:
    """The `WORST` rows by |TPOT error| with what the prediction lacks."""
    chosen = sorted((e for e in entries if status(e, who) == status_of),
                    key=lambda e: -ape(e, who, "tpot_ms"))[:WORST]
    if not chosen:
        return ["none"]
    rows = []
    for e in chosen:
        side = e[who]
        if who == "epsim":
            lacks = "; ".join(list(e.get("gaps", ())) + side["approximations"] + [
                              f"{role}: {s.get('extrapolated', 0):.0%} "
                              f"extrapolated, {s.get('datasheet', 0):.0%} datasheet"
                              for role, s in side["shares"].items()])
        else:
            lacks = f"version {side['version_used']}" + ("; " + "; ".join(side["notes"]) if side["notes"] else "")
        shown = e["layout"] if e.get("layout_as_run", e["layout"]) == e["layout"] else (
            f"{e['layout']} (ran: {e['layout_as_run']})")
        rows.append([e["id"], shown, e["concurrency"], f"{signed(e, who, 'tpot_ms'):+.1f}",
                     f"{signed(e, who, 'ttft_ms'):+.1f}", lacks])
    return md_table(["row", "layout", "clients", "TPOT error %", "TTFT error %", "what it lacks"], rows)


def reasons_table(entries: list[dict], who: str) -> list[str]:
    """Rows not predicted, by reason: epsim's missing features, the peer's refusal classes."""
    counts: Counter = Counter()
    for e in entries:
        side = e.get(who)
        if not side or side["status"] in ("predicted", "approximated"):
            continue
        if who == "peer":
            counts[side["reason_class"]] += 1
        elif side["missing"]:
            for feature in dict.fromkeys(m["feature"] for m in side["missing"]):
                counts[feature] += 1
        else:
            counts[side.get("reason_class") or (side["reasons"][0] if side["reasons"]
                                                 else side["status"])] += 1
    if not counts:
        return ["none"]
    title = "missing feature (a row may need several)" if who == "epsim" else "reason class"
    return md_table([title, "rows"], [[k, v] for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))])


def speed_lines(entries: list[dict], wall_s: float, workers: int, machine: str,
                resumed: int = 0) -> list[str]:
    """Rows a minute: the whole run (without the `resumed` rows an interrupted run of the same
    code had finished), and each predictor's row-seconds per core."""
    num = len(entries)
    ours_s = sum(e["epsim"]["wall_s"] for e in entries)
    peer = [e["peer"] for e in entries if e.get("peer")]
    run = num - resumed
    lines = [f"- whole run: {run} rows in {wall_s:.0f} s on {workers} worker processes "
             f"({run / max(wall_s, 1e-9) * 60:.0f} rows/min; {machine})"
             + (f"; {resumed} more rows resumed from an interrupted run of the same code"
                if resumed else ""),
             f"- epsim: {ours_s:.1f} row-seconds ({num / max(ours_s, 1e-9) * 60:.0f} rows/min per core; "
             f"a row it cannot express costs only its mapping)"]
    timed = [e["epsim"]["cpu_s"] for e in entries if "cpu_s" in e["epsim"]]
    if timed:
        # a shared machine stretches row-seconds, not the workers' CPU time
        cpu_s = sum(timed)
        lines.append(f"- epsim's CPU time: {cpu_s:.1f} s over {len(timed)} rows (the workers' "
                     f"own; {workers} workers with a core each would need at least "
                     f"{cpu_s / max(workers, 1) / 60:.1f} min)")
        # `--approximate` adds the ambiguous rows' candidates (several simulations a row) to a
        # run whose headline never counts them: what the headline's rows cost, said apart
        extra_s = sum(e["epsim"]["cpu_s"] for e in entries
                      if "cpu_s" in e["epsim"] and e["epsim"].get("status") == "approximated")
        if extra_s:
            rest_s = cpu_s - extra_s
            lines.append(f"- of it, the approximated rows (each candidate simulated, apart from the "
                         f"headline): {extra_s:.1f} s; the rest, the headline's run as `--approximate` "
                         f"left out would give it: {rest_s:.1f} s, at least "
                         f"{rest_s / max(workers, 1) / 60:.1f} min on {workers} workers")
    if peer:
        peer_s = sum(p["wall_s"] for p in peer)
        cached = sum(bool(p.get("cached")) for p in peer)
        lines.append(f"- the peer: {peer_s:.0f} row-seconds ({len(peer) / max(peer_s, 1e-9) * 60:.0f} "
                     f"rows/min per core" + (f"; {cached} rows from its cache, timed when first run, "
                                             f"not in the whole run's time" if cached else "") + ")")
    return lines
