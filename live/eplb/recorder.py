"""Expert-load recorder: tokens per layer per expert, counted from what dispatch delivered,
over a window of the last forward passes.

After each forward, `record()` reads every block's `last_stats.local_expert_tokens` (token-
expert pairs each local slot received) and folds replicas into their logical expert with the
placement in force for that pass, so a window spanning a rebalance still adds up. Counts stay on
the device until read; reading sums them over the ranks (one all-reduce). Exports: measurement
records of kind `expert_load` (`epsim.records`) and the JSONL that `epsim eplb` /
`epsim.eplb.read_loads` read.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import torch

from epsim.records import MeasurementRecord, write_records
from live.eplb.control import Control, control_for
from live.errors import LiveError


class ExpertLoadRecorder:
    """Per-pass expert loads of one rank's model, summed over ranks when read.

    Args:
        model: a `live.model.Qwen3MoeModel`.
        window: forward passes kept (SGLang's `expert_distribution_recorder_buffer_size`).
        control_group: group the loads are summed over (default: the EP group; the survivors
            when a rank is masked).
    """

    def __init__(self, model, window: int = 1000, control_group=None):
        if not isinstance(window, int) or window <= 0:
            raise LiveError(f"window ({window!r}) must be a positive number of forward passes")
        self.model, self.window = model, window
        self.control_group = control_group
        # (forward_pass_id, [held layers, experts] logical pairs, [held layers] pairs here)
        self._passes: deque[tuple[int, torch.Tensor, torch.Tensor]] = deque(maxlen=window)
        self._next_id = 0
        self._local_ids: dict[int, tuple[object, torch.Tensor]] = {}   # layer -> (placement, ids)

    @property
    def num_passes(self) -> int:
        """Passes in the window now."""
        return len(self._passes)

    def record(self) -> int:
        """Count the last forward of every held layer; returns its forward_pass_id.

        Raises:
            LiveError: a layer that has not run a forward yet.
        """
        cfg = self.model.config
        rows = []
        for layer in self.model.layer_ids:
            block = self.model.block(layer)
            stats = block.last_stats
            if stats is None:
                raise LiveError(f"layer {layer} has no dispatch counts; call record() after a "
                                f"forward")
            counts = stats.local_expert_tokens.to(torch.int64)              # [slots]
            experts = self._logical_ids(layer, block, counts.device)         # [slots]
            rows.append(torch.zeros(cfg.num_experts, dtype=torch.int64, device=counts.device)
                        .index_add_(0, experts, counts))
        logical = torch.stack(rows)                                          # [held layers, experts]
        self._passes.append((self._next_id, logical, logical.sum(dim=1)))
        self._next_id += 1
        return self._next_id - 1

    def _logical_ids(self, layer: int, block, device: torch.device) -> torch.Tensor:
        """[slots] logical expert of each local slot, on the device (cached per placement)."""
        cached = self._local_ids.get(layer)
        if cached is None or cached[0] is not block.placement:
            cached = (block.placement, torch.as_tensor(block.local_logical, device=device))
            self._local_ids[layer] = cached
        return cached[1]

    def clear(self) -> None:
        """Forget the window (forward_pass_id keeps counting)."""
        self._passes.clear()

    @property
    def control(self) -> Control:
        """The control plane now (the model may have been masked or moved to a new group)."""
        return control_for(self.model, self.control_group)

    # -- reading ---------------------------------------------------------------------------
    def window_loads(self) -> np.ndarray:
        """[layers, experts] float64 pairs routed to each logical expert over the window, all
        ranks; rows of layers this model does not hold are 0 (the placement covers all)."""
        return self.per_pass_loads().sum(axis=0)

    def per_pass_loads(self) -> np.ndarray:
        """[passes, layers, experts] float64, all ranks (one all-reduce; every rank calls it)."""
        cfg = self.model.config
        if not self._passes:
            raise LiveError("the recorder holds no forward passes; call record() after forwards")
        local = torch.stack([p[1] for p in self._passes]).to(torch.float64)
        summed = self.control.sum_(local).cpu().numpy()                     # [passes, held, experts]
        out = np.zeros((len(self._passes), cfg.num_layers, cfg.num_experts))
        out[:, self.model.start_layer:self.model.end_layer] = summed
        return out

    def rank_loads(self) -> np.ndarray:
        """[passes, control ranks, held layers] float64 pairs each rank's experts received: the
        load balance as served."""
        mine = torch.stack([p[2] for p in self._passes]).to(torch.float64).cpu().numpy()
        table = self.control.gather_floats(mine.ravel())                     # [ranks, passes*held]
        return table.reshape(self.control.size, *mine.shape).transpose(1, 0, 2)

    # -- exports ---------------------------------------------------------------------------
    def to_records(self, provenance: dict, **fields) -> list[dict]:
        """One `expert_load` record dict per pass in the window (`epsim.records.MeasurementRecord`
        fields); every rank must call it, all return the same list.

        Args:
            provenance: where it ran (`epsim.records.Provenance` fields).
            fields: extra record fields (model, skew, seed, ...).
        """
        loads = self.per_pass_loads()
        per_rank = self.rank_loads()
        cfg, placement = self.model.config, self.model.placement
        out = []
        for i, (pass_id, _, _) in enumerate(self._passes):
            out.append(dict(
                kind="expert_load", backend=self.model.backend.name, ep_size=placement.num_ranks,
                num_tokens_per_rank=0, hidden_size=cfg.hidden_size,
                moe_intermediate_size=cfg.moe_intermediate_size, num_experts=cfg.num_experts,
                num_physical_experts=placement.num_physical, top_k=cfg.top_k,
                num_layers=cfg.num_layers, loads=loads[i].tolist(), forward_pass_id=pass_id,
                provenance=provenance,
                extra={"rank_loads": per_rank[i].T.tolist(),     # [held layers, control ranks]
                       "layers": [self.model.start_layer, self.model.end_layer],
                       "counted_from": "dispatch local_expert_tokens"},
                **fields))
        return out

    def write_jsonl(self, path: str | Path, provenance: dict, **fields) -> Path:
        """Write the window's records (every rank calls it; control rank 0 writes). The file is
        what `epsim eplb LOADS` and `epsim.eplb.read_loads` read."""
        records = [MeasurementRecord.model_validate(r) for r in self.to_records(provenance, **fields)]
        path = Path(path)
        if self.control.rank == 0:
            write_records(records, path, append=False)
        return path
