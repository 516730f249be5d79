"""Where experts sit before the first step: SGLang's `--init-expert-location`.

`deployment.init_expert_location`:
- `trivial`: experts in order over the ranks, redundant slots repeating experts 0, 1, ...
  (`epsim.cost.tables.contiguous_placement`; SGLang's default, `ExpertLocationMetadata.
  init_trivial`). Without EPLB the replicas stay there for the whole run, as SGLang serves
  `--ep-num-redundant-experts` alone; the spec asks for that case to be stated.
- `from_skew`: the EPLB algorithm's placement (`deployment.eplb_algorithm`) of the expected
  loads of the scenario's own skew model (a trace: its mean), as if a long statistics window
  had been recorded before the run.
- a path (relative to the scenario): recorded expert loads, read by `epsim.eplb.loads.read_loads`
  (our JSONL trace, an SGLang expert-distribution dump `.pt` or folder, `.json/.csv/.npy`
  `[layers, experts]`), placed by the same algorithm. SGLang starts large deployments so.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.tables import contiguous_placement
from epsim.eplb import compute_placement
from epsim.eplb.loads import read_loads
from epsim.eplb.placement import ranks_per_node
from epsim.errors import SpecError
from epsim.routing.trace import moe_layers


def initial_placement(scenario, skew) -> np.ndarray:
    """[layers, physical] int64 physical_to_logical of the run's first step.

    Args:
        scenario: validated `Scenario`; skew: its `SkewModel` (for `from_skew`).
    Raises:
        SpecError: recorded loads whose shape does not match the model.
    """
    m, c, d = scenario.model, scenario.cluster, scenario.deployment
    location = d.init_expert_location
    if location == "trivial":
        return contiguous_placement(m.num_moe_layers, m.num_experts, d.ep_size,
                                    d.ep_num_redundant_experts)
    if location == "from_skew":
        weight = skew.mean_popularity()
    else:
        # SGLang's files count its dense layers as zeros: the MoE layers kept
        weight = moe_layers(read_loads(scenario.resolve_path(location))[None], m.num_moe_layers)[0]
        if weight.shape != (m.num_moe_layers, m.num_experts):
            raise SpecError(f"deployment.init_expert_location ({location}) loads shape "
                            f"{list(weight.shape)} must be [moe layers, experts] = "
                            f"[{m.num_moe_layers}, {m.num_experts}] for {m.name}")
    placement = compute_placement(d.eplb_algorithm, np.asarray(weight, dtype=np.float64),
                                  m.num_experts + d.ep_num_redundant_experts, m.num_expert_groups,
                                  d.ep_size // ranks_per_node(d.ep_size, c.gpus_per_node_resolved),
                                  d.ep_size)
    return placement.physical_to_logical
