"""Least-squares fit of one cost component on measured records.

Each component is linear in its coefficients once the busiest rank and a roofline's bound
side are known (`epsim.cost.linear`): the design row of a record is `record_features` — the
very function the simulator's models are built from — so a fitted profile is exactly what the
simulator evaluates. The fit alternates: rows at the current parameters -> bounded least
squares -> new parameters, until the rows stop changing (the busiest rank and the bound side
depend on the parameters).

Objective: relative error, `sum_i ((row_i . c - y_i) / y_i)^2`, since measured times span
10 µs ... 10 ms and a millisecond point must not drown the small ones. Bounds are physical:
every coefficient >= 0, and an inverse bandwidth or throughput >= 1 / datasheet peak (no link
or GPU beats its datasheet). A column that is zero on every record (RDMA on one node) is not
fitted: its parameter keeps the datasheet value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import lsq_linear

from epsim.calibrate.inputs import SourcedRecord
from epsim.cost.linear import (ATTENTION_OPS_TERMS, ATTENTION_TERMS, BLOCK_OPS_TERMS,
                               COLLECTIVE_TERMS, COMM_TERMS, EXPERT_TERMS, LAYOUT_TERMS)
from epsim.cost.mla import MLA_PREFILL_TERMS, MLA_TERMS
from epsim.cost.mla_bmm import BMM_TERMS
from epsim.cost.mla_l2 import L2_START_GBPS
from epsim.cost.mla_decode import MLA_DEQUANT_TERMS, MLA_PREFILL_DEQUANT_TERMS, MLA_SWAPPED_TERMS
from epsim.cost.fp4_gemm import SM_FILL_GBPS
from epsim.cost.collector_burst import CAPPED_RATIO, capped_ratio_readable
from epsim.cost.dense_gemm import DEEPGEMM_TERMS, FP4_GEMM_TERMS, GEMM_TERMS, SM100_FP8_TERMS
from epsim.cost.quant import (EXPERT_FALLBACK_TERMS, EXPERT_FEED_TERMS, EXPERT_QUANT_TERMS,
                              EXPERT_REREAD_FALLBACK_TERMS, EXPERT_REREAD_TERMS)
from epsim.cost.normal_runner import EXPERT_LAYOUT_TERMS
from epsim.cost.record import predict_record, record_features
from epsim.profile import Component, Profile

MAX_ROUNDS = 12
# components whose throughputs are fractions of the record's GPU's datasheet (quantised GEMMs and
# experts, MLA): an inverse fraction is >= 1 (no GPU beats its datasheet)
FRACTION_TERMS = (GEMM_TERMS, FP4_GEMM_TERMS, SM100_FP8_TERMS, DEEPGEMM_TERMS, EXPERT_QUANT_TERMS,
                  EXPERT_REREAD_TERMS, EXPERT_FEED_TERMS, EXPERT_FALLBACK_TERMS,
                  EXPERT_REREAD_FALLBACK_TERMS, EXPERT_LAYOUT_TERMS,
                  MLA_TERMS, BMM_TERMS,
                  MLA_DEQUANT_TERMS, MLA_SWAPPED_TERMS, MLA_PREFILL_TERMS,
                  MLA_PREFILL_DEQUANT_TERMS)
# ... and the one absolute rate among them: an SM's operand feed, bounded by its shared memory's
FRACTION_PEAKS = {"hbm_frac": 1.0, "tensor_frac": 1.0, "quant_frac": 1.0, "dequant_frac": 1.0,
                  "swapped_hbm_frac": 1.0, "swapped_frac": 1.0, "sm_feed_gbps": SM_FILL_GBPS,
                  "epilogue_gbps": SM_FILL_GBPS}
# the operand feed's starts, shares of that bound (which side of the MMA-feed max a row lies on
# is a local choice, as the roofline's)
FEED_START_SHARES = (1.0, 0.5, 0.25)
# the MLA prefill's L2 stream's starts, shares of `L2_START_GBPS` (its side of the max, too, is
# a local choice)
L2_START_SHARES = (1.0, 0.7, 1.4)
# the eager host floor's starts, µs (0: none; which side of the max a row lies on is a local
# choice, as the roofline's)
HOST_FLOOR_STARTS_US = (0.0, 100.0, 300.0)


@dataclass
class ComponentFit:
    """The fit of one profile component.

    Attributes:
        key: profile key, e.g. "torch/dispatch", "mooncake/layout/graph", "none/allreduce".
        params: fitted parameters (only the fitted ones; others keep defaults).
        predicted_us, measured_us: [records] on the fit records.
        records: the fit records.
        rounds: alternations until the rows settled.
        note: how it went, e.g. columns left at datasheet values.
    """

    key: str
    params: dict[str, float]
    predicted_us: np.ndarray
    measured_us: np.ndarray
    records: list[SourcedRecord]
    rounds: int
    note: str = ""
    valid_range: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ape(self) -> np.ndarray:
        """[records] absolute percentage errors."""
        return np.abs(self.predicted_us - self.measured_us) / self.measured_us * 100.0

    def residuals(self) -> dict[str, float]:
        ape = self.ape
        return {"mape": round(float(ape.mean()), 3), "max_ape": round(float(ape.max()), 3),
                "num_records": float(len(ape)), "rounds": float(self.rounds)}

    def component(self) -> Component:
        return Component(params={k: float(v) for k, v in self.params.items()}, source="fit",
                         residuals=self.residuals(), valid_range=self.valid_range, note=self.note)


def valid_range(records: list[SourcedRecord]) -> dict[str, list[float]]:
    """The data range of a fit: tokens per rank, hidden size, EP size (min, max)."""
    out = {}
    for name in ("num_tokens_per_rank", "hidden_size", "ep_size"):
        values = [getattr(s.record, name) for s in records]
        out[name] = [float(min(values)), float(max(values))]
    return out


def _lower_bounds(coef_names: tuple[str, ...], peaks: dict[str, float]) -> np.ndarray:
    """0 for plain coefficients; 1/peak for `inv_<param>` with a datasheet peak."""
    return np.array([1.0 / peaks[n[4:]] if n.startswith("inv_") and n[4:] in peaks else 0.0
                     for n in coef_names])


def _solve(rows: np.ndarray, measured: np.ndarray, lower: np.ndarray, relative: bool,
           fixed: dict[int, float] | None = None, known_us: np.ndarray | None = None
           ) -> np.ndarray:
    """Bounded least squares on the used columns; unused columns get NaN (not fitted), and so
    do `fixed` ones (column -> coefficient held at its datasheet value, moved to the left side).
    `known_us` [records]: time of each record the component does not hold (fixed parts and
    host overhead), moved to the left side too; the weights stay the whole measured time's."""
    weights = 1.0 / measured if relative else np.ones_like(measured)
    fixed = fixed or {}
    offset = sum((rows[:, j] * c for j, c in fixed.items()), np.zeros_like(measured))
    if known_us is not None:
        offset = offset + known_us
    a = rows * weights[:, None]
    b = (measured - offset) * weights
    used = np.abs(rows).max(axis=0) > 0
    used[list(fixed)] = False
    coef = np.full(rows.shape[1], np.nan)
    if not used.any():
        return coef
    scale = np.abs(a[:, used]).max(axis=0)                      # columns of comparable size
    sol = lsq_linear(a[:, used] / scale, b, bounds=(lower[used] * scale, np.inf),
                     method="bvls", lsmr_tol="auto")
    coef[used] = np.maximum(sol.x / scale, lower[used])   # the bounds, not -1e-16 past them
    return coef


MIN_T = 2.0       # a transfer coefficient below 2 standard errors is not determined by the data


def _weak_columns(rows: np.ndarray, measured: np.ndarray, coef: np.ndarray, relative: bool,
                  candidates: list[int]) -> list[int]:
    """Columns among `candidates` whose fitted coefficient is under `MIN_T` standard errors
    (weighted least squares: `sigma^2 (A'A)^-1` on the fitted columns)."""
    weights = 1.0 / measured if relative else np.ones_like(measured)
    a = rows * weights[:, None]
    used = np.isfinite(coef) & (np.abs(rows).max(axis=0) > 0)
    n, k = a.shape[0], int(used.sum())
    if n <= k:
        return []
    resid = a[:, used] @ coef[used] - measured * weights
    cov = resid @ resid / (n - k) * np.linalg.pinv(a[:, used].T @ a[:, used])
    se = np.full(len(coef), np.inf)
    se[used] = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return [j for j in candidates if used[j] and coef[j] < MIN_T * se[j]]


# DeepEP normal's tuned chunk is a local choice too (`epsim.cost.comm.chunk_rounds`): its fit also
# starts from a round latency against a first-chunk copy rate each (µs, µs per kB)
CHUNK_STARTS = ((1.0, 0.005), (3.0, 0.1))
# ... and its combine's paced side (`epsim.cost.combine_sides`): from a receiving warp round of
# 2 ns a token against a sending side at the datasheet NVLink or half of it (the plain sum's
# fit, whose short top-k rows the longest queue explains, leaves `token_us` at 0, where no
# record can land on the receiving side)
RECEIVER_START_US = 0.002
RECEIVER_START_NVL_SHARES = (1.0, 0.5)        # its sending side at these shares of NVLink's


def _starts(terms, peaks: dict[str, float], key: str = "") -> list[dict[str, float]]:
    """Starting parameters: the roofline's bound side is a local choice, so the experts and
    attention kernel fits start from several compute-to-memory balances and keeps the best
    (one start otherwise; DeepEP normal's exchanges also from `CHUNK_STARTS`)."""
    if terms is COMM_TERMS and "normal" in key.split("/"):
        receiver = ([{"token_us": RECEIVER_START_US, "nvl_gbps": peaks["nvl_gbps"] * f}
                     for f in RECEIVER_START_NVL_SHARES] if "combine" in key.split("/") else [])
        return [{}] + [{"chunk_us": o, "chunk_us_per_kb": f} for o, f in CHUNK_STARTS] + receiver
    if terms in FRACTION_TERMS:       # efficiencies: fractions of the record's GPU's datasheet
        hbm = [p for p in ("hbm_frac", "swapped_hbm_frac") if p in terms.params]
        tensor = [p for p in ("tensor_frac", "swapped_frac") if p in terms.params]
        feeds = ([{"sm_feed_gbps": SM_FILL_GBPS * f} for f in FEED_START_SHARES]
                 if "sm_feed_gbps" in terms.params else [{}])
        # the MLA prefill's L2 stream (`epsim.cost.mla_l2`) from about its long rows' rate
        l2s = ([{"l2_gbps": L2_START_GBPS * f} for f in L2_START_SHARES]
               if "l2_gbps" in terms.params else [{}])
        # an eager call's host floor (`epsim.cost.quant.eager_floor`) from a few hundred µs
        floors = ([{"host_us": u} for u in HOST_FLOOR_STARTS_US]
                  if "host_us" in terms.params else [{}])
        return [{**{p: h for p in hbm}, **{p: f for p in tensor}, **feed, **l2, **floor}
                for h in (1.0, 0.25) for f in (1.0, 0.3, 0.1, 0.03, 0.01) for feed in feeds
                for l2 in l2s for floor in floors]
    if terms not in (EXPERT_TERMS, ATTENTION_TERMS):
        return [{}]
    return [{"hbm_gbps": peaks["hbm_gbps"] * h, "tflops": peaks["tflops"] * f}
            for h in (1.0, 0.25) for f in (1.0, 0.3, 0.1, 0.03, 0.01)]


OVERLAP_SHARES = (0.1, 0.25, 0.5, 0.75, 0.9)


def _overlap_starts(terms, best_params: dict[str, float]) -> list[dict[str, float]]:
    """Starts of `base_us + max(overlap_us, transfer)` from the plain-sum fit: a share of its
    fixed cost moved under the transfer, its transfer terms kept (so each record starts on the
    side it lies: small transfers pay the whole fixed cost, large ones hide that share)."""
    if "overlap_us" not in terms.params or "base_us" not in best_params:
        return []
    base = best_params["base_us"]
    return [{**best_params, "base_us": base * (1 - f), "overlap_us": base * f}
            for f in OVERLAP_SHARES]


def fit_component(key: str, records: list[SourcedRecord], profile: Profile,
                  peaks: dict[str, float], relative: bool = True,
                  held: dict[str, float] | None = None) -> ComponentFit:
    """Fit profile component `key` on `records` (all of one component).

    Args:
        profile: the evaluation profile; its `components[key]` is replaced by each round's
            parameters (so `record_features` picks the busiest rank with them).
        peaks: datasheet peaks by parameter name (`nvl_gbps`, `hbm_gbps`, `tflops`, ...).
        held: parameters held at given values, not fitted (another component's fit of the
            same rate: `epsim.calibrate.build`'s MLA decode math).
    """
    names = record_features(records[0].record, profile, key).coef_names
    terms = {t.coef_names: t for t in (COMM_TERMS, COLLECTIVE_TERMS, EXPERT_TERMS,
                                       ATTENTION_TERMS, BLOCK_OPS_TERMS, ATTENTION_OPS_TERMS,
                                       LAYOUT_TERMS, *FRACTION_TERMS)}[names]
    measured = np.array([s.measured_us for s in records])
    lower = _lower_bounds(names, {**peaks, **FRACTION_PEAKS})
    if "cap_slowdown_ratio" in terms.params and not capped_ratio_readable(measured):
        # the collector's capped clock, where no fit row is timed mostly at it: the measured
        # ramp's ratio held (`epsim.cost.collector_burst`)
        held = {**(held or {}), "cap_slowdown_ratio": CAPPED_RATIO - 1.0}
    # a held parameter with no column of its own (a rate's ratio the rows are scaled by) is
    # kept in the parameters only
    fixed = {terms.params.index(p): 1.0 / v if p in terms.inverse else v
             for p, v in (held or {}).items() if p in terms.params}
    best = _best_fit(key, records, profile, terms, peaks, measured, lower, relative, fixed, held)
    weak, twins = [], []
    if terms in (COMM_TERMS, COLLECTIVE_TERMS):
        # a transfer coefficient (bandwidth, per-copy, slot, spill) the fit set does not
        # determine keeps its datasheet value instead of following noise (host-bound stages)
        profile.components[key] = Component(params=best[1], source="fit")
        rows = np.stack([record_features(s.record, profile, key).row for s in records])
        transfer = [j for j, n in enumerate(terms.coef_names) if n not in ("base_us", "overlap_us")]
        weak = _weak_columns(rows, measured, best[3], relative, transfer)
        # a column with one value over the fit set (one expert count for the signal term) is
        # the fixed cost's twin: the data cannot tell them apart
        twins = [j for j in transfer if j not in weak
                 and (rows[:, j] != 0).sum() > 1 and len(np.unique(rows[rows[:, j] != 0, j])) == 1]
        weak += twins
        if weak:
            profile.components.pop(key, None)
            datasheet = record_features(records[0].record, profile, key).coefficients
            best = _best_fit(key, records, profile, terms, peaks, measured, lower, relative,
                             {**fixed, **{j: float(datasheet[j]) for j in weak}}, held)
    _, params, predicted, coef, rounds = best
    profile.components[key] = Component(params=params, source="fit")
    weak_names = [terms.params[j] for j in weak]
    twin_names = [terms.params[j] for j in twins]
    unfitted = [p for p, c in zip(terms.params, coef) if not np.isfinite(c)
                and p not in weak_names and p not in (held or {})]
    notes = [f"held at {', '.join(f'{p} {v:.3g}' for p, v in held.items())}"] if held else []
    if unfitted:
        notes.append(f"not in the data, datasheet kept: {', '.join(unfitted)}")
    if set(weak_names) - set(twin_names):
        notes.append(f"not determined by the data (< {MIN_T:g} standard errors), datasheet "
                     f"kept: {', '.join(n for n in weak_names if n not in twin_names)}")
    if twin_names:
        notes.append(f"one value in the data (the fixed cost's twin), datasheet kept: "
                     f"{', '.join(twin_names)}")
    return ComponentFit(key, params, predicted, measured, records, rounds, "; ".join(notes),
                        valid_range(records))


def _best_fit(key, records, profile, terms, peaks, measured, lower, relative, fixed=None,
              held=None):
    """The best of the alternations from every start (`_starts`, then `_overlap_starts` from
    the plain sum's solution), `fixed` columns held at their values (`held`: parameters with
    those columns, kept in every round's parameters)."""
    best = None
    for start in _starts(terms, peaks, key):
        profile.components[key] = Component(params={**start, **(held or {})}, source="fit")
        result = _alternate(key, records, profile, terms, measured, lower, relative, fixed, held)
        if best is None or result[0] < best[0]:
            best = result
    for start in _overlap_starts(terms, best[1]):
        profile.components[key] = Component(params=start, source="fit")
        result = _alternate(key, records, profile, terms, measured, lower, relative, fixed, held)
        if result[0] < best[0] * (1 - 1e-6):         # a tie keeps the plain sum
            best = result
    return best


def _alternate(key, records, profile, terms, measured, lower, relative, fixed=None, held=None):
    """Rows at the current parameters -> least squares -> parameters, until the rows settle.

    Returns:
        (objective, params, predicted [records], coefficients, rounds)
    """
    feats = [record_features(s.record, profile, key) for s in records]
    previous, params, coef, rounds = None, {}, None, 0
    for rounds in range(1, MAX_ROUNDS + 1):
        rows = np.stack([f.row for f in feats])
        if previous is not None and np.array_equal(rows, previous):
            break
        known = np.array([f.offset_us + f.host_us for f in feats])
        coef = _solve(rows, measured, lower, relative, fixed, known if known.any() else None)
        fitted = terms.params_from(np.nan_to_num(coef, nan=0.0))
        params = {p: fitted[p] for p, c in zip(terms.params, coef) if np.isfinite(c) and p in fitted}
        params.update(held or {})
        profile.components[key] = Component(params=params, source="fit")
        previous = rows
        feats = [record_features(s.record, profile, key) for s in records]
    predicted = np.array([f.predicted_us for f in feats])
    weights = 1.0 / measured if relative else np.ones_like(measured)
    objective = float((((predicted - measured) * weights) ** 2).sum())
    return objective, params, predicted, coef, rounds


def fit_layer_sync(key: str, records: list[SourcedRecord], profile: Profile,
                   relative: bool = True) -> ComponentFit:
    """`<backend>/moe_layer`'s `sync_us`: the constant a whole layer adds to its fitted parts.

    With the parts fixed, the least-squares constant is closed-form:
    `c = sum w_i^2 (y_i - parts_i) / sum w_i^2`, `w_i = 1/y_i` (relative) or 1.

    Args:
        profile: the evaluation profile holding the fitted parts (dispatch, experts, combine).
    """
    profile.components[key] = Component(params={"sync_us": 0.0}, source="fit")
    parts = np.array([predict_record(s.record, profile) for s in records])
    measured = np.array([s.measured_us for s in records])
    w2 = 1.0 / measured ** 2 if relative else np.ones_like(measured)
    sync = float((w2 * (measured - parts)).sum() / w2.sum())
    profile.components[key] = Component(params={"sync_us": sync}, source="fit")
    return ComponentFit(key, {"sync_us": sync}, parts + sync, measured, records, 1,
                        "layer time beyond its fitted parts (rank desynchronization; < 0: overlap)",
                        valid_range(records))
