"""The P/D handoff: what a disaggregated request's TTFT holds beyond its prefill instance's time.

A benchmark's client of a P/D pair sends to the router, which sends the request to a prefill and a
decode server at once; its first token reaches the client from the *decode* server. As SGLang
0.5.8 serves it (line numbers of `sglang/srt/` in the 0.5.8 wheel):

    ttft = tokenize + bootstrap + prefill (queue + forward) + exposed KV transfer + decode first token

- **tokenize** (`tokenize_ms`): a text prompt tokenised by the pair's frontend before either
  server sees it (`deployment.server_tokenize` "parallel": Dynamo's Rust frontend, each request
  in its own task; `epsim.cost.tokenize`, measured), the mean prompt's. Added here rather than
  as a shift of the prefill instance's simulated arrivals: the same ~14-18 ms at 8k for every
  request, whose length-dependent part is a few ms beside the spread of the prefill instance's
  clients' waits (each waits out its own request's decode, TPOT x its output tokens after the
  first, `closed_round`: seconds apart at outputs in [0.8 L, L]) and no queue it models.

- **bootstrap** (`bootstrap_ms`): the prefill server keeps the request in its bootstrap queue
  until the decode server has pre-allocated its KV and sent the indices
  (`disaggregation/prefill.py:227-300`, `pop_bootstrapped` polls for `KVPoll.WaitingForInput`).
  The decode server takes new requests at the top of its event loop
  (`disaggregation/decode.py:834-894`: `recv_requests`, then `process_decode_queue` ->
  `pop_preallocated`, `decode.py:447`; its receiver is `WaitingForInput` at once,
  `disaggregation/mooncake/conn.py:1194`, `nixl/conn.py:814-822`). A busy decode loop turns
  once per decode step, and under `--scheduler-recv-interval` N (the low-latency GB200/GB300
  recipes run 10: `epsim.validate.silicon.pd_recipes`) it receives only every N decode
  iterations, or on the iteration after a prebuilt batch (weight 1000,
  `managers/scheduler_recv_skipper.py`; `epsim.sim.recv`): the gaps between receives are
  G = min(N, the steps to the next prebuilt batch) steps, and a request arriving uniformly in
  time waits E[G^2] / (2 E[G]) steps (`receive_wait_steps`; half a step at N = 1). An idle
  decode loop spins and receives at once, so the wait is weighted by the decode's busy share.
  The prefill server's own wait for its next iteration is already in the prefill instance's
  TTFT; where the prefill is busy that wait hides the decode's, so this is an upper bound there.
- **prefill**: the prefill instance's simulated TTFT (queue, chunked forward; its closed loop).
- **exposed KV transfer** (`transfer_ms`): the last chunk's KV (`epsim.cost.kv_transfer`:
  tokens x layers x KV bytes per token at `kv_cache_dtype`; MLA's 576-element latent) over one
  GPU's scale-out NIC (Mooncake's default transport is RDMA; its NVLink pool is opt-in,
  `SGLANG_MOONCAKE_CUSTOM_MEM_POOL`, unset by default, `disaggregation/mooncake/utils.py:90-110`),
  each prefill rank sending its copy to its decode rank (`mooncake/conn.py:753-761`).
- **decode first token** (`first_token_ms`): the decode server polls transfer status once per
  event-loop iteration (`decode.py:1001-1026`, every `disaggregation_decode_polling_interval` =
  1 iterations, `server_args.py:642`; `pop_transferred`, `decode.py:772`), builds a prebuilt
  batch of the transferred requests (`decode.py:907-999`, no forward of its own; an idle forward
  under DP attention) and streams their first token when that batch's result is processed
  (`managers/scheduler_output_processor_mixin.py:47-63`); a request that finds no running slot
  waits in the waiting queue (`decode.py:947-980`, `max_running_requests`). The decode instance's
  simulated TTFT is exactly this span: arrival, the rest of the running step, then one step,
  after any wait for a slot or KV pool room.

Which decode DP rank the handed-off request meets (`decode_by_room`, `room_routed_decode`):
round-robin on 0.5.8, its bootstrap room on 0.5.6 and older (`epsim.sim.rank_queues`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from epsim.cost.kv_transfer import kv_transfer, last_chunk_tokens
from epsim.cost.tokenize import tokenize_s

KV_PATH = "mooncake"        # SGLang's default --disaggregation-transfer-backend (server_args.py:631)


@dataclass(frozen=True)
class Handoff:
    """A P/D request's times around its prefill (ms): module doc.

    Attributes:
        bootstrap_ms: before the prefill server may schedule it (the decode's next receive).
        tokenize_ms: the frontend's tokenisation of its text prompt (0: sent as token ids).
        transfer_ms: the last chunk's KV transfer after the prefill forward.
        first_token_ms: from the transfer's end to the first token streamed by the decode server.
    """

    bootstrap_ms: float
    transfer_ms: float
    first_token_ms: float
    tokenize_ms: float = 0.0

    @property
    def around_prefill_ms(self) -> float:
        """What the prefill instance's closed loop does not see before the decode side admits it."""
        return self.tokenize_ms + self.bootstrap_ms + self.transfer_ms

    def ttft_ms(self, prefill_ttft_ms: float) -> float:
        """The benchmark's TTFT of a request whose prefill instance took `prefill_ttft_ms`."""
        return prefill_ttft_ms + self.around_prefill_ms + self.first_token_ms


def receive_wait_steps(interval: int, prebuilt_per_step: float) -> float:
    """Mean decode steps from a request's arrival (uniform in time) to the busy decode loop's
    next receive: receives every `interval` iterations, or after a prebuilt batch, which follows
    a step with probability `prebuilt_per_step` (capped at 1); module doc, **bootstrap**."""
    if interval < 1:
        raise ValueError(f"interval ({interval}) must be >= 1 (SGLang's --scheduler-recv-interval)")
    p = min(max(prebuilt_per_step, 0.0), 1.0)
    # P(G = k) = p (1 - p)^(k - 1) for k < N, the rest at N
    probs = [p * (1.0 - p) ** (k - 1) for k in range(1, interval)]
    probs.append((1.0 - p) ** (interval - 1))
    mean = sum(k * q for k, q in enumerate(probs, start=1))
    square = sum(k * k * q for k, q in enumerate(probs, start=1))
    return square / (2.0 * mean)


def handoff(prefill_scenario, decode_step_ms: float, decode_first_ms: float,
            recv_interval: int = 1, arrivals_per_s: float = 0.0, busy: float = 1.0) -> Handoff:
    """The handoff of a mean request of `prefill_scenario` (a `Scenario`) to a decode instance
    whose mean step is `decode_step_ms`, whose mean arrival-to-first-token is `decode_first_ms`,
    that receives every `recv_interval` decode iterations (its `scheduler_recv_interval`), takes
    in `arrivals_per_s` transferred requests and has a batch `busy` of the time.
    """
    sc = prefill_scenario
    workload, deployment = sc.workload, sc.deployment
    prompt = int(round(workload.input_len.mean_tokens))
    tokens = last_chunk_tokens(prompt, deployment.chunked_prefill_size)
    kv = kv_transfer(sc.model, sc.cluster, KV_PATH, tokens, kv_cache_dtype=deployment.kv_cache_dtype)
    wait = receive_wait_steps(recv_interval, arrivals_per_s * decode_step_ms * 1e-3)
    tokenize_ms = (float(tokenize_s(prompt)) * 1e3 if deployment.server_tokenize == "parallel"
                   else 0.0)
    return Handoff(busy * wait * decode_step_ms, kv.transfer_us * 1e-3, decode_first_ms,
                   tokenize_ms)


# the last SGLang release read whose `round_robin_scheduler` sends every disaggregated request,
# the decode server's too, to `bootstrap_room % dp_size` (0.5.5 and 0.5.6
# `managers/data_parallel_controller.py` 468-472 / 475-479; 0.5.8 sends a decode's round-robin,
# `server_args.py` 778-787 and `data_parallel_controller.py` 466-479; 0.5.7 not read)
ROOM_ROUTED_DECODE_UNTIL = (0, 5, 6)
DECODE_BY_ROOM = ("decode: each request to DP rank bootstrap_room % dp_size, a uniform draw "
                  "(SGLang 0.4.8-0.5.6 `round_robin_scheduler` routes a disaggregated decode's "
                  "requests by room; 0.5.8 round-robin)")


def decode_by_room(version: tuple[int, int, int] | None, deployment: dict) -> bool:
    """Whether a P/D decode instance of SGLang `version` ((major, minor, patch); None: not
    stated) with these `DeploymentSpec` fields meets its requests' DP ranks by bootstrap room:
    DP attention over more than one rank, a release up to `ROOM_ROUTED_DECODE_UNTIL`, and no
    `load_balance_method` set (none of the rows' scripts sets one on the decode)."""
    return (version is not None and version <= ROOM_ROUTED_DECODE_UNTIL
            and deployment.get("enable_dp_attention", False)
            and deployment.get("dp_size", 1) > 1
            and deployment.get("load_balance_method", "auto") == "auto")


def room_routed_decode(version: tuple[int, int, int] | None, deployment: dict,
                       recipe_max_running: int | None, clients: int) -> dict:
    """The `DeploymentSpec` fields a decode instance that routes by room (`decode_by_room`)
    changes, {} where it does not: `load_balance_method`, and a request cap a rank's drawn share
    of the instance's `clients` can reach (the mapping caps a rank at its even share, as many as
    round-robin sends it): the share plus six standard deviations of its binomial draw (never
    reached in practice; a bound, not SGLang's, that keeps the slot arrays small), or the
    recipe's `recipe_max_running` a rank (None: no recipe cap) where that is less."""
    if not decode_by_room(version, deployment):
        return {}
    share = -(-clients // deployment["dp_size"])
    drawn = share + math.ceil(6 * share ** 0.5)
    return {"load_balance_method": "follow_bootstrap_room",
            "max_running_requests": drawn if recipe_max_running is None
            else min(recipe_max_running, drawn)}
