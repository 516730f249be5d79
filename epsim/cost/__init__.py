"""Cost models of one step, vectorized over `[layers, ranks]`; coefficients from a Profile.

`count_traffic` counts pairs and token copies per rank and link over a placement's `tables`;
`comm`, `experts`, `attention` turn counts into microseconds; `resolve_params` resolves a
deployment's coefficients from a profile once (`CostParams`); `CostModel` prices with them: the
MoE layers (`moe`), a step (`step`, `StepCost`), its MoE layers by part with the component of
each (`layer`, `LayerCost`), many decode steps at once (`decode_steps`);
`predict_record` evaluates one component on a measurement record's counts (for calibration
and validation).
"""

from epsim.cost.attention import BatchCounts
from epsim.cost.comm import collective_features, comm_features, dedup_for
from epsim.cost.experts import experts_features
from epsim.cost.layer import LayerCost, LayerPart, layer_cost
from epsim.cost.linear import COLLECTIVE_TERMS, COMM_TERMS, EXPERT_TERMS, LinearTerms
from epsim.cost.model import CostModel
from epsim.cost.moe import MoECost
from epsim.cost.params import CostParams
from epsim.cost.resolve import ProfileHardwareWarning, resolve_params
from epsim.cost.record import RecordFeatures, predict_record, record_features
from epsim.cost.step import StepCost
from epsim.cost.tables import PlacementTables, build_tables, contiguous_placement
from epsim.cost.traffic import Traffic, count_traffic

__all__ = [
    "BatchCounts", "COLLECTIVE_TERMS", "COMM_TERMS", "CostModel", "CostParams", "EXPERT_TERMS",
    "LayerCost", "LayerPart", "LinearTerms", "MoECost", "PlacementTables", "ProfileHardwareWarning", "RecordFeatures",
    "StepCost", "Traffic", "build_tables", "collective_features", "comm_features",
    "contiguous_placement", "count_traffic", "dedup_for", "experts_features", "layer_cost",
    "predict_record",
    "record_features", "resolve_params",
]
