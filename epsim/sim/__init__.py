"""The SimPy engine: arrivals, continuous batching, lockstep steps priced by `epsim.cost`."""

from epsim.sim.arrivals import Requests, sample_requests
from epsim.sim.batching import Plan, Scheduler
from epsim.sim.engine import Simulation, StepInfo, simulate
from epsim.sim.load_trace import LoadTrace
from epsim.sim.metrics import SimResult
from epsim.sim.placement import PlacementState

__all__ = ["LoadTrace", "PlacementState", "Plan", "Requests", "Scheduler", "SimResult", "Simulation",
           "StepInfo", "sample_requests", "simulate"]
