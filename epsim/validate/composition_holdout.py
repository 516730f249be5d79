"""What the composition axis judges the simulator's layer against, besides the measured whole:
two simple baselines, and a refit of the attention block's own ops on one shape.

Baselines, leave-one-out over the measured grid (no fit reads a whole layer; a baseline may,
as docs/validation.md's other axes build theirs from measured points):
  constant  the median of the other measured layers (stacks) of the same shape and EP (and N)
  log-log   the other measured layers of the same shape, EP and context (stacks: shape, EP
            and N) joined in log-log along the batch (`epsim.validate.extrapolation.loglog`);
            the constant where no other point shares them

Held-out shape: the attention block's own ops (`any/attention_ops/graph`) are the one term
whose shapes come from the layer run alone (the kernels' records cover every shape). Refitted
on one shape's attention-block parts, the layers of the other shapes judge it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from epsim.calibrate.build import evaluation_profile, peaks_of
from epsim.calibrate.fit import fit_component
from epsim.calibrate.inputs import SourcedRecord
from epsim.calibrate.layer_parts import pair_attention_kernels
from epsim.profile import component_key
from epsim.validate.extrapolation import loglog

FIT_SHAPE = "Qwen3-30B-A3B"          # the held-out refit's one shape


def _leave_one_out(rows, group, x) -> list[tuple[float, float]]:
    """(constant, log-log) of each row from the other rows: constant over `group(row)[0]`,
    log-log along `x(row)` over `group(row)[1]` (the constant where none)."""
    out = []
    for i, row in enumerate(rows):
        wide, narrow = group(row)
        others = [r for j, r in enumerate(rows) if j != i]
        same = [r.measured_us for r in others if group(r)[0] == wide]
        constant = float(np.median(same)) if same else float("nan")
        points = [(x(r), r.measured_us) for r in others if group(r)[1] == narrow]
        out.append((constant, loglog(points, x(row)) if points else constant))
    return out


def layer_baselines(layers) -> list[tuple[float, float]]:
    """[(constant, log-log) µs] of each measured layer (`LayerRow`), leave-one-out."""
    return _leave_one_out(layers, lambda r: ((r.model, r.ep_size),
                                             (r.model, r.ep_size, r.context_len)),
                          lambda r: float(r.num_seqs))


def stack_baselines(stacks) -> list[tuple[float, float]]:
    """[(constant, log-log) µs] of each measured stack (`StackRow`), leave-one-out."""
    return _leave_one_out(stacks, lambda r: ((r.model, r.ep_size, r.num_layers),) * 2,
                          lambda r: float(r.num_seqs))


@dataclass(frozen=True)
class HeldOutShape:
    """The attention block's ops refitted on `fit_shape`'s parts (`launch_us`, `hbm_gbps`),
    and the profile with that refit."""

    fit_shape: str
    num_records: int
    params: dict[str, float]
    profile: object


def held_out_shape(records, profile, fit_shape: str = FIT_SHAPE) -> HeldOutShape | None:
    """`profile` with `any/attention_ops/graph` refitted on the device-timed attention-block
    `layer_part` records of `fit_shape` alone (kernels paired as calibration pairs them), or
    None without such records or without that component in `profile`."""
    key = component_key("any", "attention_ops", "graph")
    if key not in profile.components:
        return None
    sourced = pair_attention_kernels([SourcedRecord(r, "", i) for i, r in enumerate(records)])
    mine = [s for s in sourced if s.record.kind == "layer_part" and s.record.timing == "device"
            and s.record.extra.get("part") == "attention_block" and s.record.model == fit_shape]
    if not mine:
        return None
    refit = profile.model_copy(deep=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = fit_component(key, mine, evaluation_profile(refit.model_copy(deep=True)),
                            peaks_of(profile.hardware))
    refit.components[key] = fit.component()
    return HeldOutShape(fit_shape, len(mine), dict(fit.params), refit)
