"""The scheduler's host time per step that SGLang exposes with overlap scheduling disabled.

SGLang's scheduler (python/sglang/srt/managers/scheduler.py) runs one of two loops.
`event_loop_overlap` (the default) launches step N+1's forward before it processes step N's
result, so the CPU's work between forward passes runs while the GPU computes and costs a step
nothing while it is shorter than the forward. `event_loop_normal` (`--disable-overlap-schedule`,
and what SGLang's speculative worker (EAGLE / NEXTN, v1) forces) runs, per step, strictly in
turn with the GPU:

    recv_requests, process_input_requests      (a non-blocking poll: nothing new in steady decode;
                                               with DP attention and TP > 1 the control requests
                                               are broadcast over the TP group's CPU (gloo)
                                               group every iteration, `broadcast_pyobj`: one
                                               size tensor when there are none, 0.4.9-0.5.9)
    get_next_batch_to_run                      prepare_for_decode: seq_lens += 1, KV slots
                                               allocated, the request-to-token table written;
                                               with DP attention `prepare_mlp_sync_batch`: an
                                               all-gather of every DP rank's batch info over
                                               the NCCL device group (the CPU group only when
                                               overlapping; SGLang of mid-2025, 0.4.8-0.4.9,
                                               used the CPU (gloo) group always), then read
                                               back to the host
    run_batch                                  ForwardBatch.init_new (positions, DP token
                                               counts to the GPU), the CUDA graph's
                                               replay_prepare (its input buffers copied in, the
                                               attention backend's replay metadata), the
                                               replay, the sampler after it (eager)
    process_batch_result                       next_token_ids.tolist() (waits for the GPU),
                                               the per-request bookkeeping, stream_output to
                                               the detokenizer

and a speculative cycle with DP attention all-reduced whether any rank has a draft extend to
run over the same gloo group (`EAGLEWorker.check_forward_draft_extend_after_decode`, 0.4.8-
0.4.9.post2; sglang#8276 of 2025-07-23 skips the check under DP attention, "it is slow", and
runs the extend on every rank: 0.5.8 and 0.5.9 define it and never call it; epsim prices it with
`mlp_sync_group: cpu`, the SGLang of that era),
so the step is the GPU's forward plus this host time, but for what the loop issues after a
CUDA graph's replay and before its next read-back of the device, which runs under that graph
(`GRAPH_WINDOWS`, below). The host time is
priced as `launches x launch_us + the DP all-gather`: the eager kernel launches and host
read-backs the loop issues outside the CUDA graph (`DECODE_LAUNCHES`, counted from the code
above, to a launch or two; a speculative cycle runs its worker's, `SPECULATIVE_LAUNCHES`, in
place of the decode batch's preparation and sampling), each at the host time
of one eager launch, and the all-gather priced by the collective model (`epsim.cost.allreduce`,
NCCL's ring between the DP ranks' GPUs) plus its eager host part; with `deployment.mlp_sync_group:
cpu` (SGLang before PR #8001 of 2025-07-14, whose motivation was this gather's gloo overhead with
overlap scheduling off) it is a gloo collective like the other two.

Each figure is the time of the call the loop makes, measured where one was (`gloo_collective_us`,
`any/serving_host`: `benchmarks/serving_host_gpu.py` on a GPU host, an H100 machine's 16 CPUs,
record `epsim/data/records/host/serving_host_gpu.json`, carried into the profile by
`epsim.calibrate.serving_host`):

  gloo collectives   each at the GPU host's median of that collective at the deployment's TP
                     group size: `broadcast` of one int64 (`broadcast_pyobj`'s size tensor),
                     `all_gather_into_tensor` of 6 int64 a rank (the batch info), `all_reduce` of
                     one int64 (the draft-extend check), over 2, 8 and 16 local ranks; at another
                     count the per-message time (median / `GLOO_HOPS`: gloo's binomial-tree
                     broadcast, `ceil(log2 n)` rounds, gloo/broadcast.cc; its ring all-gather,
                     `n - 1`, gloo/allgather.cc; its ring all-reduce, `2 (n - 1)`,
                     gloo/allreduce.cc) interpolated in log2 n, held beyond 16 (extrapolated).
                     The ranks were local: messages between nodes (TCP over the hosts' network)
                     are extrapolated, the figure a floor for them. Without the record: `GLOO_HOPS`
                     messages at the VM's `any/rebalance_host` `gloo_message` (`monitored_barrier`
                     between two local ranks on our harness's VM, per message: not the calls the
                     loop makes, and a barrier's messages all pass through rank 0)
  uploads            `torch.tensor(ints, device="cuda")` (`UPLOADS`: the batch info, the DP token
                     counts): the GPU host's `h2d_tensor_us`
  read-backs         `.tolist()` / `.item()` of a small device tensor (`READBACKS`): the GPU
                     host's `readback_us`, the host part (the wait is the GPU's time, in the step)
  other launches     `launch_us`: the loop's own kinds of eager op (clone, cast, index_put,
                     slice copies, cumsum, argmax, softmax, arange, full, with the loop's
                     arguments, outputs allocated) timed on a GPU host, per launch (`any/
                     serving_host` `loop_launch_us`: `benchmarks/serving_loop_ops_gpu.py`, an H100
                     machine's 16 CPUs, 2026-12-06, record `epsim/data/records/host/
                     serving_loop_ops_gpu.json`; 11.8 us); the GPU host's minimal `add_`
                     (`launch_us`, no allocation, no view) is a floor for them, not their measure.
                     Without that record, the live bench's eager block ops minus their device
                     time (`any/block_ops/host` over the block's 27 launches, a lent 1x H200
                     machine's host: other ops, the module's Python around them; 29.3 us); without
                     either, `DEFAULT_LAUNCH_US`.

The loop's per-request Python is priced per decoding request of the step (the slowest DP rank's
scheduler; with attention TP every rank's scheduler runs the whole batch), at `REQUEST_HOST_US`:
`process_batch_result_decode`'s loop (`check_finished`, the customised-info, logprob, hidden and
grammar tests; a speculative cycle's ids are a device tensor the loop unbinds) and
`stream_output_generation`'s (a streaming request outputs every step: its incremental detokenize
offsets, ~25 list appends, the time-stats getters, and its share of the `BatchTokenIDOutput`
pickled for the detokenizer); a speculative cycle adds `EagleVerifyInput.verify`'s loop (per
accepted token an append, `check_finished` and `finished`; per request the KV counters, one
`accept_index[i, :j]` view of a device tensor, the acceptance histogram) and the batch
preparation's comprehensions (`decode_batch_idx`, `extend_lens`, `get_model_worker_batch`'s two
per call, three calls a cycle, `filter_batch`'s `keep_indices`). The figures are those bodies
transcribed from the 0.5.9 wheel onto stand-in requests and timed on our VM
(`benchmarks/spec_request_host.py`, `benchmarks/results/spec_request_host.md`; each part the
largest over 1 to 3 tokens accepted, a bound within ~1 us of the others), extrapolated to a
serving host's CPU. About 7.4 us a request a cycle: 3.8 ms a cycle at 512 requests. A prefill
step's per-request work (`process_batch_result_prefill`) is not priced.

The loop waits for the GPU only where it reads the device back, so host work issued after a
graph's replay runs under that graph until the next read-back (`GRAPH_WINDOWS`, SGLang
0.4.9.post2's order): a plain decode step's sampler launches after the target's replay, before
`next_token_ids.tolist()` (hidden: the graph is the step's forward); a speculative cycle's
`build_tree` launches after the draft graph's replay, before `prepare_for_verify`'s allocation
reads `ret_values.item()`, and after the draft extend's replay (`forward_draft_extend_after_decode`,
the cycle's last launch, no read-back) `process_batch_result`'s and `stream_output`'s per-request
loops and the next iteration's `recv_requests` broadcast and gloo batch-info gather, until the next
draft's allocation reads the device back. Each hides up to its graph's GPU time
(`SchedulerHost.hidden_us`); an NCCL gather queues behind the extend on the device and is not
hidden. The verify's acceptance launches after the target's replay are not counted apart (at most
a few launches under a 40 ms graph).
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

import numpy as np

from epsim.cost.allreduce import ring_us
from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.cost.block_ops import launches
from epsim.eplb.host_terms import shipped_host_params
from epsim.profile import Component, Profile, default_profile_path

# eager launches and host read-backs of one decode step of `event_loop_normal` outside the CUDA
# graph, by where the code issues them (SGLang 0.4.9-0.5, DP attention, CUDA-graph decode)
DECODE_LAUNCHES = {
    "prepare_for_decode": 4,       # seq_lens clone and += 1, slot indices cast, table write
    "mlp_sync_batch": 2,           # the batch info to the GPU, read back (the gather apart)
    "forward_batch_init": 4,       # positions (sub, clamp), DP token counts to the GPU (2)
    "graph_replay_prepare": 11,    # 5 input copies, DP counts, backend metadata (4), replay
    "sampler": 3,                  # logits to probabilities, sample, ids cast
    "result_readback": 1,          # next_token_ids.tolist()
}
# a speculative cycle (SGLang's EAGLEWorker, v1, python/sglang/srt/speculative/eagle_worker.py)
# prepares its own batch (prepare_for_decode returns early) and samples in the verify, and adds
# the draft's CUDA graph and its inputs, the draft tree, the verify's acceptance and its
# read-backs, the KV slots of rejected drafts freed, the draft extend's graph and inputs
SPECULATIVE_REPLACES = ("prepare_for_decode", "sampler")
SPECULATIVE_LAUNCHES = {
    "draft": 14,                   # draft inputs, replay_prepare and replay, top-k select
    "build_tree": 8,               # tree mask, positions, retrieve indices (chain: topk 1)
    "verify": 18,                  # verify inputs, acceptance, accepted ids and lengths read back
    "free_rejected": 4,            # rejected drafts' KV slots
    "draft_extend": 14,            # draft extend inputs, replay_prepare and replay
}
# host time per decoding request of one step's loop bodies (module doc), µs, measured on our VM by
# benchmarks/spec_request_host.py (Python 3.11.7, torch 2.13 CPU; the largest over 1-3 accepted)
REQUEST_HOST_US = {
    "result": 2.1,                 # process_batch_result_decode's loop (any exposed decode step)
    "stream": 1.4,                 # stream_output_generation's loop and the pickled send's share
    "verify": 3.9,                 # EagleVerifyInput.verify's loop and the cycle's comprehensions
}
SPECULATIVE_REQUEST_PARTS = ("result", "stream", "verify")
# of the launches above, the small uploads (`torch.tensor(ints, device="cuda")`) and the read-backs
# (`.tolist()`, `.item()`): each priced at the GPU host's time of that very call (module doc)
UPLOADS = {"mlp_sync_batch": 1, "forward_batch_init": 2}         # batch info, DP token counts
READBACKS = {"mlp_sync_batch": 1, "result_readback": 1, "verify": 2}   # ids and lengths
# host work issued after a graph's replay and before the loop's next read-back (module doc):
# the plain step's under the target's graph, the cycle's under its draft and draft-extend graphs
GRAPH_WINDOWS = {
    "target": {"launches": ("sampler",)},
    "draft": {"launches": ("build_tree",)},
    "extend": {"gloo": ("broadcast", "all_gather"), "requests": ("result", "stream")},
}
DECODE_REQUEST_PARTS = ("result", "stream")
DEFAULT_LAUNCH_US = 10.0           # no host record: a PyTorch eager op's dispatch on a host CPU
# the closing part of `any/serving_host`'s note `epsim.calibrate.serving_host` writes with the
# loop-ops record: its launches, host, date and path, named as `launch_us`'s source
LOOP_NOTE = "scheduler loop launches: "
SYNC_INFO_BYTES = 8 * 10           # one DP rank's batch info: ~10 int64 (MLPSyncBatchInfo)
# messages in series of one gloo collective over n ranks (PyTorch's ProcessGroupGloo runs gloo's
# algorithms): binomial-tree broadcast, ring all-gather, ring all-reduce (reduce-scatter, gather)
GLOO_HOPS = {
    "broadcast": lambda n: math.ceil(math.log2(n)) if n > 1 else 0,
    "all_gather": lambda n: n - 1,
    "all_reduce": lambda n: 2 * (n - 1),
}


@dataclass(frozen=True)
class SchedulerHost:
    """What one scheduler step's exposed host time is made of (module doc).

    Attributes:
        exposed: the loop is SGLang's normal one (overlap scheduling disabled, or speculative
            decoding); False: the host work overlaps the forward and adds nothing.
        launches: eager launches and read-backs per step outside the CUDA graph.
        launch_us: host time of one eager op (`any/serving_host` `loop_launch_us`, else
            `any/block_ops/host` per launch, else the default).
        gather_us: the DP attention all-gather of the batch info over NCCL (0 without DP
            attention, or where it runs over gloo and counts in `gloo_collectives`).
        source: where `launch_us` came from.
        gloo_collectives: (name, times per step) of the gloo (CPU group) collectives, by
            `GLOO_HOPS` name, each over all the TP group's ranks.
        gloo_ranks: ranks of the TP group the gloo collectives span.
        gloo_each_us: (name, µs of one) of each collective in `gloo_collectives`, over
            `gloo_ranks` (`gloo_collective_us`).
        gloo_source: where those came from.
        uploads, upload_us: of `launches`, the small uploads, and the host time of one.
        readbacks, readback_us: of `launches`, the read-backs, and the host part of one.
        request_us: host time per decoding request of a step (`REQUEST_HOST_US` summed over
            the step's parts; 0: not priced, the speculative draft's own forwards).
        draft_window_us: host time a speculative cycle issues under its draft graph (µs).
        extend_window_us, extend_window_request_us: host time a speculative cycle runs under
            its draft extend's graph (µs), and per decoding request (µs).
    """

    exposed: bool
    launches: int
    launch_us: float
    gather_us: float
    source: str
    gloo_collectives: tuple[tuple[str, float], ...] = ()
    gloo_ranks: int = 1
    gloo_each_us: tuple[tuple[str, float], ...] = ()
    gloo_source: str = ""
    uploads: int = 0
    upload_us: float = 0.0
    readbacks: int = 0
    readback_us: float = 0.0
    request_us: float = 0.0
    draft_window_us: float = 0.0
    extend_window_us: float = 0.0
    extend_window_request_us: float = 0.0

    @property
    def gloo_messages(self) -> float:
        """Gloo messages in series per step (on average), over all its gloo collectives."""
        return sum(GLOO_HOPS[c](self.gloo_ranks) * times for c, times in self.gloo_collectives)

    def gloo_part_us(self, name: str) -> float:
        """Host time a step spends in its gloo collective `name` (µs; 0 if it has none)."""
        one = dict(self.gloo_each_us).get(name, 0.0)
        return sum(times * one for c, times in self.gloo_collectives if c == name)

    @property
    def gloo_us(self) -> float:
        """Host time of the step's gloo collectives (µs)."""
        return sum(self.gloo_part_us(c) for c, _ in self.gloo_collectives)

    @property
    def launches_us(self) -> float:
        """Host time of the step's eager launches, uploads and read-backs (µs)."""
        ops = self.launches - self.uploads - self.readbacks
        return ops * self.launch_us + self.uploads * self.upload_us + self.readbacks * self.readback_us

    @property
    def step_us(self) -> float:
        """Host time a step adds to the forward (µs)."""
        if not self.exposed:
            return 0.0
        return self.launches_us + self.gather_us + self.gloo_us

    def requests_us(self, requests: float) -> float:
        """Host time the loop's per-request Python adds to a step of `requests` decoding
        requests on the slowest scheduler (µs): `requests x request_us`, 0 when the loop
        overlaps the forward."""
        if not self.exposed:
            return 0.0
        return requests * self.request_us

    def hidden_us(self, draft_us, extend_us, requests):
        """Host time of a speculative cycle that runs under its draft's graphs (µs), priced in
        `step_us` and `requests_us` but not exposed: `min(draft window, draft_us) + min(extend
        window + requests x its per-request part, extend_us)` (module doc).

        Args:
            draft_us: float or [cycles] float64, the draft decode forwards' GPU time (µs).
            extend_us: float or [cycles] float64, the draft extend's GPU time (µs).
            requests: decoding requests of the slowest scheduler.
        """
        if not self.exposed:
            return 0.0 * extend_us
        window_us = self.extend_window_us + requests * self.extend_window_request_us
        return np.minimum(self.draft_window_us, draft_us) + np.minimum(window_us, extend_us)


def overlap_disabled(deployment) -> bool:
    """Whether SGLang runs `event_loop_normal`: `--disable-overlap-schedule`, or a speculative
    algorithm (its v1 worker disables overlap scheduling)."""
    return deployment.disable_overlap_schedule or deployment.speculative_algorithm is not None


def scheduler_host(params) -> SchedulerHost:
    """The exposed host time per step of a deployment priced with `params` (`CostParams`)."""
    d = params.deployment
    spec = d.speculative_algorithm is not None
    names = list(DECODE_LAUNCHES)
    if spec:
        names = [k for k in names if k not in SPECULATIVE_REPLACES] + list(SPECULATIVE_LAUNCHES)
    else:                     # issued under the target's graph (GRAPH_WINDOWS)
        names = [k for k in names if k not in GRAPH_WINDOWS["target"]["launches"]]
    count = sum({**DECODE_LAUNCHES, **SPECULATIVE_LAUNCHES}[k] for k in names)
    block = params.eager.block_ops.timing
    serving = serving_host_params()
    if "loop_launch_us" in serving:
        launch_us, source = serving["loop_launch_us"], loop_launch_source()
    elif block.host_us > 0:
        launch_us = block.host_us / launches(BLOCK_OPS_PARTS)
        source = "any/block_ops/host per launch"
    else:
        launch_us, source = DEFAULT_LAUNCH_US, "default"
    upload_us = serving.get("h2d_tensor_us", launch_us)
    readback_us = serving.get("readback_us", launch_us)
    par, tp = params.parallel, params.tp_collectives
    gather, gloo = 0.0, {}
    if par.tp_size > 1:       # recv_requests: the (control) requests, every recv interval
        gloo["broadcast"] = 1.0 / (d.scheduler_recv_interval or 1)   # decode weighs 1
    if par.dp_size > 1:
        if d.mlp_sync_group == "cpu":
            gloo["all_gather"] = 1.0               # prepare_mlp_sync_batch over gloo
        else:
            nodes = -(-par.tp_size // tp.gpus_per_node)
            gather = float(ring_us(SYNC_INFO_BYTES * par.dp_size, par.dp_size, nodes,
                                   tp.allreduce["nccl"], passes=1)) + tp.host_us
        if spec and d.mlp_sync_group == "cpu":
            # check_forward_draft_extend_after_decode: SGLang of mid-July 2025 and before
            # (0.4.9.post2); sglang#8276 (2025-07-23) skips it under DP attention (0.5.x)
            gloo["all_reduce"] = 1.0
    priced = {c: gloo_collective_us(serving, c, par.tp_size, launch_us) for c in gloo}
    parts = DECODE_REQUEST_PARTS if not spec else SPECULATIVE_REQUEST_PARTS
    windows = {}
    if spec:
        draft, extend = GRAPH_WINDOWS["draft"], GRAPH_WINDOWS["extend"]
        windows = {
            "draft_window_us": launch_us * sum(SPECULATIVE_LAUNCHES[k]
                                               for k in draft["launches"]),
            "extend_window_us": sum(priced[c][0] * times for c, times in gloo.items()
                                    if c in extend["gloo"]),
            "extend_window_request_us": sum(REQUEST_HOST_US[k] for k in extend["requests"])}
    return SchedulerHost(overlap_disabled(d), count, launch_us, gather, source,
                         tuple(gloo.items()), par.tp_size,
                         tuple((c, us) for c, (us, _) in priced.items()),
                         "; ".join(f"{c}: {where}" for c, (_, where) in priced.items()),
                         sum(UPLOADS.get(k, 0) for k in names), upload_us,
                         sum(READBACKS.get(k, 0) for k in names), readback_us,
                         sum(REQUEST_HOST_US[k] for k in parts), **windows)


@lru_cache(maxsize=1)
def _serving_host() -> Component | None:
    """`any/serving_host` of the shipped profile, read once, as `shipped_host_params` is (every
    cost model asks for it)."""
    return Profile.load(default_profile_path()).component("any", "serving_host")


def serving_host_params() -> dict[str, float]:
    """`any/serving_host` of the shipped profile (a GPU serving host's CPU-side figures,
    `epsim.calibrate.serving_host`): host times, whatever GPU a scenario names; {} without it."""
    comp = _serving_host()
    return dict(comp.params) if comp else {}


def loop_launch_source() -> str:
    """Where `loop_launch_us` comes from: the component and its loop-ops record (`LOOP_NOTE`'s
    part of its note: launches, host, date, path)."""
    comp = _serving_host()
    where = comp.note.split(LOOP_NOTE, 1)[1] if comp and LOOP_NOTE in comp.note else ""
    return "any/serving_host loop_launch_us" + (f": {where}" if where else "")


def gloo_collective_us(serving: dict[str, float], name: str, ranks: int,
                       fallback_us: float) -> tuple[float, str]:
    """One gloo collective `name` (`GLOO_HOPS`) over `ranks` ranks (µs), and where its price
    comes from: the GPU host's median of that collective at that rank count; at a count it did
    not time, its time per message (median / `GLOO_HOPS` messages) interpolated in log2(ranks)
    between the nearest timed counts, held at the nearest beyond them (extrapolated), times the
    messages at `ranks`. Without `any/serving_host`: `GLOO_HOPS` messages at the VM's
    `any/rebalance_host` `gloo_message` (`gloo_message_us`)."""
    hops = GLOO_HOPS[name](ranks)
    if hops == 0:
        return 0.0, "one rank"
    timed = sorted(int(k.split("_")[-2]) for k in serving
                   if k.startswith(f"gloo_{name}_") and k.split("_")[-2].isdigit())
    if not timed:
        return hops * gloo_message_us(fallback_us), "VM: any/rebalance_host gloo_message x messages"
    if ranks in timed:
        return serving[f"gloo_{name}_{ranks}_us"], f"GPU host, {ranks} local ranks"
    per_message = [serving[f"gloo_{name}_{n}_us"] / GLOO_HOPS[name](n) for n in timed]
    us = hops * float(np.interp(math.log2(ranks), np.log2(timed), per_message))
    where = ("interpolated" if timed[0] < ranks < timed[-1] else "extrapolated")
    return us, f"GPU host, per message {where} from {timed} local ranks to {ranks}"


def gloo_message_us(fallback_us: float) -> float:
    """Host time of one gloo message (µs): the shipped profile's `gloo_message` measurement,
    else `fallback_us` (one eager host op)."""
    params = shipped_host_params()
    if "gloo_message_us_per_unit" not in params:
        return fallback_us
    return params.get("gloo_message_base_us", 0.0) + params["gloo_message_us_per_unit"]
