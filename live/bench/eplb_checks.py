"""EPLB correctness checks on spawned EP ranks (gloo on CPU in the tests, NCCL / Mooncake in the
GPU bench): outputs before, during and after rebalances equal the single-device block's, slots
hold the experts the placement says, a failed move leaves the old placement serving, bad input
fails before anything moves, and elastic EP serves on the survivors.

Every worker runs `fn(rank, world_size, group, ...)` under `live.dist.run_ranks`; several
scenarios share one spawn (`scenarios_worker`), since process start-up is the slow part.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from epsim.eplb import compute_placement
from epsim.routing import skew_from_dict
from live.bench.checks import DTYPES, EqualityCase, case_inputs
from live.dist import rank_device
from live.eplb.elastic import mask_ranks, shrink_group
from live.eplb.manager import EplbManager
from live.eplb.result import rebalance_record
from live.eplb.updater import ExpertWeightUpdater, RebalanceAborted
from live.errors import LiveError
from live.model import Qwen3MoeModel
from live.routing import Routing, forced_routing
from live.weights import fused_names, random_weights, to_hf_names

HOTSET = {"kind": "hotset", "num_hot": 2, "hot_frac": 0.7}
ZIPF = {"kind": "zipf", "alpha": 1.2}


@dataclass(frozen=True)
class EplbCase(EqualityCase):
    """An EP model (`live.bench.checks.EqualityCase` fields: config, backend, tokens_per_rank,
    initial placement, dtype, device, seed, dispatch_mode, load, label) checked through
    rebalances against the single-device block.

    Attributes:
        phases: (skew, algorithm, layers_per_chunk) per phase; a rebalance ends each phase,
            computed from that phase's recorded loads.
        passes_per_phase: forward passes per phase (the manager's interval and window).
    """

    phases: tuple[tuple[dict, str, int], ...] = ((HOTSET, "deepseek", 2), (ZIPF, "sticky", 1),
                                                 (HOTSET, "deepseek_global", 1))
    passes_per_phase: int = 2


@dataclass
class Setup:
    """One rank's model, its single-device reference, the weights and this rank's token range."""

    case: EplbCase
    rank: int
    model: Qwen3MoeModel
    reference: Qwen3MoeModel
    weights: dict                    # what the model loaded (the cache when load="cache")
    pristine: dict                   # a private copy of the weights, never shared
    x_all: torch.Tensor
    begin: int
    end: int
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    zero_copy: dict = field(default_factory=dict)    # layers bound as views of the cache

    @property
    def device(self) -> torch.device:
        return self.x_all.device

    def routing(self, skew) -> dict[int, Routing]:
        """Forced routing of all ranks' tokens for every layer (the same on every rank)."""
        return {layer: forced_routing(skew, self.x_all.shape[0], self.rng, layer=layer,
                                      device=self.device)
                for layer in range(self.case.config.num_layers)}

    def compare(self, routing: dict[int, Routing], begin: int | None = None,
                end: int | None = None) -> tuple[float, float]:
        """(max |EP - single device| on this rank's tokens, max |reference|)."""
        begin = self.begin if begin is None else begin
        end = self.end if end is None else end
        mine = {layer: Routing(r.topk_ids[begin:end], r.topk_weights[begin:end])
                for layer, r in routing.items()}
        with torch.no_grad():
            y = self.model(self.x_all[begin:end], mine)
            y_ref = self.reference(self.x_all, routing)[begin:end]
        if end == begin:
            return 0.0, 0.0
        return float((y.float() - y_ref.float()).abs().max()), float(y_ref.float().abs().max())

    def slots_hold_their_experts(self) -> bool:
        """Every local slot's tensors equal (bitwise) its expert's in the pristine weights."""
        descriptor = self.model.routed_experts_weights_of_layer
        for layer in self.model.layer_ids:
            _, gate_up, down = fused_names(layer)
            experts = self.model.placement.local_slots(self.rank)[layer]
            for slot, expert in enumerate(experts.tolist()):
                for tensor, name in zip(descriptor[layer], (gate_up, down)):
                    if not torch.equal(tensor[slot], self.pristine[name][expert]):
                        return False
        return True


def setup(rank: int, world_size: int, group, case: EplbCase, cache: dict | None = None) -> Setup:
    """Weights (identical on every rank), the reference on a private copy, the EP model loaded
    by `case.load`; `cache`: shared-memory weights handed over by the parent (the IPC path)."""
    cfg, dtype = case.config, DTYPES[case.dtype]
    device = rank_device(case.device)
    layers = range(cfg.num_layers)
    if cache is None:
        weights = random_weights(cfg, layers, seed=case.seed, dtype=dtype, device=device)
        for tensor in weights.values():       # identical on every rank, whatever the RNG
            dist.broadcast(tensor, src=dist.get_global_rank(group, 0), group=group)
    else:
        weights = cache
    pristine = {name: t.clone() for name, t in weights.items()}
    reference = Qwen3MoeModel(cfg, dtype=dtype, device=device)
    reference.load_weight_cache({name: t.clone() for name, t in weights.items()})
    model = Qwen3MoeModel(cfg, placement=case.placement, backend=case.backend, group=group,
                          dtype=dtype, device=device, dispatch_mode=case.dispatch_mode,
                          max_tokens_per_rank=max(max(case.tokens_per_rank), 1), seed=case.seed)
    zero_copy = {}
    if case.load == "checkpoint":
        model.load_weights(to_hf_names(weights))
    else:
        zero_copy = model.load_weight_cache(weights)
    x_all, _ = case_inputs(case, device)
    begin = sum(case.tokens_per_rank[:rank])
    return Setup(case, rank, model, reference, weights, pristine, x_all, begin,
                 begin + case.tokens_per_rank[rank], np.random.default_rng([case.seed, 0xEB]),
                 zero_copy)


def _skew(case: EplbCase, descriptor: dict, phase: int):
    cfg = case.config
    return skew_from_dict(descriptor, cfg.num_layers, cfg.num_experts, cfg.top_k,
                          seed=case.seed + phase)


def _expected_loads(routings: list[dict[int, Routing]], num_experts: int) -> np.ndarray:
    """[layers, experts] pairs per logical expert over the passes, from the routing itself."""
    layers = len(routings[0])
    out = np.zeros((layers, num_experts))
    for routing in routings:
        for layer, r in routing.items():
            out[layer] += np.bincount(r.topk_ids.cpu().numpy().ravel(), minlength=num_experts)
    return out


# -- scenarios ---------------------------------------------------------------------------------
def rebalance_sequence(env: Setup, provenance: dict | None = None) -> dict:
    """Phases of forwards, each ending in a rebalance from its recorded loads: phase 0 through
    `EplbManager.step()` (the automatic interval), later ones on demand with a forward between
    chunks. Outputs are compared before, between chunks and after every rebalance."""
    case, model = env.case, env.model
    manager = EplbManager(model, rebalance_num_iterations=case.passes_per_phase,
                          window=case.passes_per_phase)
    out = {"errors": [], "ref_max": 0.0, "between_chunk_errors": [], "loads_match": [],
           "slots_ok": [env.slots_hold_their_experts()], "placements": [], "plans": [],
           "records": [], "cache_intact": True, "zero_copy": env.zero_copy}
    for phase, (descriptor, algorithm, chunk) in enumerate(case.phases):
        manager.algorithm, manager.updater.layers_per_chunk = algorithm, chunk
        skew = _skew(case, descriptor, phase)
        routings = []
        result = None
        for step in range(case.passes_per_phase):
            routing = env.routing(skew)
            routings.append(routing)
            err, ref = env.compare(routing)
            out["errors"].append(err)
            out["ref_max"] = max(out["ref_max"], ref)
            last = step == case.passes_per_phase - 1
            if phase == 0 or not last:
                result = manager.step()
            else:
                manager.recorder.record()
                manager.num_passes += 1

                def between(chunk_index, routing=routing):
                    out["between_chunk_errors"].append(env.compare(routing)[0])

                result = manager.rebalance(between_chunks=between)
        assert result is not None, "the manager must rebalance at the end of each phase"
        out["loads_match"].append(bool(np.array_equal(
            manager.recorder.window_loads(), _expected_loads(routings, case.config.num_experts))))
        out["errors"].append(env.compare(routings[-1])[0])            # after the rebalance
        out["slots_ok"].append(env.slots_hold_their_experts())
        out["placements"].append(model.placement.physical_to_logical.tolist())
        out["plans"].append({**result.plan, "chunks": len(result.chunk_layers),
                             "algorithm": algorithm, "layers_per_chunk": chunk,
                             "balancedness_before": result.extra["balancedness_before"],
                             "balancedness_after": result.extra["balancedness_after"]})
        if provenance is not None:
            out["records"].append(rebalance_record(
                [result], model, provenance, skew=skew.descriptor(),
                extra={"check": case.label, "phase": phase}))
    out["cache_intact"] = all(torch.equal(env.weights[n], env.pristine[n]) for n in env.weights)
    return out


def _other_placement(env: Setup) -> np.ndarray:
    """A placement that changes every layer: deepseek on a hot-set skew of this case."""
    cfg, placement = env.case.config, env.model.placement
    loads = np.ones((cfg.num_layers, cfg.num_experts))
    loads[:, ::3] = 50.0
    loads[:, 1] += np.arange(cfg.num_layers)          # a different order in every layer
    new = compute_placement("deepseek_global", loads, placement.num_physical, 1, 1,
                            placement.num_ranks).physical_to_logical
    return new if (new != placement.physical_to_logical).any(axis=1).all() else new[:, ::-1]


def failure_mid_move(env: Setup, fault_rank: int, fault_chunk: int, stage: str) -> dict:
    """Inject an exception on one rank in the middle of a chunked move: every rank must abort,
    move the committed chunks back, and serve the old placement with unchanged outputs."""
    model = env.model
    old = model.placement.physical_to_logical.copy()
    before = [t.clone() for layer in model.layer_ids
              for t in model.routed_experts_weights_of_layer[layer]]

    def fault(chunk: int, at: str) -> None:
        if env.rank == fault_rank and chunk == fault_chunk and at == stage:
            raise RuntimeError(f"injected fault at chunk {chunk} ({at})")

    updater = ExpertWeightUpdater(model, layers_per_chunk=1, fault=fault)
    routing = env.routing(_skew(env.case, HOTSET, 7))
    out = {"aborted": False, "message": ""}
    try:
        updater.apply(_other_placement(env))
    except RebalanceAborted as exc:
        out.update(aborted=True, message=str(exc))
    after = [t for layer in model.layer_ids for t in model.routed_experts_weights_of_layer[layer]]
    out["placement_restored"] = bool(np.array_equal(model.placement.physical_to_logical, old))
    out["blocks_restored"] = all(np.array_equal(model.block(layer).placement.physical_to_logical,
                                                old) for layer in model.layer_ids)
    out["weights_restored"] = all(torch.equal(a, b) for a, b in zip(before, after))
    out["error"] = env.compare(routing)[0]
    updater.fault = None                               # the same move, now without the fault
    result = updater.apply(_other_placement(env))
    out["retry_changed_slots"] = result.plan["changed_slots"]
    out["retry_error"] = env.compare(routing)[0]
    out["retry_slots_ok"] = env.slots_hold_their_experts()
    return out


def bad_inputs(env: Setup) -> dict:
    """Placements that drop an expert, give ranks unequal slots or name a rank out of range:
    each must raise LiveError before any weight moves (raised alike on every rank, before any
    collective, so no rank waits)."""
    model = env.model
    placement = model.placement
    p2l = placement.physical_to_logical
    ep, slots = placement.num_ranks, placement.slots_per_rank
    dropped = p2l.copy()
    dropped[0][dropped[0] == 0] = 1                                    # expert 0 gone in layer 0
    per_rank = {r: [p2l[layer, r * slots:(r + 1) * slots].tolist()
                    for layer in range(p2l.shape[0])] for r in range(ep)}
    unequal = {**per_rank, ep - 1: [row[:-1] for row in per_rank[ep - 1]]}
    out_of_range = {**per_rank, ep: per_rank[0]}
    del out_of_range[0]
    cases = {"dropped_expert": dropped, "unequal_slots": unequal,
             "unequal_slots_array": p2l[:, :-1], "rank_out_of_range": out_of_range}
    before = [t.clone() for layer in model.layer_ids
              for t in model.routed_experts_weights_of_layer[layer]]
    updater = ExpertWeightUpdater(model)
    messages = {}
    for name, bad in cases.items():
        try:
            updater.apply(bad)
            messages[name] = None
        except LiveError as exc:
            messages[name] = str(exc)
    others = [r for r in range(ep) if r != env.rank]
    for name, inactive in (("mask_rank_out_of_range", [ep]), ("mask_self", [env.rank]),
                           ("mask_too_few_slots", others)):
        try:
            mask_ranks(model, inactive)
            messages[name] = None
        except LiveError as exc:
            messages[name] = str(exc)
    after = [t for layer in model.layer_ids for t in model.routed_experts_weights_of_layer[layer]]
    return {"messages": messages,
            "unchanged": all(torch.equal(a, b) for a, b in zip(before, after)),
            "placement_unchanged": bool(np.array_equal(model.placement.physical_to_logical, p2l))}


def elastic(env: Setup, lost_rank: int, how: str, group, rebalance_after: bool = True,
            with_source: bool = True) -> dict:
    """Lose `lost_rank`: `mask` (mooncake keeps the group; torch/none keep the masked rank in
    their collectives with no tokens) or `shrink` (a group of the survivors). The survivors'
    tokens must come out as the single-device block computes them; then one more rebalance among
    the survivors. Without a weight source, losing experts must be refused before anything
    changes."""
    case, model = env.case, env.model
    if not with_source:
        return _elastic_without_source(env, lost_rank)
    ws = model.placement.num_ranks
    survivors = [r for r in range(ws) if r != lost_rank]
    skew = _skew(case, HOTSET, 11)
    routing = env.routing(skew)
    # the lost rank's tokens are gone: the reference sees the survivors' tokens only
    keep = torch.cat([torch.arange(sum(case.tokens_per_rank[:r]), sum(case.tokens_per_rank[:r + 1]))
                      for r in survivors]).to(env.device)
    env.x_all = env.x_all[keep]
    routing = {layer: Routing(r.topk_ids[keep], r.topk_weights[keep])
               for layer, r in routing.items()}
    if env.rank == lost_rank:
        if how == "mask" and case.backend != "mooncake":
            rounds = 2 if rebalance_after else 1       # its collectives still need it, tokenless
            for _ in range(rounds):
                env.compare(routing, 0, 0)
        return {"lost": True}
    begin = sum(case.tokens_per_rank[r] for r in survivors[:survivors.index(env.rank)])
    end = begin + case.tokens_per_rank[env.rank]
    if how == "shrink":
        group = dist.new_group(survivors, use_local_synchronization=True)
        cpu_s, wall_s = time.thread_time(), time.perf_counter()
        result = shrink_group(model, group, [lost_rank], weight_source=env.pristine)
        control = None
    else:
        control = (dist.new_group(survivors, backend="gloo", use_local_synchronization=True)
                   if len(survivors) > 1 else None)
        cpu_s, wall_s = time.thread_time(), time.perf_counter()
        result = mask_ranks(model, [lost_rank], weight_source=env.pristine, control_group=control)
    # the survivor's host time of the re-placement (`live.bench.eplb_host` records it)
    timed = {"path_cpu_us": (time.thread_time() - cpu_s) * 1e6,
             "path_wall_us": (time.perf_counter() - wall_s) * 1e6}
    out = {"lost": False, **timed, "served_by_replicas": result.served_by_replicas,
           "lost_experts": {int(k): v for k, v in result.lost_experts.items()},
           "reloads": 0 if result.moves is None else result.moves.plan["reloads"]}
    out["error"], out["ref_max"] = env.compare(routing, begin, end)
    stats = [model.block(layer).last_stats.to_host() for layer in model.layer_ids]
    out["sent_to_lost"] = (sum(s["send_tokens_to_rank"][lost_rank] for s in stats)
                           if how == "mask" else 0)
    out["slots_ok"] = _survivor_slots_ok(env)
    if rebalance_after:
        manager = EplbManager(model, algorithm="sticky", control_group=control)
        loads = _expected_loads([routing], case.config.num_experts)
        moved = manager.rebalance(loads)
        out["rebalance_changed_slots"] = moved.plan["changed_slots"]
        out["rebalance_error"] = env.compare(routing, begin, end)[0]
        out["rebalance_slots_ok"] = _survivor_slots_ok(env)
    return out


def _elastic_without_source(env: Setup, lost_rank: int) -> dict:
    if env.rank == lost_rank:
        return {"lost": True}
    model = env.model
    before = model.placement
    try:
        mask_ranks(model, [lost_rank])
        message = None
    except LiveError as exc:
        message = str(exc)
    return {"lost": False, "message": message, "placement_unchanged": model.placement is before,
            "backend_unmasked": all(getattr(model.backend, "expected_active", [True]))}


def _survivor_slots_ok(env: Setup) -> bool:
    rank = env.model.backend.rank                          # the rank in the (maybe new) group
    saved, env.rank = env.rank, rank
    try:
        return env.slots_hold_their_experts()
    finally:
        env.rank = saved


# -- one spawn, several scenarios ----------------------------------------------------------------
def scenarios_worker(rank: int, world_size: int, group, scenarios: list[tuple],
                     provenance: dict | None = None, cache: dict | None = None) -> list[dict]:
    """Run `(name, case, kwargs)` scenarios in order on this rank, each on a fresh model:
    name in `sequence`, `failure`, `bad_inputs`, `elastic` (run it last: a rank leaves)."""
    if all(case.device == "cpu" for _, case, _ in scenarios):
        torch.set_num_threads(1)     # ranks share few cores: spinning thread pools stall gloo
    out = []
    for name, case, kwargs in scenarios:
        env = setup(rank, world_size, group, case, cache if kwargs.get("use_cache") else None)
        kwargs = {k: v for k, v in kwargs.items() if k != "use_cache"}
        if name == "sequence":
            out.append(rebalance_sequence(env, provenance, **kwargs))
        elif name == "failure":
            out.append(failure_mid_move(env, **kwargs))
        elif name == "bad_inputs":
            out.append(bad_inputs(env))
        elif name == "elastic":
            out.append(elastic(env, group=group, **kwargs))
        else:
            raise ValueError(f"scenario ({name!r}) must be sequence, failure, bad_inputs or "
                             f"elastic")
        del env
        gc.collect()
    return out
