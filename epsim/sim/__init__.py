"""The SimPy engine: arrivals, continuous batching, lockstep steps priced by `epsim.cost`;
EPLB over time and elastic EP as processes of it."""

from epsim.sim.arrivals import Requests, sample_requests
from epsim.sim.batching import Plan, Scheduler
from epsim.sim.elastic import ElasticEP
from epsim.sim.engine import Simulation, StepInfo, simulate
from epsim.sim.eplb_process import EPLBManager, RebalanceEvent
from epsim.sim.eplb_sweep import IntervalSweep, compare_eplb, sweep_rebalance_interval
from epsim.sim.metrics import SimResult
from epsim.sim.placement import PlacementState

__all__ = ["EPLBManager", "ElasticEP", "IntervalSweep", "PlacementState", "Plan", "RebalanceEvent",
           "Requests", "Scheduler", "SimResult", "Simulation", "StepInfo", "compare_eplb",
           "sample_requests", "simulate", "sweep_rebalance_interval"]
