"""Requests of a run, drawn up front as arrays: arrival times and prompt/output lengths.

Poisson arrivals have exponential gaps; bursty arrivals gamma gaps with coefficient of
variation `cv` (shape 1/cv^2, same mean rate); trace arrivals read `arrival_s` (and optionally
`input_len`, `output_len`) per row of a CSV or JSON Lines file. Everything comes from the seed.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from epsim.errors import SpecError
from epsim.io import loads_json, read_text


MAX_TRACE_LEN = 1e8   # tokens of one prompt or output: far beyond any model's context


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests sorted by arrival, `[requests]` each.

    Attributes:
        arrival_s: float64 arrival time (simulated seconds).
        input_len, output_len: int64 prompt and output tokens (>= 1).
    """

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])


def sample_lengths(spec, num: int, rng: np.random.Generator) -> np.ndarray:
    """[num] int64 lengths from a length spec (fixed, uniform low..high inclusive, random as
    `sglang.bench_serving` draws them, lognormal).

    Lognormal: `mean` is the mean length, so mu = ln(mean) - sigma^2/2; clipped to [1, max].
    """
    if spec.kind == "fixed":
        return np.full(num, spec.value, dtype=np.int64)
    if spec.kind == "uniform":
        return rng.integers(spec.low, spec.high + 1, num).astype(np.int64)
    if spec.kind == "random":                  # bench_serving's np.random.randint(low, value + 1)
        return rng.integers(spec.low, spec.value + 1, num).astype(np.int64)
    mu = np.log(spec.mean) - spec.sigma ** 2 / 2.0
    return np.clip(np.rint(rng.lognormal(mu, spec.sigma, num)), 1, spec.max).astype(np.int64)


def _sample_gaps_until(draw, mean_gap_s: float, duration_s: float) -> np.ndarray:
    """Cumulative arrival times of i.i.d. gaps from `draw(n)` up to `duration_s`."""
    times: list[np.ndarray] = []
    t0 = 0.0
    batch = max(16, int(duration_s / mean_gap_s * 1.1) + 16)
    while True:
        t = t0 + np.cumsum(draw(batch))
        times.append(t)
        if t[-1] >= duration_s:
            break
        t0 = float(t[-1])
    out = np.concatenate(times)
    return out[out < duration_s]


def read_arrival_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Read `arrival_s` [, `input_len`, `output_len`] rows from CSV (header row) or JSON Lines.

    Raises:
        SpecError: `<file>:<line>: <field> (<value>) must ...` for a bad row.
    """
    path = Path(path)
    text = read_text(path, "arrival trace")
    if path.suffix in (".jsonl", ".json"):
        rows = [(lineno, loads_json(line, f"{path}:{lineno}", one_line=True))
                for lineno, line in enumerate(text.splitlines(), 1) if line.strip()]
    else:
        reader = csv.DictReader(text.splitlines())
        rows = [(i + 2, row) for i, row in enumerate(reader)]
    if not rows:
        raise SpecError(f"{path}: no arrival rows found")
    columns = {"arrival_s": [], "input_len": [], "output_len": []}
    for lineno, row in rows:
        if not isinstance(row, dict) or "arrival_s" not in row:
            raise SpecError(f"{path}:{lineno}: arrival_s (missing) must be given on every row")
        for name, values in columns.items():
            raw = row.get(name)
            if raw in (None, ""):
                values.append(np.nan)
                continue
            shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:37] + "..."
            try:
                value = float(raw)
            except (TypeError, ValueError, OverflowError):
                raise SpecError(f"{path}:{lineno}: {name} ({shown}) must be a number") from None
            low, high = (0.0, 1e12) if name == "arrival_s" else (1.0, MAX_TRACE_LEN)
            if not np.isfinite(value) or not low <= value <= high:
                raise SpecError(f"{path}:{lineno}: {name} ({shown}) must be a finite number "
                                f">= {low:g} and <= {high:g}")
            values.append(value)
    arrival = np.asarray(columns["arrival_s"])
    lengths = []
    for name in ("input_len", "output_len"):
        col = np.asarray(columns[name])
        if np.isnan(col).all():
            lengths.append(None)
        elif np.isnan(col).any():
            raise SpecError(f"{path}: {name} must be given on every row or on none")
        else:
            lengths.append(np.rint(col).astype(np.int64))
    return arrival, lengths[0], lengths[1]


def sample_requests(workload, seed: int, base_dir: str | Path = ".") -> Requests:
    """All requests arriving in [0, workload.duration_s), sorted by arrival.

    Args:
        workload: a `WorkloadSpec`.
        seed: arrivals and lengths use their own streams of this seed.
    """
    rng = np.random.default_rng([seed, 0xA77])
    arrivals = workload.arrivals
    input_len = output_len = None
    if arrivals.kind == "poisson":
        mean_gap = 1.0 / arrivals.rate_per_s
        arrival = _sample_gaps_until(lambda n: rng.exponential(mean_gap, n), mean_gap, workload.duration_s)
    elif arrivals.kind == "concurrency":       # closed loop: sent as requests finish
        return Requests(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
    elif arrivals.kind == "bursty":
        shape = 1.0 / arrivals.cv ** 2
        mean_gap = 1.0 / arrivals.rate_per_s
        arrival = _sample_gaps_until(lambda n: rng.gamma(shape, mean_gap / shape, n), mean_gap,
                                     workload.duration_s)
    else:
        arrival, input_len, output_len = read_arrival_trace(Path(base_dir) / arrivals.path)
        order = np.argsort(arrival, kind="stable")
        keep = arrival[order] < workload.duration_s
        order = order[keep]
        arrival = arrival[order]
        input_len = input_len[order] if input_len is not None else None
        output_len = output_len[order] if output_len is not None else None
    num = arrival.shape[0]
    length_rng = np.random.default_rng([seed, 0x1E7])
    if input_len is None:
        input_len = sample_lengths(workload.input_len, num, length_rng)
    if output_len is None:
        output_len = sample_lengths(workload.output_len, num, length_rng)
    return Requests(arrival.astype(np.float64), input_len, output_len)
