"""Two-batch overlap as SGLang runs it: two micro-batches' stages interleaved on one compute
stream, each one's exchanges hidden behind a stage of the other (docs/model.md, "Two-batch
overlap", has the stage graph with SGLang's file:line).

SGLang (0.4.7 `operations_strategy.py`; the same lists in 0.5.8
`batch_overlap/operations_strategy.py`) cuts each MoE layer's operations into stages at its
`YieldOperation`s, and `operations.py:execute_overlapped_operations` issues micro-batch A's
stages and B's alternately, B `tbo_delta_stages` behind (2 in decode, 0 in prefill). Every
kernel goes to the one compute stream in that order. What runs beside it is the exchanges:

- a dispatch or combine with a receive hook (DeepEP low-latency, `return_recv_hook=True`):
  `*_a` runs the send kernel, the NIC carries the RDMA bytes without SMs (`MoECost.*_wire_us`),
  and the hook in `*_b` runs the receive kernel, which waits for them;
- one without (DeepEP normal, `async_finish=True`): the whole exchange runs on DeepEP's
  communication stream after an event of the compute stream, one exchange at a time, and the
  compute stream waits on its event in `*_b`. Its kernels hold 20 SMs while they run: SGLang
  runs DeepGEMM on the others throughout, and any other kernel gets only the others while an
  exchange is in flight (`Stages.overlap_share`). Nothing else of running the two at once is
  priced (HBM and L2 shared, clocks): docs/model.md says what measurement would.

Per micro-batch and MoE layer (one micro-batch's costs, µs):

    decode  (delta 2): [prepare] | [core + router] | [dispatch send, shared experts]
                       | [dispatch receive, experts, combine send] | [combine receive]
    prefill (delta 0): [shared experts (l-1), combine receive (l-1), attention, dispatch send]
                       | [dispatch receive, router/permute, experts, combine send]

`decode_layers_us` is the critical path of the decode order in closed form: no receive falls
between another exchange's send and receive, so each exchange waits for what its window of
stages leaves of it, and the stream's time is every stage's work plus those waits.
`schedule_layers_us` runs the issue order event by event (both orders); prefill is priced by
it, and the tests hold the closed form to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DECODE_DELTA_STAGES = 2      # operations_strategy.py:112 (0.4.7); 0.5.8 :114
PREFILL_DELTA_STAGES = 0     # operations_strategy.py:87 (0.4.7); 0.5.8 :89
# SMs DeepEP's normal kernels hold (its `Buffer.num_sms` default, which SGLang's DeepEPConfig
# takes without a --deepep-config: token_dispatcher.py:154 in 0.4.7). SGLang's prefill order
# runs DeepGEMM on the others (`deep_gemm_num_sms`, operations_strategy.py:81-83,
# two_batch_overlap.py:482), so the expert GEMMs run on `num_sms - 20` SMs.
DEEPEP_NORMAL_SMS = 20
# The compute ops SGLang already runs on `num_sms - DEEPEP_NORMAL_SMS` SMs for the whole step
# (DeepGEMM's `deep_gemm_num_sms`): `overlapped_stages` scales them; the event order slows the
# others only while an exchange holds DeepEP's SMs (`Stages.overlap_share`).
SM_CAPPED = frozenset({"experts", "shared experts"})


@dataclass(frozen=True)
class Stages:
    """One micro-batch's work in each MoE layer (µs; each broadcastable to `[..., layers]`).

    prepare: attention before its kernel (projections, absorbed `W_UK`, RoPE, norms: SGLang's
        `self_attn.op_prepare`); the same every layer.
    core: the attention kernel, `W_UV` and `o_proj` (`op_core`) with any TP collectives.
    router: the MoE block's own ops (gate and top-k; normal mode's permute and weighting).
    shared, experts: the shared experts and the slowest rank's routed experts.
    dispatch_on, combine_on: what of each exchange occupies the compute stream (send and
        receive kernels, half before the send and half after the receive).
    dispatch_wire, combine_wire: what runs beside it (`MoECost.*_wire_us`).
    overlap_share: the rate, as a share of the whole GPU's, of a compute kernel running while
        an exchange is on the communication stream (1: it keeps every SM). DeepEP normal's
        kernels hold `DEEPEP_NORMAL_SMS` SMs for as long as they run: one block per SM
        (`SETUP_LAUNCH_CONFIG(num_sms, ...)`, `csrc/kernels/legacy/intranode.cu:621`;
        `num_channels * 2` blocks, `internode.cu:1310`), each with 96-192 KB of shared memory
        for its TMA copies (`intranode.cu:576-579`, `:1070-1073`; `internode.cu:1254-1255`,
        DeepEP dd758ca), too much of an SM's 228 KB for an attention or DeepGEMM CTA to fit
        beside it: as SGLang assumes for DeepGEMM, a kernel that overlaps the exchange runs
        on the other SMs (`overlapped_stages`).
    """

    prepare: np.ndarray | float
    core: np.ndarray | float
    router: np.ndarray | float
    shared: np.ndarray | float
    experts: np.ndarray | float
    dispatch_on: np.ndarray | float
    dispatch_wire: np.ndarray | float
    combine_on: np.ndarray | float
    combine_wire: np.ndarray | float
    overlap_share: float = 1.0


def decode_layers_us(s: Stages) -> np.ndarray:
    """[..., layers] both micro-batches' time in each MoE layer of a decode step (the last
    layer holding the drain: B's last exchanges with less of A's work left to hide behind).

    A's dispatch runs behind its own shared experts and B's `prepare`; its combine behind B's
    `core` and router of the same layer; B's behind A's next layer's. So a layer is
    `2 x (every stage's work) + 2 x max(0, dispatch_wire - shared - prepare)
    + max(0, combine_wire - core - router) + max(0, combine_wire - core - next router)`; in
    the last layer B's dispatch has only its shared experts to hide behind and its combine
    nothing."""
    core = s.core + s.router
    work = s.prepare + core + s.shared + s.experts + s.dispatch_on + s.combine_on
    shape = np.broadcast_shapes(*(np.shape(x) for x in (work, s.dispatch_wire, s.combine_wire)))
    work, core, d_wire, c_wire, shared, prepare = (
        np.broadcast_to(np.asarray(x, dtype=np.float64), shape)
        for x in (work, core, s.dispatch_wire, s.combine_wire, s.shared, s.prepare))
    wait_d = np.maximum(d_wire - (shared + prepare), 0.0)     # A's; B's but in the last layer
    wait_d_b = wait_d.copy()
    wait_d_b[..., -1] = np.maximum(d_wire[..., -1] - shared[..., -1], 0.0)
    wait_c = np.maximum(c_wire - core, 0.0)                   # A's: behind B's same layer
    wait_c_b = c_wire.copy()                                  # B's: behind A's next layer
    wait_c_b[..., :-1] = np.maximum(c_wire[..., :-1] - core[..., 1:], 0.0)
    return 2.0 * work + wait_d + wait_d_b + wait_c + wait_c_b


def schedule_layers_us(s: Stages, phase: str, hooked: bool) -> np.ndarray:
    """[layers] both micro-batches' time in each MoE layer, from running SGLang's issue order
    event by event (`schedule_events`); a layer's time is the compute stream's progress
    between B's ends of consecutive layers. The fields are `[layers]` (or scalars)."""
    layers = np.shape(s.experts)[-1]
    done_b = {}
    for who, name, start, dur, layer, track in schedule_events(s, phase, hooked):
        if who == "B" and name == "end":
            done_b[layer] = start
    return np.diff(np.asarray([0.0] + [done_b[layer] for layer in range(layers)]))


def schedule_events(s: Stages, phase: str, hooked: bool) -> list[tuple]:
    """SGLang's issue order run event by event: `(micro-batch "A"/"B", name, start_us, dur_us,
    layer, track)` with track 0 the compute stream and 1 an exchange off it, plus a zero-length
    "end" per micro-batch and layer. The compute stream runs the stages' work in order; a send
    starts its exchange (a hooked one at once, one on the communication stream when that
    stream is free: `hooked` False); a receive waits for it. `phase` "decode" or "prefill"
    picks the stage lists and delta (module doc)."""
    layers = np.shape(s.experts)[-1]
    cols = {k: np.broadcast_to(np.asarray(getattr(s, k), dtype=np.float64), (layers,)).tolist()
            for k in Stages.__dataclass_fields__ if k != "overlap_share"}
    stages = (_decode_stages if phase == "decode" else _prefill_stages)(cols, layers)
    delta = DECODE_DELTA_STAGES if phase == "decode" else PREFILL_DELTA_STAGES
    order = [("A", i) for i in range(delta)]
    order += [x for i in range(delta, len(stages)) for x in (("A", i), ("B", i - delta))]
    order += [("B", i) for i in range(len(stages) - delta, len(stages))]
    now, comm_free = 0.0, 0.0
    busy: list[tuple[float, float]] = []     # the communication stream's exchanges, in order
    slow = 1.0 if hooked else s.overlap_share
    arrive: dict[tuple, float] = {}
    events = []
    for who, i in order:
        for op, name, layer, us in stages[i]:
            if op == "run":
                end = (now + us if slow == 1.0 or name in SM_CAPPED
                       else _run_end(now, us, busy, slow))
                events.append((who, name, now, end - now, layer, 0))
                now = end
            elif op == "send":
                start = now if hooked else max(now, comm_free)
                arrive[(who, name, layer)] = start + us
                if not hooked:
                    comm_free = start + us
                    busy.append((start, comm_free))
                events.append((who, name, start, us, layer, 1))
            elif op == "recv":
                now = max(now, arrive.pop((who, name, layer)))
            else:                                   # "end" of a layer
                events.append((who, "end", now, 0.0, layer, 0))
    return events


def _run_end(now: float, us: float, busy: list[tuple[float, float]], share: float) -> float:
    """When a compute op of `us` (on every SM) started at `now` ends: it runs at `share` of
    its rate inside the communication stream's `busy` intervals (sorted, disjoint), at its
    whole rate outside them. Every exchange it can meet is issued before it starts (sends
    sit between ops), so `busy` is complete for it."""
    left, t = us, now
    for start, end in busy:
        if end <= t:
            continue
        if start > t:                            # a gap with every SM before the exchange
            if left <= start - t:
                return t + left
            left -= start - t
            t = start
        if left <= (end - t) * share:            # ends beside the exchange
            return t + left / share
        left -= (end - t) * share
        t = end
    return t + left


def _decode_stages(c: dict, layers: int) -> list[list[tuple]]:
    """SGLang's decode stage lists (module doc): `(op, name, layer, µs)` each."""
    stages = []
    for l in range(layers):
        half_d, half_c = c["dispatch_on"][l] / 2, c["combine_on"][l] / 2
        stages += [[("run", "prepare", l, c["prepare"][l])],
                   [("run", "core", l, c["core"][l]), ("run", "router", l, c["router"][l])],
                   [("run", "dispatch send", l, half_d),
                    ("send", "dispatch", l, c["dispatch_wire"][l]),
                    ("run", "shared experts", l, c["shared"][l])],
                   [("recv", "dispatch", l, 0.0), ("run", "dispatch receive", l, half_d),
                    ("run", "experts", l, c["experts"][l]), ("run", "combine send", l, half_c),
                    ("send", "combine", l, c["combine_wire"][l])],
                   [("recv", "combine", l, 0.0), ("run", "combine receive", l, half_c),
                    ("end", "", l, 0.0)]]
    return stages


def _prefill_stages(c: dict, layers: int) -> list[list[tuple]]:
    """SGLang's prefill stage lists (module doc; the shared experts and combine receive of a
    layer open the next layer's first stage): `(op, name, layer, µs)` each."""
    stages = []
    for l in range(layers + 1):
        first = []
        if l:
            k = l - 1
            first = [("run", "shared experts", k, c["shared"][k]), ("recv", "combine", k, 0.0),
                     ("run", "combine receive", k, c["combine_on"][k] / 2), ("end", "", k, 0.0)]
        if l == layers:
            stages.append(first)
            break
        half_d = c["dispatch_on"][l] / 2
        stages += [first + [("run", "attention", l, c["prepare"][l] + c["core"][l]),
                            ("run", "dispatch send", l, half_d),
                            ("send", "dispatch", l, c["dispatch_wire"][l])],
                   [("recv", "dispatch", l, 0.0), ("run", "dispatch receive", l, half_d),
                    ("run", "router", l, c["router"][l]), ("run", "experts", l, c["experts"][l]),
                    ("run", "combine send", l, c["combine_on"][l] / 2),
                    ("send", "combine", l, c["combine_wire"][l])]]
    return stages


def overlapped_stages(phase: str, prepare_us: float, shared_us: float, attention_us,
                      stages: np.ndarray, block_ops_us, wire: tuple, hooked: bool,
                      num_sms: int = 0) -> Stages:
    """One micro-batch's `Stages` of a step's MoE layers (`CostModel.step` and
    `decode_steps`): its attention (`[...]` broadcastable to the layers; `prepare_us` of it
    before the kernel), shared experts, the dispatch, experts and combine rows `stages`
    (`[3, ..., layers]`), block ops, and the dispatch's and combine's parts off the compute
    stream `wire`. In prefill without receive hooks (`hooked` False: DeepEP normal) the
    expert GEMMs run on the `num_sms - DEEPEP_NORMAL_SMS` SMs DeepEP leaves them, their time
    scaled by `num_sms / (num_sms - DEEPEP_NORMAL_SMS)` (the GPU's SMs; unread in decode), and
    the other compute (attention, router) runs on those SMs while an exchange is in flight
    (`Stages.overlap_share`)."""
    dispatch, experts, combine = stages[0], stages[1], stages[2]
    overlap = 1.0
    if phase != "decode" and not hooked:
        overlap = (num_sms - DEEPEP_NORMAL_SMS) / num_sms
        experts, shared_us = experts / overlap, shared_us / overlap
    return Stages(prepare=prepare_us, core=np.maximum(attention_us - prepare_us, 0.0),
                  router=block_ops_us, shared=shared_us, experts=experts,
                  dispatch_on=dispatch - wire[0], dispatch_wire=wire[0],
                  combine_on=combine - wire[1], combine_wire=wire[1], overlap_share=overlap)


def overlapped_us(s: Stages, phase: str, hooked: bool) -> np.ndarray:
    """[..., layers] a step's MoE layers under two-batch overlap from one micro-batch's
    `Stages`: decode in closed form, prefill event by event (`hooked`: its exchanges have
    receive hooks)."""
    if phase == "decode":
        return decode_layers_us(s)
    return schedule_layers_us(s, "prefill", hooked)
