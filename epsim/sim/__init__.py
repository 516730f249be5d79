"""The SimPy engine: arrivals, continuous batching, lockstep steps priced by `epsim.cost`;
EPLB over time and elastic EP as processes of it. (Studies that run many simulations, such as the
rebalance-interval sweep, live in `epsim.plan`.)"""

from epsim.sim.arrivals import Requests, sample_requests
from epsim.sim.batching import Scheduler
from epsim.sim.elastic import ElasticEP
from epsim.sim.engine import Simulation, StepInfo, simulate
from epsim.sim.eplb_process import EPLBManager, RebalanceEvent
from epsim.sim.metrics import SimResult
from epsim.sim.placement import PlacementState
from epsim.sim.step_plan import Plan

__all__ = ["EPLBManager", "ElasticEP", "PlacementState", "Plan", "RebalanceEvent", "Requests",
           "Scheduler", "SimResult", "Simulation", "StepInfo", "sample_requests", "simulate"]
