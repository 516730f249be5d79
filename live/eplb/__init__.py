"""Live EPLB: the expert-load recorder, the weight updater between EP ranks, the manager that
rebalances every N forward passes, and elastic EP (masked or lost ranks).

Where experts live, the move plan of a rebalance and the re-placement over survivors are
`epsim.eplb`'s (`Placement`, `plan_moves`, `place_over_survivors`, `refill_survivors`): the
simulator's own rules. This package moves the weights; `live.location` turns a placement into
the tensors a block dispatches with.
"""

from live.eplb.elastic import ElasticResult, mask_ranks, shrink_group
from live.eplb.manager import EplbManager
from live.eplb.recorder import ExpertLoadRecorder
from live.eplb.result import RebalanceResult, rebalance_record
from live.eplb.updater import ExpertWeightUpdater, RebalanceAborted

__all__ = ["ElasticResult", "EplbManager", "ExpertLoadRecorder", "ExpertWeightUpdater",
           "RebalanceAborted", "RebalanceResult", "mask_ranks", "rebalance_record", "shrink_group"]
