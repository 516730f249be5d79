"""When the scheduler takes in new requests: SGLang's `--scheduler-recv-interval`.

SGLang's scheduler loop receives the tokenizer's requests at the top of every iteration
(`Scheduler.recv_requests`), unless `scheduler_recv_interval` N > 1: then a `SchedulerRecvSkipper`
(python/sglang/srt/managers/scheduler_recv_skipper.py, v0.5.x) lets it receive only when a counter
reaches N. Each iteration adds the weight of the last batch's forward mode -- 1 after a decode or
target-verify batch, 1 after no batch, 1000 after any other (an extend or mixed batch) -- and a
receive resets the counter to 0 (the SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_* defaults of
`sglang.srt.environ`). So a request sent while the instance decodes waits up to N decode steps
before any rank can admit it, and the requests sent meanwhile are received, and prefilled,
together; after a prefill step the next iteration receives. An idle loop (no batch) spins through
its iterations in microseconds, so an idle instance receives at once.

InferenceX's single-node SGLang recipes run N = 10, or 30 from 16 clients on (e.g.
`benchmarks/single_node/dsr1_fp4_b200.sh`), which at a 20 ms decode step holds a new request
~0.3 s on average before its prefill: a large part of the agg rows' TTFT (docs/model.md, §7).

Overlap scheduling (SGLang's default, `Scheduler.event_loop_overlap` in
python/sglang/srt/managers/scheduler.py, 0.5.5-0.5.10 alike) forms each batch one step ahead:
an iteration receives, forms batch i and launches it behind batch i-1, and only then waits for
batch i-1 to finish and sends its tokens (`pop_and_process`). The iteration that forms batch i
thus starts as soon as batch i-2's results are out, i.e. as batch i-1 starts on the GPU, so a
batch takes in only what arrived before the step ahead of it started (`forms_ahead`): a request
sent while the instance decodes waits out the step in flight and then one more before its
prefill runs. Its first token leaves as its prefill ends (the next iteration launched its batch
before waiting on this one), so the output side adds no step. An idle loop (no batch in flight)
receives and launches at once. `event_loop_normal` (`--disable-overlap-schedule`, and the v1
speculative worker, `epsim.cost.scheduler_host.overlap_disabled`) forms each batch after the
last one ended.

A P/D prefill server runs the same order by default (`event_loop_overlap_disagg_prefill` in
python/sglang/srt/disaggregation/prefill.py, chosen by `run_scheduler_process` whenever overlap
is on, 0.5.3-0.5.9 alike): receive, move the bootstrapped requests to the waiting queue, form
and launch batch i, then wait for batch i-1 and send its KV (`process_batch_result_disagg_prefill`),
so its batches form ahead too and each one's KV leaves as its forward ends. A P/D decode server's
`event_loop_overlap_disagg_decode` also polls the transfers a step ahead, but a request it finds
becomes a prebuilt batch (no forward) whose result -- the request's first token, streamed by
`process_batch_result_prebuilt` -- is processed as the step after the one in flight ends, the
request's first decode step starting then: epsim's decode instance, which takes a transferred
request into the first step that starts after it arrived and gives its first token as that
step ends, lands every token at the same time, so it forms at once (`forms_ahead` is False).
"""

from __future__ import annotations

from epsim.cost.scheduler_host import overlap_disabled

# the forward modes' weights (SGLang's defaults); any other mode weighs DEFAULT_WEIGHT
DEFAULT_WEIGHT = 1000
WEIGHTS = {"decode": 1, None: 1}        # a verify step is a decode step here; None: no batch


def forms_ahead(deployment) -> bool:
    """Whether a step takes in only the arrivals before the step ahead of it started: SGLang's
    overlap loop on an aggregated instance or a P/D prefill server (module doc)."""
    return deployment.disaggregation_mode in ("null", "prefill") and not overlap_disabled(deployment)


class RecvSkipper:
    """The counter of `SchedulerRecvSkipper` for one instance (every rank receives alike).

    Args:
        interval: `scheduler_recv_interval` (> 1; at 1 every iteration receives: no skipper).
    Attributes:
        counter: the weights added since the last receive.
        received_s: the time of the last receive: the arrivals up to it are the scheduler's.
        last_phase: the last planned batch's phase ("decode", "prefill") or None (no batch).
    """

    def __init__(self, interval: int):
        if interval <= 1:
            raise ValueError(f"scheduler_recv_interval ({interval}) must be > 1 for a skipper")
        self.threshold = interval
        self.counter = 0
        self.received_s = 0.0
        self.last_phase: str | None = None

    def before_step(self, now_s: float, idle: bool) -> float:
        """One scheduler iteration at `now_s` (`idle`: no request holds a slot): add the last
        batch's weight, receive if due. Returns the time up to which arrivals are received."""
        self.counter += WEIGHTS.get(self.last_phase, DEFAULT_WEIGHT)
        if idle or self.counter >= self.threshold:
            self.counter = 0
            self.received_s = now_s
        return self.received_s

    def after_plan(self, phase: str, num_tokens: float) -> None:
        """The batch the iteration formed: its phase, or none when it has no tokens."""
        self.last_phase = phase if num_tokens > 0 else None

    def steps_before_receive(self) -> int:
        """Decode iterations from now that do not receive (the next's weight is the last
        batch's, the rest 1 each): the quiet steps (`epsim.sim.quiet`) end before the receive while
        a request waits unreceived."""
        first = WEIGHTS.get(self.last_phase, DEFAULT_WEIGHT)
        if self.counter + first >= self.threshold:
            return 0
        return self.threshold - self.counter - first
