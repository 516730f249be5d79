"""epsim's prediction of one silicon row: its instances simulated until TTFT and TPOT agree with
the closed loop that measured them.

A row's clients cycle through TTFT + (OSL - 1) x TPOT per request (`sglang.bench_serving`'s
definitions, docs/silicon.md), so each side of a P/D pair depends on the other's latency. Pass 0
runs the TPOT side (decode, or the agg instance) at its clients' batch to learn the cycle; then
`ROUNDS` rounds run the prefill and then the decode instance of a P/D pair, each with the latest
figures of the other (its clients wait out the rest of the cycle: think time, a prefill's
clients each request's own decode, TPOT x its drawn output tokens after the first; the decode of
a round before the last over a shorter window, `EARLY_DECODE_CYCLES`), one round an agg
instance. An agg or prefill instance runs one benchmark run as the harness does (`closed_round`:
every client sends at t=0 into the idle instance, K requests each, all measured).
A P/D request's TTFT is the prefill instance's plus the handoff around it
(`epsim.validate.silicon.handoff`: the decode server's bootstrap, the exposed KV transfer, the
decode instance's own arrival-to-first-token), so a client is away from the decode instance for
all of it but the last term: the decode instance runs the clients it holds on average (Little's
law, `closed_round`), fewer than the clients.
Under `approximate`, closed-loop clients become Poisson arrivals at the loop's rate (Little's
law: clients / cycle) with the expected decoding requests running from t=0. Predicted TTFT and
TPOT are the benchmark's: the mean TTFT so composed and the decode (or agg) run's mean
per-request TPOT.
"""

from __future__ import annotations

import copy
import time
import traceback
import warnings
from math import ceil
from pathlib import Path

from epsim.default_profile import versioned_profile
from epsim.errors import EpsimError
from epsim.report import summarize
from epsim.sim import Simulation
from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon.handoff import handoff
from epsim.validate.silicon.mapping import Instance, RowPlan
from epsim.validate.silicon.memo import Memo

ROUNDS = 2                       # a P/D pair's rounds after pass 0 (each: every instance once)
PASS0_WINDOW_S = (1.0, 3.0)      # pass 0: warm-up and duration (s), requests decoding from t=0
PROTOCOL_REQUESTS = (2, 10)      # a steady window (a decode instance; a row of unknown harness): cycles
# ... of which the measured part stops once it holds this many requests: the mean TPOT of 2,000
# requests is as settled as of 10 x 8,192 (against 10 cycles: the 8192-client GB300 row `_772`
# TPOT -0.004 %, TTFT -0.0001 %, CPU 48 -> 12 s; the fixture's 1024-client cfg505 TPOT +0.04 %,
# 26 -> 10 s), and a decode round of thousands of clients costs its steps' pricing
MEASURED_REQUESTS = 2000
# A P/D pair's rounds before the last run the decode instance over a shorter window (warm-up and
# measured cycles, at most): their figures only feed the next round's prefill (its clients' think
# time) and the handoff around it, and the last round measures the decode over the full window
# (`PROTOCOL_REQUESTS`). The decode rounds were nearly all of a P/D row's time, the first half of
# it spent on figures the last round replaces (each row's change: benchmarks/results/
# silicon_speed.md)
EARLY_DECODE_CYCLES = (1, 2)
# One benchmark run's requests per client (`--num-prompts` / `--max-concurrency`), run after a
# warm-up that has finished before it starts (`benchmark_serving.py` gathers the warm-up tasks,
# then creates every request of the run at once behind a semaphore of N): InferenceX's
# single-node harness runs 10 N (`benchmarks/benchmark_lib.sh` `run_benchmark_serving`, the
# `dsr1_*` scripts' `--num-prompts $((CONC * 10))`); the Dynamo P/D harnesses 5 N (srt-slurm's
# `sa-bench/bench.sh`, ai-dynamo's `slurm_jobs/scripts/vllm/bench.sh`: `concurrency * 5`).
RUN_REQUESTS_PER_CLIENT = {"agg": 10, "prefill": 5}
RUN_SPAN_CYCLES = 2.0            # a benchmark run's simulated span: this many x its cycles, at first
RUN_SPAN_TRIES = 4               # ... doubled until every request has its first token
OPEN_MIN_SAMPLES = 16            # open loop: arrivals the window holds at least
DECODE_WINDOW_S = 10.0           # open loop: a decode instance's window (TPOT is steady at once)
SLOW_RATE_PER_S = 1e-3           # pass 0: arrivals slow enough that none lands in its window


def _simulate(data: dict, instance: Instance) -> dict:
    """The summary (`epsim.report.summarize`) of one scenario mapping of `instance`
    (`_simulation`'s run)."""
    return summarize(_simulation(data, instance).run())


def _simulation(data: dict, instance: Instance) -> Simulation:
    """A run of one scenario mapping of `instance`, priced by the profile it names, else its
    GPU's default with the instance's version part (`Instance.profile_part`; a named profile is
    used as it is), its MoE draws from coarse pools (`Simulation`'s `coarse_pools`, for a run of
    hundreds of closed loops: each row's change against exact pools, within 0.2 %, in
    benchmarks/results/silicon_speed.md)."""
    profile = versioned_profile(data["cluster"]["gpu"], instance.profile_part) \
        if instance.profile_part and not data.get("profile") else None
    return Simulation(scenario_from_dict(copy.deepcopy(data), where="silicon row"),
                      profile=profile, coarse_pools=True)


def _mean(summary: dict, name: str) -> float | None:
    return summary[name]["mean"]


def _per_rank(requests: float, instance: Instance) -> int:
    return max(ceil(requests / instance.dp_ranks - 1e-9), 0)


def _with(instance: Instance, arrivals: dict, window: tuple[float, float], running: int = 0) -> dict:
    data = copy.deepcopy(instance.data)
    if instance.role == "decode":
        # a decode instance's arrivals are transferred requests, which the decode loop polls
        # every iteration (`process_decode_queue`): its receive interval gates the requests'
        # bootstrap before the prefill instead (`epsim.validate.silicon.handoff`)
        data["deployment"].pop("scheduler_recv_interval", None)
    if data["deployment"].get("server_tokenize") == "parallel":
        # each request's own tokenisation (Dynamo's frontend), before the prefill server sees
        # it: a P/D pair's TTFT term (`epsim.validate.silicon.handoff`), not a shift of the
        # simulated arrivals
        data["deployment"]["server_tokenize"] = "off"
    warmup_s, duration_s = window
    data["workload"].update(arrivals=arrivals, warmup_s=warmup_s, duration_s=duration_s,
                            initial_running_per_rank=running)
    return data


def pass0(instance: Instance, warmup_s: float = PASS0_WINDOW_S[0]) -> dict:
    """The TPOT side with its clients' batch decoding from t=0 and no arrivals in the window
    (from `warmup_s` to the end of `PASS0_WINDOW_S`)."""
    slow = {"kind": "poisson", "rate_per_s": SLOW_RATE_PER_S}
    return _with(instance, slow, (warmup_s, PASS0_WINDOW_S[1]),
                 _per_rank(instance.clients, instance))


def closed_round(instance: Instance, ttft_s: float, tpot_s: float, osl: int,
                 outside_s: float = 0.0, span: float = 1.0, early: bool = False) -> dict:
    """One instance under its closed-loop clients; a P/D side's clients wait out the rest of the
    cycle: `outside_s` is the part of the TTFT spent outside this instance (a prefill's: the
    handoff; a decode's: everything before the KV has arrived), and a prefill's clients each
    request's own decode besides, `tpot_s` x its output tokens after the first
    (`think_per_output_token_s`: the request's drawn length, not `osl`).

    An agg or prefill instance of an InferenceX row (`Instance.harness`), whose queue the
    clients' sends reach, runs one benchmark run:
    `RUN_REQUESTS_PER_CLIENT` requests per client in all, every client sending its first at t=0
    into the idle instance, all of them measured (the benchmark's mean takes every request of
    the run: the first wave queues behind the whole burst, the last runs with fewer clients),
    over `span` x `RUN_SPAN_CYCLES` x the run's cycles (`couple` widens it until each request
    has its first token).

    A decode instance's arrivals are its prefill's completions, which the prefill's forwards
    space out, not the clients' sends: its clients, all thinking the same `outside_s` from one
    t=0, would stay in lockstep waves (every client decoding, then none) that the benchmark
    never has. So a decode instance runs the clients its decode holds on average, Little's
    law's clients x (cycle - outside) / cycle, each sending again as its request ends (think
    0), started part-way through their requests (as many per rank as divide evenly): the
    decoding population of the measured loop, at a steady batch. `early`: a round before a P/D
    pair's last, whose decode runs `EARLY_DECODE_CYCLES`' shorter window.
    """
    cycle_s = ttft_s + (osl - 1) * tpot_s
    clients = instance.routed_clients or instance.clients
    arrivals = {"kind": "concurrency", "clients": clients}
    warm, measured = EARLY_DECODE_CYCLES if early and instance.role == "decode" \
        else PROTOCOL_REQUESTS
    measured = min(max(ceil(MEASURED_REQUESTS / max(clients, 1)), 1), measured)
    window = (warm * cycle_s, (warm + measured) * cycle_s)
    if instance.role == "prefill":
        # each client waits out its own request's decode, TPOT x its drawn output tokens after
        # the first: outputs uniform in [0.8 L, L] (an InferenceX harness) spread the clients
        # that one constant wait would keep in lockstep waves, one prefill batch each
        arrivals.update(think_time_s=outside_s, think_per_output_token_s=tpot_s)
    if instance.harness and instance.role in RUN_REQUESTS_PER_CLIENT:
        per_client = instance.requests_per_client or RUN_REQUESTS_PER_CLIENT[instance.role]
        arrivals["num_requests"] = per_client * clients
        return _with(instance, arrivals, (0.0, span * RUN_SPAN_CYCLES * per_client * cycle_s))
    if instance.role == "decode":
        share = decoding_share(cycle_s, outside_s)
        arrivals["clients"] = max(round(clients * share), 1)
        running = int(max(round(instance.clients * share), 1) // instance.dp_ranks)
        return _with(instance, arrivals, window, running)
    return _with(instance, arrivals, window)


def decoding_share(cycle_s: float, outside_s: float) -> float:
    """The share of a P/D client's cycle its request spends in the decode instance (Little's
    law: the decode instance holds that share of the clients on average)."""
    if cycle_s <= 0:
        return 1.0
    return min(max((cycle_s - outside_s) / cycle_s, 0.0), 1.0)


def open_round(instance: Instance, ttft_s: float, tpot_s: float, osl: int,
               outside_s: float = 0.0) -> dict:
    """One instance under Poisson arrivals at its clients' rate, clients / cycle (Little's law),
    with the expected decoding requests running from t=0."""
    decode_s = (osl - 1) * tpot_s
    rate = instance.clients / (ttft_s + decode_s)                 # one instance's
    routed = (instance.routed_clients or instance.clients) / (ttft_s + decode_s)
    running = 0 if instance.role == "prefill" else _per_rank(rate * decode_s, instance)
    window = DECODE_WINDOW_S if instance.role == "decode" else max(OPEN_MIN_SAMPLES / rate,
                                                                   DECODE_WINDOW_S)
    return _with(instance, {"kind": "poisson", "rate_per_s": routed}, (0.25 * window, 1.25 * window),
                 running)


def _shares(summary: dict) -> dict:
    """Shares of step time the profile's components price as fitted / extrapolated / datasheet."""
    prov = summary.get("provenance") or {}
    return {k: round(float(prov[f"{k}_share"]), 4) for k in ("measured", "extrapolated", "datasheet")
            if f"{k}_share" in prov}


def predict(plan: RowPlan, memo: Memo | None = None) -> dict:
    """epsim's entry for a row: predicted TTFT and TPOT (ms) with provenance, or why not
    (`memo`: instances simulated before in this run give their kept answer,
    `epsim.validate.silicon.memo`: the same entry).

    Returns:
        `{"status": "predicted" | "approximated" | "cannot_express" | "failed", "ttft_ms",
        "tpot_ms", "shares" {role: {measured, extrapolated, datasheet}}, "wall_s", "reasons",
        "missing" [{path, value, feature, issue}], "approximations", "assumptions", "notes"}`.
    """
    entry = {"ttft_ms": None, "tpot_ms": None, "shares": {}, "wall_s": 0.0,
             "reasons": plan.reasons, "approximations": list(plan.approximations),
             "assumptions": list(plan.assumptions), "reason_class": plan.error_class,
             "missing": [{"path": m.need.path, "value": m.need.shown or m.need.value,
                          "feature": m.need.feature, "issue": m.need.issue} for m in plan.missing]}
    if not plan.expressible:
        return {"status": "cannot_express", **entry}
    start = time.perf_counter()
    kept_notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, kept_notes = _predict(plan, memo)
        except EpsimError as exc:
            result = {"status": "failed", "reasons": [" ".join(str(exc).split())]}
        except MemoryError:
            result = {"status": "failed", "reasons": ["ran out of memory simulating this row"]}
        except Exception as exc:        # a bug: this row fails with where, the run goes on
            result = {"status": "failed", "reasons": [f"internal error: {_where(exc)}"]}
    entry.update(result, wall_s=round(time.perf_counter() - start, 3),
                 notes=sorted({str(w.message) for w in caught} | set(kept_notes)))
    return entry


def _where(exc: BaseException) -> str:
    """`Type: message at file:line` of the innermost frame in epsim (a one-line bug report)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "epsim" in Path(f.filename).parts]
    at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}{at}"


def failed_entry(exc: BaseException) -> dict:
    """The entry of a row whose mapping raised `exc` (a bug, not the row's input)."""
    return {"status": "failed", "ttft_ms": None, "tpot_ms": None, "shares": {}, "wall_s": 0.0,
            "reasons": [f"internal error: {_where(exc)}"], "approximations": [], "assumptions": [],
            "reason_class": None, "missing": [], "notes": []}


def _predict(plan: RowPlan, memo: Memo | None) -> tuple[dict, list[str]]:
    """The row's result and the warnings its simulations raised where `memo` kept them (else
    they reach `predict`'s catch as raised)."""
    if memo is None:
        out, notes = couple(plan.instances, plan.row.osl), []
    else:
        out, notes = memo.couple(couple, plan.instances, plan.row.osl)
    if out.get("status") == "failed":
        return out, notes
    return {"status": "approximated" if plan.approximations else "predicted", **out}, notes


def _simulate_round(make, instance: Instance, ttft_s: float, tpot_s: float, osl: int,
                    outside_s: float, early: bool = False) -> dict:
    """The summary of one instance's round (`make`: `closed_round` or `open_round`); a
    benchmark run's span doubled until every one of its requests has its first token (its
    cycle is the last round's, short of the run's own where the first wave queues), each
    longer span gone on to from where the shorter stopped (`Simulation.extend`: the bits of
    running it from t=0; a high-concurrency agg row ran its first half twice and its first
    quarter three times). `early`: a round before a P/D pair's last (`closed_round`'s)."""
    if make is not closed_round:
        return _simulate(make(instance, ttft_s, tpot_s, osl, outside_s), instance)
    data = closed_round(instance, ttft_s, tpot_s, osl, outside_s, 1.0, early)
    total = data["workload"]["arrivals"].get("num_requests")
    if total is None:
        return _simulate(data, instance)
    shared = -(-total // data["deployment"].get("num_instances", 1))
    run = _simulation(data, instance)
    summary, span = summarize(run.run()), 1.0
    for _ in range(RUN_SPAN_TRIES - 1):
        if summary["ttft_ms"]["count"] >= shared:
            break
        span *= 2
        longer = closed_round(instance, ttft_s, tpot_s, osl, outside_s, span, early)
        summary = summarize(run.extend(longer["workload"]["duration_s"]))
    return summary


def couple(instances: tuple[Instance, ...] | list[Instance], osl: int) -> dict:
    """The benchmark's TTFT and TPOT (ms) of one agg instance or a [prefill, decode] pair under
    closed-loop clients (module doc).

    Returns:
        `{"ttft_ms", "tpot_ms", "shares" {role: ...}, "ttft_terms" (a pair: the TTFT's parts,
        `epsim.validate.silicon.handoff`)}`, or `{"status": "failed", "reasons"}`.
    """
    tpot_side = next(i for i in instances if i.role in ("agg", "decode"))
    first = _simulate(pass0(tpot_side), tpot_side)
    if _mean(first, "tpot_ms") is None:
        # the batch's requests start part-way through their outputs: a few fast-finishing ones
        # (one client per rank) can all end within the warm-up; then from t=0
        first = _simulate(pass0(tpot_side, warmup_s=0.0), tpot_side)
    tpot_ms, ttft_ms = _mean(first, "tpot_ms"), 0.0
    if tpot_ms is None:
        return {"status": "failed", "reasons": ["pass 0 produced no TPOT: "
                                                 + first["latency_notes"].get("tpot_ms", "")]}
    shares, extra = {}, {}
    prefill_ms = first_ms = around_ms = 0.0
    # an agg instance's clients wait on no other side: one closed-loop run is the answer (a
    # second would only size its window from the first's cycle); a P/D pair's sides agree in
    # rounds, each side run with the other's latest figures
    rounds = 1 if [i.role for i in instances] == ["agg"] else ROUNDS
    for round_index in range(rounds):
        for instance in instances:
            make = closed_round if instance.closed_loop else open_round
            outside_ms = {"prefill": ttft_ms - prefill_ms,
                          "decode": ttft_ms - first_ms}.get(instance.role, 0.0)
            summary = _simulate_round(make, instance, ttft_ms * 1e-3, tpot_ms * 1e-3, osl,
                                      max(outside_ms, 0.0) * 1e-3, round_index < rounds - 1)
            shares[instance.role] = _shares(summary)
            ttft = _mean(summary, "ttft_ms")
            tpot = _mean(summary, "tpot_ms") if instance.role != "prefill" else tpot_ms
            if ttft is None or tpot is None:
                name = "ttft_ms" if ttft is None else "tpot_ms"
                return {"status": "failed", "reasons": [f"{instance.role}: no {name} sample: "
                                                         + summary["latency_notes"].get(name, "")]}
            if instance.role == "agg":
                ttft_ms, tpot_ms = ttft, tpot
            elif instance.role == "prefill":
                prefill_ms = ttft
                ttft_ms = prefill_ms + around_ms + first_ms
            else:
                prefill_side = scenario_from_dict(copy.deepcopy(instances[0].data),
                                                  where="silicon row")
                # the decoding population's sends land on step ends; a transfer ends anywhere
                # within a step, and waits the rest of it before the poll (half a step)
                step_ms = summary["step_ms"]["mean"]
                hand = handoff(prefill_side, step_ms, ttft + 0.5 * step_ms,
                               instance.data["deployment"].get("scheduler_recv_interval") or 1,
                               summary["requests_per_s"], min(summary["busy_frac"], 1.0))
                tpot_ms, first_ms, around_ms = tpot, hand.first_token_ms, hand.around_prefill_ms
                ttft_ms = hand.ttft_ms(prefill_ms)
                extra = {"ttft_terms": {"prefill_ms": round(prefill_ms, 4),
                                        "bootstrap_ms": round(hand.bootstrap_ms, 4),
                                        "tokenize_ms": round(hand.tokenize_ms, 4),
                                        "transfer_ms": round(hand.transfer_ms, 4),
                                        "first_token_ms": round(hand.first_token_ms, 4)}}
    return {"ttft_ms": round(ttft_ms, 4), "tpot_ms": round(tpot_ms, 4), "shares": shares, **extra}
