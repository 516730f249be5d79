"""`any/dual_stream`: the dual-stream shared expert's overlap, carried from its GPU record.

`benchmarks/dual_stream_overlap_gpu.py` times, inside CUDA graphs on one GPU, SGLang's two
branches of `forward_normal_dual_stream` at DeepSeek-V3's shapes split `tp` ways and T tokens:
the shared expert alone (`shared_us`), the router and routed experts alone (`routed_us`), both on
one stream (`serial_us`) and on two (`dual_us`). The overlap at (tp, T) is

    overlap = (serial_us - dual_us) / min(shared_us, routed_us)

the share of the shorter branch the second stream hides (`epsim.cost.dual_stream`). Up to
`PLATEAU_TOKENS` every count takes one overlap, pooled over them (another routed kernel's record
is predicted better so: `--cross-check`); above it each count's own. Each
count's TP splits are pooled (least squares of `hidden = overlap x shorter`): on the H100 record a split's
curve predicts its own counts left out worse than the pooled one, and the other split at the
same count predicts it about as well (`heldout_us`, in the residuals). The pooled overlap is kept
in [0, 1]: above 1 the two streams would finish before the longer branch alone, below 0 after the
two in series, which `max + (1 - overlap) min` may not price; the residuals count the raw points
outside. The overlap is taken against `serial_us`, not the branches' alone sum: both runs hold
both branches in one graph, under the same caches (a branch replayed alone may keep part of its
weights in L2; `serial_us` runs 1-20 µs over the alone sum on the H100 record, and against that
sum the overlap reads lower, 0-0.45); epsim's serial price is its two branches' sum.

    python -m epsim.calibrate.dual_stream RESULT.json --profile PROFILE.json

writes that component into a profile in place (atomically, `epsim.calibrate.in_place`), leaving
the others, and lists the result file in the profile's provenance (its sha256, the combined
`records_sha256`, the device).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from epsim.calibrate.in_place import missing_file, put_component
from epsim.cost.dual_stream import KEY, param_name
from epsim.profile import Component

FIELDS = ("tokens", "tp", "shared_us", "routed_us", "serial_us", "dual_us")


def device_of(result: dict) -> str:
    """The measuring GPU in words, with its torch."""
    return f"{result['device']} (torch {result['torch']})"


def overlap_of(row: dict) -> float:
    """The measured overlap of one record row, unclipped (module doc)."""
    shorter = min(row["shared_us"], row["routed_us"])
    return (row["serial_us"] - row["dual_us"]) / shorter


def pooled_overlap(hidden_us: np.ndarray, shorter_us: np.ndarray) -> float:
    """The overlap of several passes at one token count (the TP splits'): their hidden time over
    their shorter branches' (least squares of `hidden = overlap x shorter`, weighting each pass
    by its shorter branch), kept in [0, 1] (module doc)."""
    return min(max(float((hidden_us * shorter_us).sum() / (shorter_us ** 2).sum()), 0.0), 1.0)


def curve(tokens: np.ndarray, hidden_us: np.ndarray, shorter_us: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """([n] token counts, [n] overlaps) of record rows `[rows]`: each count's passes (its TP
    splits) pooled (`pooled_overlap`; module doc)."""
    counts = np.unique(tokens)
    return counts, np.array([pooled_overlap(hidden_us[tokens == t], shorter_us[tokens == t])
                             for t in counts])


# Up to this many tokens one overlap, pooled over the counts (`plateau_curve`): at these counts a
# second kernel's record (`--routed dense`) is predicted better by one constant than by the first
# record's per-count curve, whose bumps are its own kernel's (`cross_kernel_us`; PROVENANCE.md of
# the records); above it the overlap falls as the routed GEMM fills the SMs, count by count.
PLATEAU_TOKENS = 128


def plateau_curve(tokens: np.ndarray, hidden_us: np.ndarray, shorter_us: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`curve` with every count up to `PLATEAU_TOKENS` given their pooled overlap."""
    counts, frac = curve(tokens, hidden_us, shorter_us)
    low = tokens <= PLATEAU_TOKENS
    if low.any():
        frac = np.where(counts <= PLATEAU_TOKENS, pooled_overlap(hidden_us[low], shorter_us[low]),
                        frac)
    return counts, frac


def heldout_us(tokens: np.ndarray, tp: np.ndarray, hidden_us: np.ndarray,
               shorter_us: np.ndarray) -> dict[str, float]:
    """Mean absolute errors (µs) of the hidden time on what a fit did not see. Tokens: each
    count left out, predicted by the curve of the others (interpolated in log2 tokens, held
    beyond: `epsim.cost.dual_stream`), their plateau curve (what ships), the curve of its own
    TP split alone, and the baselines:
    the bound (overlap 1, what epsim priced before), none (0), one pooled constant. TP: each
    split at each count predicted by the other splits at that count. A hold-out with nothing
    left to fit on is left out.

    Args:
        tokens, tp, hidden_us, shorter_us: [rows] the record's counts, splits, `serial - dual`
            and shorter branch (µs).
    """
    errors: dict[str, list[float]] = {}

    def add(name: str, guess: float, out: np.ndarray) -> None:
        errors.setdefault(name, []).extend(np.abs(guess * shorter_us[out] - hidden_us[out]))

    log_tokens = np.log2(tokens)
    for t in np.unique(tokens) if len(np.unique(tokens)) > 1 else ():
        fit, out = tokens != t, tokens == t
        counts, frac = curve(tokens[fit], hidden_us[fit], shorter_us[fit])
        add("interp", float(np.interp(np.log2(t), np.log2(counts), frac)), out)
        counts, frac = plateau_curve(tokens[fit], hidden_us[fit], shorter_us[fit])
        add("plateau", float(np.interp(np.log2(t), np.log2(counts), frac)), out)
        for split in np.unique(tp[out]):
            own = fit & (tp == split)
            if own.any():
                counts, frac = curve(tokens[own], hidden_us[own], shorter_us[own])
                add("interp_own_tp", float(np.interp(np.log2(t), np.log2(counts), frac)),
                    out & (tp == split))
        add("bound", 1.0, out)
        add("none", 0.0, out)
        add("constant", pooled_overlap(hidden_us[fit], shorter_us[fit]), out)
    for t in np.unique(log_tokens):
        for split in np.unique(tp):
            out, others = (log_tokens == t) & (tp == split), (log_tokens == t) & (tp != split)
            if out.any() and others.any():
                add("tp", pooled_overlap(hidden_us[others], shorter_us[others]), out)
    return {f"heldout_{name}_us": float(np.mean(e)) for name, e in errors.items()}


def cross_kernel_us(result: dict, other: dict) -> dict[str, float]:
    """Mean absolute errors (µs) of the hidden time of `other` (a record of the same script with
    another routed kernel, `--routed dense`) predicted from `result`: its curve (interpolated in
    log2 tokens, held beyond), its plateau curve (what ships), one constant pooled over all its
    counts, one over the counts `other` covers, the bound (1) and none (0). A hold-out on the
    kernel, the axis the overlap is carried along to other GPUs and formats."""
    def arrays(rows):
        return (np.array([float(r["tokens"]) for r in rows]),
                np.array([r["serial_us"] - r["dual_us"] for r in rows]),
                np.array([min(r["shared_us"], r["routed_us"]) for r in rows]))
    tokens, hidden, shorter = arrays(result["rows"])
    o_tokens, o_hidden, o_shorter = arrays(other["rows"])
    counts, frac = curve(tokens, hidden, shorter)
    inside = tokens <= o_tokens.max()
    p_counts, p_frac = plateau_curve(tokens, hidden, shorter)
    guesses = {"curve": np.interp(np.log2(o_tokens), np.log2(counts), frac),
               "plateau": np.interp(np.log2(o_tokens), np.log2(p_counts), p_frac),
               "constant": pooled_overlap(hidden, shorter),
               "constant_same_counts": pooled_overlap(hidden[inside], shorter[inside]),
               "bound": 1.0, "none": 0.0}
    return {f"cross_kernel_{name}_us": float(np.mean(np.abs(guess * o_shorter - o_hidden)))
            for name, guess in guesses.items()}


def component_of(result: dict, path: str) -> Component:
    """`any/dual_stream` from `dual_stream_overlap_gpu.py`'s output `result` (read from `path`).

    Raises:
        ValueError: naming the missing or bad field.
    """
    for name in ("device", "torch", "date_utc", "shapes", "rows"):
        if name not in result:
            raise ValueError(f"{path}: field '{name}' is missing")
    rows = result["rows"]
    if not rows:
        raise ValueError(f"{path}: field 'rows' is empty")
    for i, row in enumerate(rows):
        for name in FIELDS:
            if name not in row:
                raise ValueError(f"{path}: field 'rows[{i}].{name}' is missing")
        if not (row["tokens"] >= 1 and min(row["shared_us"], row["routed_us"]) > 0):
            raise ValueError(f"{path}: rows[{i}] tokens ({row['tokens']}) must be >= 1 and "
                             f"shared_us, routed_us ({row['shared_us']}, {row['routed_us']}) > 0")
    tokens = np.array([float(r["tokens"]) for r in rows])
    tp = np.array([float(r["tp"]) for r in rows])
    shorter = np.array([min(r["shared_us"], r["routed_us"]) for r in rows])
    hidden = np.array([r["serial_us"] - r["dual_us"] for r in rows])
    counts, frac = plateau_curve(tokens, hidden, shorter)
    raw = np.array([overlap_of(r) for r in rows])
    tps = sorted({float(r["tp"]) for r in rows})
    return Component(
        params={param_name(int(t)): float(f) for t, f in zip(counts, frac)}, source="fit",
        valid_range={"num_tokens_per_rank": [float(counts[0]), float(counts[-1])],
                     "tp_size": [tps[0], tps[-1]]},
        residuals={"num_records": float(len(rows)),
                   "num_points_outside_0_1": float(((raw < 0) | (raw > 1)).sum()),
                   **heldout_us(tokens, tp, hidden, shorter)},
        note=(f"measured on {device_of(result)} in {result['shapes'].get('dtype', 'bf16')} at "
              f"DeepSeek-V3's shapes split TP {', '.join(f'{t:g}' for t in tps)} (pooled), "
              f"{result['date_utc']}, CUDA graphs, medians of {result.get('bursts')} bursts "
              f"(benchmarks/dual_stream_overlap_gpu.py); a ratio, applied as measured to every "
              f"GPU and weight format: extrapolated there"),
        data_source="epsim records", tables=[path])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m epsim.calibrate.dual_stream",
                                     description="write any/dual_stream of a profile in place")
    parser.add_argument("result", type=Path,
                        help="dual_stream.json (benchmarks/dual_stream_overlap_gpu.py)")
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--cross-check", type=Path, metavar="OTHER.json",
                        help="print how the record's curve and the baselines predict another "
                             "kernel's record (`--routed dense`); writes nothing")
    args = parser.parse_args(argv)
    if args.cross_check is None and args.profile is None:
        print("--profile: required (or --cross-check OTHER.json)", file=sys.stderr)
        return 2
    if missing_file(*(f for f in (args.result, args.profile, args.cross_check) if f is not None)):
        return 2
    result = json.loads(args.result.read_text())
    if args.cross_check is not None:
        print(json.dumps(cross_kernel_us(result, json.loads(args.cross_check.read_text())),
                         indent=1))
        return 0
    try:
        component = component_of(result, str(args.result))
    except (ValueError, KeyError, TypeError) as e:
        print(f"result ({args.result}): {e}", file=sys.stderr)
        return 2
    put_component(args.profile, KEY, component, {args.result: len(result["rows"])},
                  [device_of(result)])
    print(json.dumps(component.params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
