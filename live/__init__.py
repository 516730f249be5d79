"""The live backend: the real Qwen3 MoE block over expert-parallel ranks, and its measurement harness.

Public entry points: `MoeConfig`, `Qwen3MoeSparseMoeBlock`, `Qwen3MoeModel`, `ExpertPlacement`,
the backend registry (`live.backends`), forced routing from `epsim.routing`
(`live.routing.forced_routing`) and rank spawning (`live.dist`). Importing `live` imports torch.
"""

from live.backends import BACKENDS, BackendSpec, make_backend
from live.block import Qwen3MoeSparseMoeBlock
from live.config import MoeConfig
from live.errors import BackendUnavailableError, LiveError
from live.lazy import LazyValue
from live.model import Qwen3MoeModel
from live.placement import ExpertPlacement
from live.routing import Routing, forced_routing, route

__all__ = ["BACKENDS", "BackendSpec", "BackendUnavailableError", "ExpertPlacement", "LazyValue",
           "LiveError", "MoeConfig", "Qwen3MoeModel", "Qwen3MoeSparseMoeBlock", "Routing",
           "forced_routing", "make_backend", "route"]
