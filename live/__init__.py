"""The live backend: the real Qwen3 MoE block over expert-parallel ranks.

Two wings: the model, its backends and the EPLB runtime (`live.*`, `live.backends`,
`live.eplb`), and the measurement harness that times and checks it (`live.bench`), which the
model never imports. Public entry points: `MoeConfig`, `Qwen3MoeSparseMoeBlock`,
`Qwen3MoeModel`, `ExpertLocation`, the backend registry (`live.backends`), forced routing from
`epsim.routing` (`live.routing.forced_routing`) and rank spawning (`live.dist`). Importing
`live` imports torch.
"""

from live.backends import BACKENDS, BackendSpec, make_backend
from live.block import Qwen3MoeSparseMoeBlock
from live.config import MoeConfig
from live.errors import BackendUnavailableError, LiveError
from live.lazy import LazyValue
from live.location import ExpertLocation, as_placement
from live.model import Qwen3MoeModel
from live.routing import Routing, forced_routing, route

__all__ = ["BACKENDS", "BackendSpec", "BackendUnavailableError", "ExpertLocation", "LazyValue",
           "LiveError", "MoeConfig", "Qwen3MoeModel", "Qwen3MoeSparseMoeBlock", "Routing",
           "as_placement", "forced_routing", "make_backend", "route"]
