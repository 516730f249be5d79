"""Our own H200 records against aiconfigurator-core's h200_sxm tables, where both cover a
component: the same configuration measured by both (ratio AIC / ours), and each source's
fitted profile predicting the other's records. DeepEP, which we never measured, side by side:
the shipped profile (no AIC data; DeepEP at datasheet values) and the AIC-fitted one predicting
AIC's DeepEP tables.

    python benchmarks/aic_crosscheck.py [--out benchmarks/results/aic_crosscheck.md]

Reads: epsim/data/records/h200_single/run{1,2}.jsonl.gz (device timings), the installed
aiconfigurator-core's h200_sxm tables (every row, not the fit grid), the shipped profiles
h200x2.json and aic_h200.json. Device time only on both sides.
"""

from __future__ import annotations

import argparse
import platform
import sys
import warnings
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.calibrate.aic import import_source  # noqa: E402
from epsim.calibrate.aic_tables import package_version, parse_source  # noqa: E402
from epsim.calibrate.build import evaluation_profile  # noqa: E402
from epsim.calibrate.inputs import config_key, load_records, merge_passes  # noqa: E402
from epsim.cost.record import predict_record  # noqa: E402
from epsim.errors import EpsimError  # noqa: E402
from epsim.profile import Profile  # noqa: E402

OURS = [ROOT / "epsim/data/records/h200_single/run1.jsonl.gz",
        ROOT / "epsim/data/records/h200_single/run2.jsonl.gz"]
SHIPPED = ROOT / "epsim/data/profiles/h200x2.json"
AIC_PROFILE = ROOT / "epsim/data/profiles/aic_h200.json"
COMPONENTS = ("experts", "dense_mlp", "attention_decode", "attention_prefill")


def _match_key(r) -> tuple | None:
    """What one configuration is on both sides (None: not comparable)."""
    if r.kind == "experts":
        if r.skew.get("kind") not in ("uniform", "balanced") or r.moe_tp_size != 1:
            return None
        if "sglang_fused_moe_triton" not in r.extra.get("kernel", "sglang_fused_moe_triton"):
            return None
        tokens = r.extra.get("num_tokens", r.num_tokens_per_rank * r.ep_size)   # the group's
        return ("experts", r.hidden_size, r.moe_intermediate_size, r.num_experts, r.top_k,
                r.ep_size, tokens)
    if r.kind == "dense_mlp":
        return ("dense_mlp", r.hidden_size, r.intermediate_size, r.num_tokens_per_rank)
    if r.kind.startswith("attention"):
        return (r.kind, r.num_attention_heads, r.num_kv_heads, r.head_dim, r.num_seqs,
                r.context_len)
    return None


def ours() -> tuple[dict, list]:
    """Our device-timed records: mean over the two machines of each configuration's mean of
    pass medians, keyed by `_match_key`; and the merged records themselves."""
    raw, _ = load_records(OURS)
    by_config = defaultdict(list)
    records = []
    for s in merge_passes(raw):
        if s.record.timing == "device" and s.record.kind in COMPONENTS:
            by_config[config_key(s.record)].append(s)
    out = {}
    for group in by_config.values():
        key = _match_key(group[0].record)
        if key is not None:
            out[key] = float(np.mean([s.measured_us for s in group]))
        records.append(group[0].record.model_copy(update={
            "median_us": float(np.mean([s.measured_us for s in group]))}))
    return out, records


def _ratio_row(label: str, pairs: list[tuple[float, float]]) -> str:
    aic, own = np.array([a for a, _ in pairs]), np.array([o for _, o in pairs])
    ratio = aic / own
    p10, p50, p90 = np.percentile(ratio, [10, 50, 90])
    mape = float(np.mean(np.abs(aic - own) / own) * 100)
    return f"| {label} | {len(pairs)} | {p50:.3f} | {p10:.3f}–{p90:.3f} | {mape:.1f} |"


def _mape(records, profile: Profile) -> tuple[int, float]:
    profile = evaluation_profile(profile)
    err = []
    for r in records:
        try:
            p = predict_record(r, profile)
        except EpsimError:
            continue
        err.append(abs(p - r.median_us) / r.median_us * 100)
    return len(err), float(np.mean(err)) if err else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/aic_crosscheck.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    own_by_key, own_records = ours()
    imported = import_source(parse_source("aic:h200_sxm/sglang"), grid=False)
    aic_all = imported.fit + imported.pending
    pairs = defaultdict(list)
    for r in aic_all:
        key = _match_key(r)
        if key is not None and key in own_by_key:
            label = r.kind if r.kind != "experts" else f"experts, EP {'1' if r.ep_size == 1 else '> 1'}"
            pairs[label].append((r.median_us, own_by_key[key]))
    shipped, aic_profile = Profile.load(SHIPPED), Profile.load(AIC_PROFILE)
    lines = ["# Our H200 records against aiconfigurator-core's h200_sxm tables", "",
             f"Generated by `python benchmarks/aic_crosscheck.py` ({datetime.now(timezone.utc):%Y-%m-%d}, "
             f"{platform.node()}, Python {platform.python_version()}; aiconfigurator-core "
             f"{package_version()}, tables at {imported.source.label}). Device time on both sides; "
             f"ours: the mean of the two H200 machines (`h200_single/run{{1,2}}`).", "",
             "## The same configuration measured by both", "",
             "| component | configurations | median AIC / ours | p10–p90 | mean abs. diff. % of ours |",
             "|---|---:|---:|---:|---:|"]
    for label in sorted(pairs):
        lines.append(_ratio_row(label, pairs[label]))
    lines += ["", "## Each source's fitted profile predicting the other's records (MAPE %)", "",
              "| component | ours predicted by aic_h200.json | records | AIC's rows of the fitted "
              "kinds (all, not the fit grid) predicted by h200x2.json | records |",
              "|---|---:|---:|---:|---:|"]
    aic_fit = imported.fit
    for kind in COMPONENTS:
        mine = [r for r in own_records if r.kind == kind and (kind != "experts" or
                                                              r.skew.get("kind") == "uniform")]
        theirs = [r for r in aic_fit if r.kind == kind]
        n1, m1 = _mape(mine, aic_profile)
        n2, m2 = _mape(theirs, shipped)
        lines.append(f"| {kind} | {m1:.1f} | {n1} | {m2:.1f} | {n2} |")
    lines += ["", "## DeepEP: AIC's tables predicted by the shipped profile (no AIC data; DeepEP "
              "at datasheet values) and by the AIC-fitted one (its fit residual)", "",
              "| kernel, stage | records | h200x2.json MAPE % | aic_h200.json MAPE % |",
              "|---|---:|---:|---:|"]
    for mode in ("low_latency", "normal"):
        for kind in ("dispatch", "combine"):
            recs = [r for r in aic_fit if r.backend == "deepep" and r.mode == mode and r.kind == kind]
            n, m_shipped = _mape(recs, shipped)
            _, m_aic = _mape(recs, aic_profile)
            lines.append(f"| {mode}, {kind} | {n} | {m_shipped:.1f} | {m_aic:.1f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
