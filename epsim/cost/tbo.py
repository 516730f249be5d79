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
  compute stream waits on its event in `*_b`.

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
    event by event: the compute stream runs the stages' work in order; a send starts its
    exchange (a hooked one at once, one on the communication stream when that stream is
    free); a receive waits for it. `phase` "decode" or "prefill" picks the stage lists and
    delta; `hooked`: the exchanges have receive hooks (else they take the communication
    stream in turn); a layer's time is the stream's progress between B's ends of consecutive
    layers. The fields are `[layers]` (or scalars)."""
    layers = np.shape(s.experts)[-1]
    cols = {k: np.broadcast_to(np.asarray(getattr(s, k), dtype=np.float64), (layers,)).tolist()
            for k in Stages.__dataclass_fields__}
    stages, ends = (_decode_stages if phase == "decode" else _prefill_stages)(cols, layers)
    delta = DECODE_DELTA_STAGES if phase == "decode" else PREFILL_DELTA_STAGES
    order = [("a", i) for i in range(delta)]
    order += [x for i in range(delta, len(stages)) for x in (("a", i), ("b", i - delta))]
    order += [("b", i) for i in range(len(stages) - delta, len(stages))]
    now, comm_free = 0.0, 0.0
    arrive: dict[tuple, float] = {}
    done_b: dict[int, float] = {}
    for who, i in order:
        for op, *arg in stages[i]:
            if op == "run":
                now += arg[0]
            elif op == "send":
                start = now if hooked else max(now, comm_free)
                arrive[(who, arg[0])] = start + arg[1]
                comm_free = arrive[(who, arg[0])] if not hooked else comm_free
            else:                                   # "recv"
                now = max(now, arrive.pop((who, arg[0])))
        if who == "b" and i in ends:
            done_b[ends[i]] = now
    marks = [0.0] + [done_b[layer] for layer in range(layers)]
    return np.diff(np.asarray(marks))


def _decode_stages(c: dict, layers: int) -> tuple[list, dict]:
    """SGLang's decode stage lists (module doc), and which stage ends each layer."""
    stages, ends = [], {}
    for l in range(layers):
        stages += [[("run", c["prepare"][l])],
                   [("run", c["core"][l] + c["router"][l])],
                   [("run", c["dispatch_on"][l] / 2), ("send", ("d", l), c["dispatch_wire"][l]),
                    ("run", c["shared"][l])],
                   [("recv", ("d", l)), ("run", c["dispatch_on"][l] / 2 + c["experts"][l]
                                         + c["combine_on"][l] / 2),
                    ("send", ("c", l), c["combine_wire"][l])],
                   [("recv", ("c", l)), ("run", c["combine_on"][l] / 2)]]
        ends[len(stages) - 1] = l
    return stages, ends


def _prefill_stages(c: dict, layers: int) -> tuple[list, dict]:
    """SGLang's prefill stage lists (module doc; the shared experts and combine receive of a
    layer open the next layer's first stage), and which stage ends each layer."""
    stages, ends = [], {}
    for l in range(layers):
        first = []
        if l:
            first = [("run", c["shared"][l - 1]), ("recv", ("c", l - 1)),
                     ("run", c["combine_on"][l - 1] / 2)]
            ends[len(stages) - 1] = l - 1
        stages += [first + [("run", c["prepare"][l] + c["core"][l] + c["dispatch_on"][l] / 2),
                            ("send", ("d", l), c["dispatch_wire"][l])],
                   [("recv", ("d", l)), ("run", c["dispatch_on"][l] / 2 + c["router"][l]
                                         + c["experts"][l] + c["combine_on"][l] / 2),
                    ("send", ("c", l), c["combine_wire"][l])]]
    stages.append([("run", c["shared"][layers - 1]), ("recv", ("c", layers - 1)),
                   ("run", c["combine_on"][layers - 1] / 2)])
    ends[len(stages) - 1] = layers - 1
    return stages, ends


def overlapped_us(phase: str, prepare_us: float, shared_us: float, attention_us,
                  stages: np.ndarray, block_ops_us, wire: tuple, hooked: bool,
                  num_sms: int) -> np.ndarray:
    """[..., layers] a step's MoE layers under two-batch overlap (`CostModel.step` and
    `decode_steps`), from one micro-batch's costs: its attention (`[...]` broadcastable to
    the layers; `prepare_us` of it before the kernel), shared experts, the dispatch, experts
    and combine rows `stages` (`[3, ..., layers]`), block ops, and the dispatch's and
    combine's parts off the compute stream `wire`. Decode takes the closed form; prefill runs
    SGLang's prefill order event by event (`hooked`: its exchanges have receive hooks; without,
    the expert GEMMs run on the `num_sms - DEEPEP_NORMAL_SMS` SMs DeepEP leaves them, their
    time scaled by `num_sms / (num_sms - DEEPEP_NORMAL_SMS)`)."""
    dispatch, experts, combine = stages[0], stages[1], stages[2]
    if phase != "decode" and not hooked:
        share = num_sms / (num_sms - DEEPEP_NORMAL_SMS)
        experts, shared_us = experts * share, shared_us * share
    s = Stages(prepare=prepare_us, core=np.maximum(attention_us - prepare_us, 0.0),
               router=block_ops_us, shared=shared_us, experts=experts,
               dispatch_on=dispatch - wire[0], dispatch_wire=wire[0],
               combine_on=combine - wire[1], combine_wire=wire[1])
    if phase == "decode":
        return decode_layers_us(s)
    return schedule_layers_us(s, "prefill", hooked)
