"""Live EPLB: expert-load recorder, expert location maps, the weight updater between EP ranks,
the manager that rebalances every N forward passes, and elastic EP (masked or lost ranks).

Placements come from `epsim.eplb.compute_placement`, the simulator's own algorithms.
"""

from live.eplb.elastic import ElasticResult, fill_lost, mask_ranks, shrink_group
from live.eplb.location import ExpertLocation, as_location, location_of, rank_slots_to_physical
from live.eplb.manager import EplbManager
from live.eplb.plan import RELOAD, ExpertMove, MovePlan, plan_moves
from live.eplb.recorder import ExpertLoadRecorder
from live.eplb.result import RebalanceResult, rebalance_record
from live.eplb.updater import ExpertWeightUpdater, RebalanceAborted

__all__ = ["ElasticResult", "EplbManager", "ExpertLoadRecorder", "ExpertLocation", "ExpertMove",
           "ExpertWeightUpdater", "MovePlan", "RELOAD", "RebalanceAborted", "RebalanceResult",
           "as_location", "fill_lost", "location_of", "mask_ranks", "plan_moves",
           "rank_slots_to_physical", "rebalance_record", "shrink_group"]
