"""The all-reduce SGLang runs between tensor-parallel GPUs, by algorithm; device time.

SGLang's `tensor_model_parallel_all_reduce` takes its custom all-reduce (vLLM's kernels in
sgl-kernel) when the group is 2, 4, 6 or 8 GPUs of one host (on GB200 / GB300 racks a host is a
4-GPU tray: groups of 8 there run NCCL, as aiconfigurator-core's GB300 table shows, ~27 µs flat
at 8 GPUs) and the message fits its 8 MiB buffer (`inp_size <= self.max_size`, SGLang's
`CustomAllreduce.should_custom_ar`: 8 MiB itself runs the custom kernel, where vLLM's `<` sends it
to NCCL; AIC's SGLang 0.5.14 tables agree: their 8 MiB rows continue the one-shot's and two-shot's
line, 20.6 / 31.4 / 36.2 µs on 2 / 4 / 8 B200s, half of nccl-tests' 41.2 / 85.1 / 72.4), else
NCCL. The custom kernel is
one-shot (every GPU reads every peer's whole buffer and reduces it) on 2 GPUs, under 512 KiB
on up to 4 and under 256 KiB on up to 8, else two-shot (reduce-scatter then all-gather through
peer reads). That is the legacy kernel (generation 1, `algorithm`). From SGLang 0.5.14 on
(the first of AIC's tables to run it) CUDA runs CustomAllReduceV2 by default
(`SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2`, `sglang/jit_kernel/csrc/distributed/
custom_all_reduce_{push,pull}.cuh`; generation 2, `kernel_generation`): a 16 MiB pull buffer
(inclusive) and switch points tuned per architecture (`custom_all_reduce_v2.py`,
`THRESHOLD_2_SHOT_MAP`, inclusive): one-shot (a push below, a pull on 2 GPUs above 4 MiB) on 2
GPUs at every size, on SM100 up to 2 MiB on 4 GPUs, 1 MiB on 6, 720 KiB on 8; elsewhere (tuned
on H200) up to 384 KiB, 192 KiB, 160 KiB; two-shot above. Its two-shot is one fused pass
("fuse the reduce-scatter and broadcast"): each GPU loads its `S / n` part from every peer,
reduces it and stores the sum into every peer's buffer under the same two barriers (start, and
fenced at the end): `(n - 1) / n S` loaded and as much stored, `2 (n - 1) / n S` of remote
traffic through the same SMs and NVLink port, which AIC's tables show running at the one-shot's
rate (B200: 655-684 GB/s by that count over 4-16 MiB on 4 and 8 GPUs, its one-shot's fit 585-670;
H200: 313-320 against 325-368), so V2's fit gives both one `nvl_gbps` (`epsim.calibrate.allreduce`)
and the two-shot its own fixed cost (B200: ~12-13 µs at 4-8 GPUs where the one-shot's is ~4.5).
Under a CUDA graph its inputs are registered (`allocate_graph_capture_input`): no copy into the
IPC buffer (an eager call copies in, and a two-shot copies back out). AIC's SGLang 0.5.9 /
0.5.10 tables show the legacy kernel, 0.5.14's the V2 (its 16 MiB rows continue the custom
kernels' line; 8 B200s' 4-8 MiB two-shot runs at 2.3-2.9 µs a MiB). Labelled by the legacy
switch points, 4 B200s' 512 KiB-2 MiB one-shots (each moving `3 S`) were fitted as two-shots
(`1.5 S`), and the rate they fixed priced the real two-shots at 4-8 MiB 26-29 % too slow. With
`S` bytes on `n` GPUs:

    oneshot   t = base_us + per_peer_us * H(n - 1) + per_block_us * b(S)
                  + (n - 1) * (S, or r(S) * 288 KiB past one round) / nvl_gbps * 1e-3
    twoshot   t = base_us + per_peer_us * H(n - 1) + per_block_us * b(S)
                  + 2 (n - 1) / n * S / nvl_gbps * 1e-3       (V2: the one-shot's nvl_gbps)
    nccl      t = on the ring protocol p NCCL's tuner picks (LL, LL128, Simple; a profile
                  fitted before the picks: the smaller of its LL and Simple lines)
                  base_us_p + hop_us_p * 2 (n - 1) + 2 (n - 1) / n * S / gbps_p * 1e-3
              and, within one NVLink domain where a fit found it, NVLS:
                  nvls_base_us + S / nvls_gbps * 1e-3

The launch ramps (sgl-kernel `custom_all_reduce.cuh`, `CustomAllreduce::allreduce`): 512 threads
a block, each moving one 16-byte pack a round of its grid-stride loop, `min(36, ceil(S / (512 *
16)))` blocks, so the grid reaches its 36 blocks at 288 KiB. Below, a larger message launches
more threads (and blocks, each running its own two barriers with every peer:
`multi_gpu_barrier` indexes its flags by block): `per_block_us` for each 8 KiB block's worth of
the grid, `b(S) = min(S, 288 KiB) / 8 KiB`, not rounded up (the time grows within one block
too: 0.6 µs from 512 B to 8 KiB on H200's 8 GPUs, a warp at a time). Above, the grid is
full and every thread loops `r(S) = ceil(S / 288 KiB)` rounds; a one-shot is priced by whole
rounds read from every peer (a round's time is a full grid's, its last one too; below 288 KiB
the grid is sized to the message and its bytes are the message's). On B200, GB200 and GB300
its 2-4 MiB messages run at 1.55 µs a MiB where 1 MiB and below ran 2.0: the ramp and whole
rounds take their size hold-outs from 13-16 % to 2-9 %. The two-shot's rounds over its
`S / n` part measured no such step (whole rounds miss its hold-outs by 23-27 %): its bytes are
the message's. (Those rounds are the legacy kernel's; CustomAllReduceV2's one-shot, which AIC's
SGLang 0.5.14 tables run, has rounds of 1-2.3 MiB and is priced by its message's bytes: below.)
`per_peer_us` is the flag exchange's tail, counted by `H(n - 1) = 1 + 1/2 + ... + 1/(n - 1)`
(`barrier_peers`): a barrier exchanges flags with every peer at once, one thread a peer, and
waits for the slowest. Counted as `n - 1` exchanges in a row, a fit on 2 and 4 GPUs priced 8
B200s' one-shots 17.4 % off (log-log along the GPUs 5.8): from 4 to 8 GPUs a 512 B one-shot
gains 0.3 µs where 2 to 4 gained 0.5. Both custom kernels run two barriers
(sgl-kernel `custom_all_reduce.cuh`: start and end of a one-shot; start and, fenced, between a
two-shot's reduce-scatter and all-gather) and share the launch and those barriers, so a
two-shot's `base_us` and `per_peer_us` are the one-shot's plus its second stage's (the
all-gather's round of reads from every peer; `epsim.calibrate.allreduce` fits them together).
The NCCL ring takes
`2 (n - 1)` steps (reduce-scatter, then all-gather), each a hop's latency. NCCL's tuner picks,
per message, the (algorithm, protocol) its own latency-bandwidth model says is fastest: the
low-latency protocols (LL, LL128: small fixed cost, lower bandwidth) for small messages, Simple
(larger fixed cost, the link's bandwidth) for large ones; here the two lines `ll_` and plain,
and the time is the smaller. A ring reduce-scatter or all-gather alone is one pass: `n - 1`
steps and `(n - 1) / n * S` (`ring_us(..., passes=1)`). Across nodes the ring's bytes cross the
NIC (`rdma_gbps`). Bandwidths are bounded by the datasheet (NVLink per direction, the NIC).

A ring's Simple protocol adds one step a loop the link does not carry: each loop sends `n - 1`
chunks through NVLink and ends with a local copy of the last chunk received out of the FIFO
into the output (NCCL's `runRing`: `directRecv` for an all-gather, the all-reduce's final
`recv` alike), run by the same blocks and not overlapped with the sends. One chunk a loop of `n`
is `S / n` of the message whatever the collective, so

    simple  t = base_us + hop_us * p (n - 1) + p (n - 1) / n * S / nvl_gbps * 1e-3
                + S / n / local_gbps * 1e-3                (p: 2 an all-reduce, 1 an all-gather)

which makes the ring's bus bandwidth grow with the GPU count: AIC's tables show nccl-tests'
64-512 MiB all-gathers at 2 / 4 / 8 GPUs and its 2 / 4-GPU all-reduces all on one pair of rates
(B200: 678 GB/s a link step, 1508 the local step; H100 368 and 1036: their MAPE 7.7 / 5.8 % on
one bandwidth, 2.0 / 1.8 % on the pair), where one bandwidth prices 2 GPUs 14 % fast and 8
slow. The local rate is bounded by HBM (a copy reads and writes it: `<= hbm_gbps / 2`); it is
fitted only where the points show Simple's bandwidth (`epsim.calibrate.allreduce`), else absent
(no term), as in a profile fitted before it.

Which ring protocol runs a message is NCCL's tuner's pick, by its own latency-bandwidth model
(NCCL 2.27.3, `src/graph/tuning.cc` at tag v2.27.3-1), not the fastest line: per protocol a
latency `baseLat + nsteps * hwLat` (LL 6.6 + 0.6, LL128 14.0 + 1.9, Simple 8.4 + 3.4 µs a step
on NVLink; lines 134-147, 337-356) and a bus bandwidth from one figure, the channels' NVLink
bandwidth (`nChannels * bwIntra`, line 276; per link 20.6 GB/s on SM90, 40.0 on SM100,
`src/graph/topo.h` lines 19-21: 0.82 / 0.80 of the datasheet's NVLink, here `NVLINK_EFFICIENCY`
of it): LL half of it capped at 141 GB/s on Hopper, 282 on Blackwell (lines 165-170, 279),
LL128 0.92 of it (line 280), Simple all of it; time `lat + nsteps / n * S / busBw` (lines 320-327,
569). Its Simple latency is far below what Simple takes (AIC's B200 4-GPU all-gather: 25 -> 50
µs from 4 to 8 MiB where the tuner switches LL -> Simple, 44 -> 102 µs on 8 GPUs from 8 to 16
MiB, LL -> LL128), so a message runs the line NCCL picks even where another would be faster. A
profile fitted with the picks (`tuner_bus_gbps`, `tuner_ll_max_gbps` in the NCCL coefficients,
`epsim.calibrate.allreduce`) prices by them within one NVLink domain, each protocol on its line:
LL the `ll_` line, Simple the plain one, LL128 its own fixed costs (`ll128_base_us`,
`ll128_hop_us`) and Simple's link rate times NCCL's 0.92 (LL128 lines carry 120 data bytes in
128); across domains, and for a profile without them, the faster of the LL and Simple lines.

NVLS (NVLink SHARP) is the all-reduce NCCL runs on large messages where the NVSwitch reduces:
each GPU sends its `S` bytes into the switch once and receives the reduced `S` once, whatever
`n`, against a ring's `2 (n - 1) / n S`, so its bus bandwidth can pass the link's. AIC's H200
table shows it: 256-512 MiB on 8 GPUs run at 445-460 GB/s of ring bus bandwidth, above
NVLink's 450 per direction, which no ring reaches. Its line has a larger fixed cost (~60 µs on
Hopper) and no per-hop term. The datasheet has no figure for it: a cluster without a fitted
`nvls_gbps` prices the ring alone.

The launch ramp and whole rounds below are the legacy kernel's (36 blocks). V2 launches one
block an SM (`get_custom_all_reduce_cls`: `MAX_CTA = multi_processor_count`, sglang
`python/sglang/jit_kernel/all_reduce.py`): its push one-shot always that grid, 128-1024 threads a
block by the message (`CustomAllReducePush::all_reduce`, `custom_all_reduce_push.cuh`: the
smallest of 128 / 256 / 512 covering it in one pass, else 1024), its pull kernels up to that
grid of 512 threads (`CustomAllReducePull::all_reduce`: `min(needed_blocks, m_num_cta)`,
`m_cta_size` 512), each thread one 16-byte pack a round. So a V2 round is `SMs x threads x 16`
bytes, 1.03-2.3 MiB on 132-148 SMs, not the legacy 288 KiB: every push up to its threshold is
one round but SM100's 2-GPU pushes above 2.3 MiB (its 4 MiB row: two rounds, 4.6 MiB of
reads), and the 2-GPU pull one-shots round up by 1-3 % at most; the V2 one-shot is priced by
the message's own bytes (`custom_features`, generation 2), those two left out. Its ramp is
kept on the legacy column: the push's 128-thread blocks take one 2 KiB block of the message
each up to the whole grid, reached at 264-296 KiB (132-148 SMs), where the legacy grid fills
at 288 KiB.

Coefficients: `any/allreduce/graph/<algorithm>` in a profile (fitted by
`epsim.calibrate.allreduce` on op tables: aiconfigurator-core's `custom_allreduce_perf` and
`nccl_perf`), else the datasheet defaults below. A fit on V2 records writes
`kernel_generation` 2 (and `sm100`, the GPU it was fitted on) beside the custom kernels'
coefficients; a profile without them prices the legacy kernel, as it was fitted. Priced on
another GPU than the one it was fitted on (the system hold-out's record path,
`epsim.cost.record`), a fit's link rates carry by the two NVLink datasheet figures and NCCL's
tuner figures are the priced GPU's; its fixed costs stay (`carried_allreduce_rates`).
"""

from __future__ import annotations

import numpy as np

from epsim.spec.hardware import ClusterSpec, HardwareSpec

ALGORITHMS = ("oneshot", "twoshot", "nccl")
CUSTOM_MAX_BYTES = 8 * 2**20          # SGLang's custom all-reduce buffer (8 MiB, inclusive)
CUSTOM_WORLD_SIZES = (2, 4, 6, 8)     # group sizes its kernels are built for
ONESHOT_MAX_BYTES = {4: 512 * 2**10, 8: 256 * 2**10}    # up to 4 GPUs / up to 8 GPUs
# CustomAllReduceV2 (SGLang's JIT kernel, its CUDA default from 0.5.14 on; module doc)
V2_FIRST_SGLANG = "0.5.14"            # the first SGLang of AIC's tables that runs it
V2_MAX_BYTES = 16 * 2**20             # its pull buffer (`max_pull_size`, 16 MiB, inclusive)
# the largest one-shot by GPU count (`THRESHOLD_2_SHOT_MAP`: push, and pull on 2 GPUs;
# inclusive), on SM100 (B200, B300, GB200, GB300) and elsewhere (tuned on H200)
V2_ONESHOT_MAX_BYTES = {True: {2: V2_MAX_BYTES, 4: 2 * 2**20, 6: 2**20, 8: 720 * 2**10},
                        False: {2: V2_MAX_BYTES, 4: 384 * 2**10, 6: 192 * 2**10, 8: 160 * 2**10}}
CUSTOM_THREADS = 512                  # threads a block (sgl-kernel's default launch)
CUSTOM_MAX_BLOCKS = 36                # its block_limit (kMaxBlocks)
PACK_BYTES = 16                       # one packed load / store (8 BF16 values)
FULL_GRID_BYTES = CUSTOM_MAX_BLOCKS * CUSTOM_THREADS * PACK_BYTES     # one round of 36 blocks
NVLINK_EFFICIENCY = 0.8
NIC_EFFICIENCY = 0.8
LL_BANDWIDTH_RATIO = 0.5              # LL carries 8 data bytes per 16-byte line (NCCL docs)
# NCCL 2.27.3's tuner, ring on NVLink in one node (src/graph/tuning.cc at v2.27.3-1; module doc)
PROTOCOLS = ("LL", "LL128", "Simple")
TUNER_BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}     # baseLat, line 135
TUNER_STEP_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}      # hwLat[NVLINK][RING], line 145
TUNER_LL_MAX_GBPS = {False: 141.0, True: 282.0}               # llMaxBws N1 Hopper / Blackwell
TUNER_LL128_RATIO = 0.92                                      # line 280
# NCCL's NVLS efficiency of the link, Hopper / Blackwell (`nvlsEfficiency`, src/graph/tuning.cc
# lines 133-139 and 290 at tag v2.29.2-1, the NCCL AIC's nccl_perf tables name on every system)
TUNER_NVLS_EFFICIENCY = {False: 0.85, True: 0.74}

# design-row columns of one NCCL protocol: (1, latency count, moved KB); a custom kernel adds
# its blocks before the moved KB
CUSTOM_PARAMS = ("base_us", "per_peer_us", "per_block_us", "nvl_gbps")
NCCL_PARAMS = ("ll_base_us", "ll_hop_us", "ll_gbps", "base_us", "hop_us", "nvl_gbps",
               "rdma_gbps", "nvls_base_us", "nvls_gbps",      # NVLS: where a fit found it
               "local_gbps",                                   # Simple's local step: likewise
               "ll128_base_us", "ll128_hop_us",                # LL128's line, by NCCL's picks
               "tuner_bus_gbps", "tuner_ll_max_gbps")          # NCCL's tuner figures: likewise
LINK_RATES = ("nvl_gbps", "ll_gbps", "nvls_gbps")    # bound by NVLink (`carried_allreduce_rates`)


def algorithm(num_bytes: float, num_ranks: int, num_hosts: int, generation: int = 1,
              sm100: bool = False) -> str:
    """The all-reduce SGLang runs for one message of `num_bytes` on `num_ranks` GPUs spread
    over `num_hosts` hosts, by its custom kernel's `generation` (1: sgl-kernel's port of vLLM's,
    2: CustomAllReduceV2, whose switch points depend on `sm100`; `kernel_generation`)."""
    if generation == 2:
        if num_hosts > 1 or num_ranks not in CUSTOM_WORLD_SIZES or num_bytes > V2_MAX_BYTES:
            return "nccl"
        return "oneshot" if num_bytes <= V2_ONESHOT_MAX_BYTES[sm100][num_ranks] else "twoshot"
    if num_hosts > 1 or num_ranks not in CUSTOM_WORLD_SIZES or num_bytes > CUSTOM_MAX_BYTES:
        return "nccl"
    if num_ranks == 2:
        return "oneshot"
    limit = ONESHOT_MAX_BYTES[4] if num_ranks <= 4 else ONESHOT_MAX_BYTES[8]
    return "oneshot" if num_bytes < limit else "twoshot"


def kernel_generation(framework: str, framework_version: str) -> int:
    """The custom all-reduce generation a framework version runs (`algorithm`): 2 for SGLang
    from `V2_FIRST_SGLANG` on (`SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2` defaults to true), else
    1 (older SGLang, an unnamed version, another framework)."""
    from packaging.version import InvalidVersion, Version
    if framework.lower() != "sglang":
        return 1
    try:
        return 2 if Version(framework_version) >= Version(V2_FIRST_SGLANG) else 1
    except InvalidVersion:
        return 1


def record_generation(record) -> int:
    """The custom kernel generation an SGLang all-reduce record (`MeasurementRecord`) ran: by
    the framework and version its provenance names (`kernel_generation`; none named: 1)."""
    prov = record.provenance
    return kernel_generation(str(getattr(prov, "framework", "") or ""),
                             str(getattr(prov, "framework_version", "") or ""))


def is_sm100(hardware) -> bool:
    """Whether a zoo GPU (`HardwareSpec`) is SM100 (Blackwell: B200, B300, GB200, GB300), the
    GPUs CustomAllReduceV2 tunes apart (SGLang's `is_sm100_supported`): in the zoo, the GPUs
    with FP4 tensor cores."""
    return hardware is not None and hardware.fp4_tflops is not None


def custom_kernel(params: dict[str, dict[str, float]]) -> tuple[int, bool]:
    """(generation, sm100) of the custom kernel a profile's all-reduce coefficients were fitted
    on (their `kernel_generation` and `sm100`; a profile fitted before them: 1, False)."""
    p = params.get("twoshot") or params.get("oneshot") or {}
    return int(p.get("kernel_generation", 1)), bool(p.get("sm100", 0.0))


def allreduce_defaults(cluster: ClusterSpec) -> dict[str, dict[str, float]]:
    """Datasheet parameters of each algorithm (`any/allreduce/graph/<algorithm>`): NVLink and
    NIC bandwidths x 0.8, LL at half of it; the fixed costs are stated assumptions of a few
    µs (a fit on measured op tables replaces them)."""
    nvl = cluster.nvlink_gbps_resolved * NVLINK_EFFICIENCY
    custom = {"base_us": 3.0, "per_peer_us": 0.3, "per_block_us": 0.0, "nvl_gbps": nvl}
    return {"oneshot": dict(custom), "twoshot": dict(custom),
            "nccl": {"ll_base_us": 5.0, "ll_hop_us": 1.0, "ll_gbps": nvl * LL_BANDWIDTH_RATIO,
                     "base_us": 20.0, "hop_us": 1.0, "nvl_gbps": nvl,
                     "rdma_gbps": cluster.rdma_gbps_resolved * NIC_EFFICIENCY}}


def carried_allreduce_rates(params: dict[str, float], fitted_on: HardwareSpec,
                            on: HardwareSpec) -> dict[str, float]:
    """One algorithm's fitted all-reduce `params` (`CUSTOM_PARAMS` or `NCCL_PARAMS`: absolute
    rates) carried from the GPU they were fitted on to another (the system hold-out, record
    path), as DeepEP's link-bound rates carry (`epsim.cost.comm.carried_comm_rates`):

    - the link rates x NVLink on / NVLink fitted: the custom kernels' `nvl_gbps` (sgl-kernel's
      one-shot reads every peer's buffer over NVLink, CustomAllReduceV2's two-shot loads and
      stores its parts through it: AIC's tables give both 0.66-0.70 of the datasheet figure on
      every system), NCCL's `nvl_gbps` (Simple; LL128 at 0.92 of it), `ll_gbps` (LL) and
      `nvls_gbps` (NVLS: each GPU's `S` into the switch and back over its NVLink ports). NCCL's
      own tuner prices its ring protocols from one per-link NVLink figure, 20.6 GB/s on SM90
      and 40.0 on SM100 (`src/graph/topo.h` lines 19-21 at tag v2.27.3-1), LL's cap 141 / 282
      GB/s (`llMaxBws`, `src/graph/tuning.cc` lines 165-170): each twice Hopper's on
      Blackwell, as the datasheet's NVLink 4 -> 5 (450 -> 900 GB/s a direction). NVLS's rate
      also by NCCL's efficiency of the link per architecture (`TUNER_NVLS_EFFICIENCY`: 0.85 on
      Hopper, 0.74 on Blackwell).
    - NCCL's tuner figures (`tuner_bus_gbps`, `tuner_ll_max_gbps`, where fitted): the other
      GPU's (`tuner_params`): NCCL picks the protocol by the GPU it runs on.

    Kept: the fixed costs (launch, barriers, ring steps, the LL / LL128 / NVLS setup: the
    tuner's latencies `baseLat`, `hwLat` are one table for every architecture, lines 134-147,
    and no datasheet gives them; AIC's tables show Blackwell's small messages 1.4-1.6x
    Hopper's, NCCL's and the custom kernel's alike, which nothing carried explains),
    `local_gbps` (Simple's local copy out of the FIFO, run by the ring's own blocks, not bound
    by the link: fitted 1013-1015 GB/s on Hopper, 1205-1291 on Blackwell, not HBM's 4.8 -> 8
    TB/s), `rdma_gbps` (the NIC). The same GPU, or one
    without an NVLink figure on either side: `params` as they are. Pass the fitted component's
    own params (not merged over the other GPU's datasheet defaults, which need no carry)."""
    if fitted_on.name == on.name or not (fitted_on.nvlink_gbps and on.nvlink_gbps):
        return dict(params)
    ratio = on.nvlink_gbps / fitted_on.nvlink_gbps
    out = {k: v * ratio if k in LINK_RATES else v for k, v in params.items()}
    if "nvls_gbps" in out:         # NCCL's NVLS efficiency of the link, per architecture
        out["nvls_gbps"] *= TUNER_NVLS_EFFICIENCY[is_sm100(on)] / TUNER_NVLS_EFFICIENCY[is_sm100(fitted_on)]
    if "tuner_bus_gbps" in out:
        out["tuner_bus_gbps"] = on.nvlink_gbps * NVLINK_EFFICIENCY
        out["tuner_ll_max_gbps"] = TUNER_LL_MAX_GBPS[is_sm100(on)]
    return out


def moved_bytes(num_bytes, num_ranks: int, algo: str, passes: int = 2):
    """Bytes each GPU moves over its busiest link: a one-shot reads every peer's buffer, a
    two-shot and a ring move `passes (n-1)/n` of the message (CustomAllReduceV2's fused
    two-shot: its loads and its stores, two)."""
    if algo == "oneshot":
        return (num_ranks - 1) * np.asarray(num_bytes, dtype=np.float64)
    return passes * (num_ranks - 1) / num_ranks * np.asarray(num_bytes, dtype=np.float64)


def barrier_peers(num_ranks: int) -> float:
    """The custom kernels' barrier count against `per_peer_us`: the harmonic number
    `H(n - 1) = 1 + 1/2 + ... + 1/(n - 1)` (1, 1.83, 2.28, 2.59 on 2, 4, 6, 8 GPUs). sgl-kernel's
    `barrier_at_start` / `barrier_at_end` give each peer its own thread (`threadIdx.x < ngpus`
    stores the flag to that peer and spins on its reply), so a barrier waits for the slowest of
    `n - 1` exchanges run at once, not their sum: with each exchange's latency a fixed part plus
    an exponential tail, the expected slowest is the fixed part plus `H(n - 1)` tails."""
    return float(sum(1.0 / k for k in range(1, num_ranks)))


def custom_blocks(num_bytes) -> np.ndarray:
    """[...] the grid the custom kernels launch for a message of `num_bytes`, in blocks of 512
    packs (8 KiB), not rounded up: the message's share of the full 36-block grid, which it
    reaches at 288 KiB (module doc)."""
    block_bytes = CUSTOM_THREADS * PACK_BYTES
    return np.minimum(np.asarray(num_bytes, dtype=np.float64), FULL_GRID_BYTES) / block_bytes


def custom_features(num_bytes, num_ranks: int, algo: str, generation: int = 1) -> np.ndarray:
    """[..., 4] design rows of a custom all-reduce (`CUSTOM_PARAMS`, 1/nvl_gbps): columns
    (1, H(n - 1) (`barrier_peers`), blocks, KB read from peers: the legacy one-shot's
    (`generation` 1) whole rounds of its 36-block grid beyond one round, else the moved bytes
    (CustomAllReduceV2's one-shot, `generation` 2: its grid is one block an SM, module doc))."""
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    blocks = custom_blocks(num_bytes)
    if algo == "oneshot" and generation == 1:   # legacy: a full grid loops whole rounds
        # (below one round, the grid is the message; V2's rounds are >= 1 MiB: module doc)
        rounds = np.ceil(num_bytes / FULL_GRID_BYTES)
        kb = (num_ranks - 1) * np.where(rounds > 1, rounds * FULL_GRID_BYTES, num_bytes) * 1e-3
    else:
        kb = moved_bytes(num_bytes, num_ranks, algo) * 1e-3
    return np.stack([np.ones_like(kb), np.full_like(kb, barrier_peers(num_ranks)), blocks, kb],
                    axis=-1)


def ring_features(num_bytes, num_ranks: int, passes: int = 2) -> np.ndarray:
    """[..., 3] design rows of one NCCL protocol line: (1, ring steps, moved KB); an all-reduce
    is `passes=2` (2 (n - 1) steps), a reduce-scatter or all-gather 1."""
    kb = moved_bytes(num_bytes, num_ranks, "nccl", passes) * 1e-3
    return np.stack([np.ones_like(kb), np.full_like(kb, passes * (num_ranks - 1.0)), kb], axis=-1)


def ring_local_kb(num_bytes, num_ranks: int) -> np.ndarray:
    """[...] KB of a ring's local steps on each GPU (module doc): one chunk of every loop of
    `n` chunks, `S / n` of the message, whatever the collective."""
    return np.asarray(num_bytes, dtype=np.float64) / num_ranks * 1e-3


def nvls_features(num_bytes) -> np.ndarray:
    """[..., 3] design rows of NCCL's NVLS all-reduce: (1, 0, KB each GPU sends and receives:
    the message, whatever the GPU count)."""
    kb = np.asarray(num_bytes, dtype=np.float64) * 1e-3
    return np.stack([np.ones_like(kb), np.zeros_like(kb), kb], axis=-1)


def tuner_params(cluster: ClusterSpec) -> dict[str, float]:
    """The figures NCCL's tuner prices protocols by on the cluster's GPU (module doc): its bus
    bandwidth (`NVLINK_EFFICIENCY` of NVLink's datasheet figure, as NCCL's per-link figures
    give) and LL's cap (Blackwell, `is_sm100`, or Hopper and older)."""
    return {"tuner_bus_gbps": cluster.nvlink_gbps_resolved * NVLINK_EFFICIENCY,
            "tuner_ll_max_gbps": TUNER_LL_MAX_GBPS[is_sm100(cluster.hardware)]}


def tuner_gbps(bus_gbps: float, ll_max_gbps: float) -> dict[str, float]:
    """NCCL's tuner's ring bus bandwidth of each protocol (GB/s) from the channels' `bus_gbps`:
    LL half of it under its cap `ll_max_gbps`, LL128 `TUNER_LL128_RATIO` of it, Simple all."""
    return {"LL": min(ll_max_gbps, 0.5 * bus_gbps), "LL128": TUNER_LL128_RATIO * bus_gbps,
            "Simple": bus_gbps}


def tuner_protocol(num_bytes, num_ranks: int, passes: int, bus_gbps: float,
                   ll_max_gbps: float) -> np.ndarray:
    """[...] int, the ring protocol NCCL's tuner picks (`PROTOCOLS` index: 0 LL, 1 LL128, 2
    Simple) for `num_bytes` on `num_ranks` GPUs of one NVLink domain (`passes` 2: all-reduce,
    1: reduce-scatter or all-gather), by its latency-bandwidth model (module doc)."""
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    steps = passes * (num_ranks - 1)
    gbps = tuner_gbps(bus_gbps, ll_max_gbps)
    time_us = [TUNER_BASE_US[p] + steps * TUNER_STEP_US[p] + steps / num_ranks * num_bytes / (1e3 * gbps[p])
               for p in PROTOCOLS]
    return np.argmin(np.stack(time_us, axis=-1), axis=-1)


def ring_us(num_bytes, num_ranks: int, num_nodes: int, params: dict[str, float],
            passes: int = 2) -> np.ndarray:
    """NCCL collective of `num_bytes` over `num_ranks` GPUs (all-reduce: `passes=2`,
    reduce-scatter / all-gather: 1), on the ring protocol line NCCL's tuner picks within one
    NVLink domain where the coefficients carry its figures (`tuner_bus_gbps`), else the faster
    of the two lines (Simple with its local step where `local_gbps` is fitted) and, for an
    all-reduce within one NVLink domain with `nvls_gbps` fitted, NVLS where faster (µs); 0 on
    one GPU."""
    if num_ranks <= 1:
        return np.zeros_like(np.asarray(num_bytes, dtype=np.float64))
    rows = ring_features(num_bytes, num_ranks, passes)
    nic = params["rdma_gbps"] if num_nodes > 1 else np.inf
    ll = rows @ np.array([params["ll_base_us"], params["ll_hop_us"],
                          1.0 / min(params["ll_gbps"], nic)])
    simple = rows @ np.array([params["base_us"], params["hop_us"],
                              1.0 / min(params["nvl_gbps"], nic)])
    if params.get("local_gbps"):            # Simple's local step a loop (module doc)
        simple = simple + ring_local_kb(num_bytes, num_ranks) / params["local_gbps"]
    if num_nodes == 1 and params.get("tuner_bus_gbps"):       # the line NCCL picks
        ll128 = rows @ np.array([params["ll128_base_us"], params["ll128_hop_us"],
                                 1.0 / (TUNER_LL128_RATIO * params["nvl_gbps"])])
        pick = tuner_protocol(num_bytes, num_ranks, passes, params["tuner_bus_gbps"],
                              params["tuner_ll_max_gbps"])
        ring = np.choose(pick, [ll, ll128, simple])
    else:
        ring = np.minimum(ll, simple)
    if passes == 2 and num_nodes == 1 and params.get("nvls_gbps"):
        nvls = nvls_features(num_bytes) @ np.array([params["nvls_base_us"], 0.0,
                                                     1.0 / params["nvls_gbps"]])
        ring = np.minimum(ring, nvls)
    return ring


def allreduce_us(num_bytes: float, num_ranks: int, num_nodes: int,
                 params: dict[str, dict[str, float]], num_hosts: int | None = None,
                 sm100: bool | None = None) -> float:
    """Device time of one all-reduce of `num_bytes` on `num_ranks` GPUs by the algorithm SGLang
    picks (`algorithm`), µs; 0 on one GPU.

    Args:
        num_nodes: NVLink domains the group spans (NCCL's ring crosses the NIC between them).
        params: {algorithm: its coefficients} (`allreduce_defaults` over a profile's fits).
        num_hosts: hosts the group spans (None: `num_nodes`; a GB200 / GB300 host is 4 GPUs).
        sm100: whether the priced GPU is SM100 (`is_sm100`; None: the GPU the coefficients
            were fitted on, `custom_kernel`): CustomAllReduceV2's switch points.
    """
    if num_ranks <= 1 or num_bytes <= 0:
        return 0.0
    generation, fitted_sm100 = custom_kernel(params)
    sm100 = fitted_sm100 if sm100 is None else sm100
    algo = algorithm(num_bytes, num_ranks, num_nodes if num_hosts is None else num_hosts,
                     generation, sm100)
    if algo == "nccl":
        return float(ring_us(num_bytes, num_ranks, num_nodes, params["nccl"]))
    p = params[algo]
    row = custom_features(num_bytes, num_ranks, algo, generation)
    return float(row @ custom_coefficients(p))


def custom_coefficients(params: dict[str, float]) -> np.ndarray:
    """[4] a custom kernel's coefficients against `custom_features` (a profile fitted before the
    block ramp has no `per_block_us`: 0)."""
    return np.array([params["base_us"], params["per_peer_us"], params.get("per_block_us", 0.0),
                     1.0 / params["nvl_gbps"]])
