"""Why epsim's TPOT is too low on the B200 FP8 DeepSeek-R1 agg TP8 rows that ran with MTP, and
more so at many clients (issue 39): the error split, the verify cycle's parts as epsim prices
them, and its MoE against AIC's op table at the verify step's token counts.

    python benchmarks/mtp_b200_verify.py [--out benchmarks/results/mtp_b200_verify.md]

1. The whole-set record (benchmarks/results/silicon_rows.json.gz, validation only: read, never
   fitted) split by concurrency and by MTP twin. InferenceX's dsr1-fp8-b200-sglang key and its
   -mtp twin both ran 4-64 clients in one push (`agg_recipes`), so two measured TPOTs share one
   row shape there; the record does not say which is which, and here the lower is read as the
   MTP run's (the draft's purpose) -- a diagnostic reading only. 128-512 clients (and 8k/1k at
   8-64) only the -mtp twin ran. Beside each pair, the speed-up MTP gives, measured and epsim's.
2. epsim's verify cycle at b requests of the 1k/1k row (`plan_row` -> `Simulation`): the
   decode step of b requests, the verify step (`verify_counts`: b x 3 tokens), the draft's
   forwards (`DraftPricer`), uniform routing, 1500 keys each; and whether SGLang replays a CUDA
   graph there (`cuda_graph_max_bs` 512; SGLang's speculative capture list, `server_args.
   _generate_cuda_graph_batch_sizes`, runs to it in steps of 16 past 272).
3. The routed experts of one MoE layer against AIC's B200 SGLang MoE table (fp8_block, MoE-TP8,
   flashinfer_trtllm kernel; op-level calibration data) from a decode batch's token count to a
   verify step's: epsim's kernel on AIC's own expert counts (DeepSeek's grouped top-k keeps 4 of
   8 groups: at most 128 experts, `grouped_balanced_counts`) against AIC's `balanced` rows, and
   epsim's uniform routing against AIC's `power_law_1.01` rows; then what the verify step's MoE
   grows by over the decode step's (3b tokens over b) in each.
4. The verify step's MLA decode kernel (one layer) as epsim prices it against AIC's B200 SGLang
   `trtllm_mla` table (FP8 cache, op-level calibration data) at 1k and 8k keys (`verify_kernel`).
5. epsim's timeline of whole agg benchmark runs (`agg_timeline`): prefill steps a decode cycle,
   their tokens, cost and draft extend, their share of the run's time; and what the measured
   closed loop implies for a prompt token or a cycle if epsim's other side were right.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import warnings
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agg_timeline import timeline_table  # noqa: E402
from aic_stages import frames, uniform_loads  # noqa: E402
from epsim.calibrate.aic_records import grouped_balanced_counts  # noqa: E402
from epsim.calibrate.aic_tables import package_version  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.sim.engine import Simulation  # noqa: E402
from epsim.sim.speculative import Acceptance, DraftPricer, verify_counts  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
MTP_ROW = "2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c128_tp8_ep1_1681"
KEYS = 1500                           # a 1k/1k request's mean context mid-output
BATCHES = (4, 16, 32, 64, 128, 256, 512)
MOE_TABLE = {"moe": "moe/sglang/0.5.14/moe_perf.parquet"}
MLA_TABLE = {"mla": "mla/sglang/0.5.14/generation_mla_perf.parquet"}
# the agg rows whose benchmark runs table 5 reads: (row id, ran MTP: the accept length is
# epsim's, else 1)
TIMELINE_ROWS = (("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c512_tp8_ep1_1743", True),
                 ("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c128_tp8_ep1_1744", True),
                 ("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c512_tp8_ep1_1287", True),
                 ("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x8192_c512_tp8_ep1_1790", True),
                 ("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp8_ep8_1055", False),
                 ("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c32_tp4_ep1_1230", False))
MLA_KEYS = (1023, 8191)               # AIC's `step` (keys a sequence) nearest 1k and 8k
# what the tables say, and why (the sources named; no number here is read from the tables above)
READING = """## Reading

- The error grows with clients on every shape, and where both twins ran, epsim's speed-up from
  MTP grows with clients while the measured one shrinks: the verify cycle is priced too cheap
  against a decode step at many clients. The accept length cannot do that alone: it is a
  per-request property, alike at every batch (`epsim.sim.speculative.Acceptance`).
- Not the CUDA graph: SGLang's speculative capture list (`server_args.
  _generate_cuda_graph_batch_sizes`: 1-8, 10-32 by 2, 40-64 by 4, 72-256 by 8, then by 16 to
  `cuda_graph_max_bs`) reaches the script's 512, so the verify (b x 3 tokens, `TARGET_VERIFY`)
  and the draft replay graphs at every batch these rows run; epsim prices them so (table 2).
- Not the draft: one MTP layer and the LM head, about a millisecond a cycle (table 2).
- The verify step's attention, all-reduce and LM head are priced at its b x 3 tokens already
  (`verify_counts`); its attention is what grows from 256 requests on (table 2).
- The MoE: AIC's B200 SGLang MoE table (op-level calibration data; the `flashinfer_trtllm`
  kernel these rows ran, untuned: the collector runs no autotune pass, so the launcher's
  fallback tile, one rung below the balanced-share centre) grows 1.3-1.7x from a decode step's
  tokens to a verify step's at 64-256 requests. epsim now pads each expert to the kernel's own
  token tile (`ExpertGemm.tile_rows`, `epsim.cost.moe.trtllm_experts_us`) and prices a served
  step at the cheapest of the launcher's candidates (SGLang autotunes at warm-up): at AIC's
  counts epsim / AIC is 0.91-1.07 at 4-96 tokens (was 1.13-1.40) and 0.55-0.86 at 128-768
  (table 3), but a decode step's few rows per expert are memory-bound, where the largest
  candidate wins and its padded math stays under the weights' read: the verify step's MoE is
  still about the decode step's (table 2). Priced at the fallback tile instead, it grows
  1.9x at 128 requests, but over-prices AIC's own rows 1.3-1.8x at 128-1536 tokens.
- The accept length: the rows send random token ids in DeepSeek-R1's chat template, and epsim
  takes InferenceX PR #649's published acceptance for such prompts (2.17 tokens a verify at 2
  draft steps, `epsim.sim.accept_sources`; 2.57, DeepSeek-V3's 85 % second-token acceptance at
  both positions, before the whole-set record that carries it). The twins at 4 clients
  read against epsim's own cycle / decode ratio put it near the `implied` figures of table 1
  (validation data: a diagnostic, never a setting).
- The scheduler's per-request Python (issue 39): counted from the 0.5.9 wheel and timed on our
  VM (`benchmarks/spec_request_host.py`), the verify's accepted-token loop, the result loop and
  `stream_output` cost ~7.4 us a request a cycle, exposed with overlap off
  (`epsim.cost.scheduler_host.REQUEST_HOST_US`, in table 2's steps): 0.9 ms a cycle at 128
  requests, 3.8 ms at 512. The rows' shortfall is ~200 us a request a cycle at 1k/1k and 128
  clients and grows with the input length, which per-request bookkeeping does not: no
  per-request term of that size is in the source.
- The verify's attention kernel (table 4): SGLang's `trtllm_mla` runs a verify as one decode
  call of b sequences, each request's 3 queries x 16 heads packed as one sequence's rows
  (`forward_extend`), so the cache is read once a request; AIC's B200 rows put b sequences of
  32-64 heads within ~1.6x of 16 heads, while epsim prices 3b sequences of 16 heads (AIC's own
  16-heads row at 3b sequences agrees with epsim's form): the verify is priced 1.5-2.2x high
  from 32 requests on, +1.4 ms a cycle at 1k keys and 128 requests, +9 ms at 8k, +39 ms at 8k
  and 512. An op-level proxy (AIC times one query a sequence; the packed rows' kernel choice is
  `TllmGenFmhaKernel`'s), but it points the same way everywhere: the cycle's device work is
  not priced short, so the rows' missing time is outside the verify cycle as table 2 prices it
  (the agg rows' prefill chunks between cycles, MTP's and the non-MTP 8k/1k rows' alike, whose
  TTFT is short too), or in the accept length.
- What would close it: which tactic SGLang's warm-up autotune keeps for a verify step's
  3b tokens (its buckets are powers of two up to the dummy run's batch; the launcher resolves
  a bucket's tile against the runtime candidates), measured, then the accept length where the
  MoE leaves a gap; it moves every Blackwell row, so it needs the whole-set record re-run.
- Outside the cycle (issue 39, table 5): the agg schedule epsim runs is SGLang 0.5.9's as the
  wheel has it: `event_loop_normal` runs a prefill batch whenever `get_new_batch_prefill` forms
  one (prefill first, no mixed chunk), one at most `--chunked-prefill-size` / `--max-prefill-
  tokens` 16384 tokens; the receive skipper (`--scheduler-recv-interval 30`: a verify or decode
  adds 1, an extend 1000; the batch's mode is DECODE again after `verify` and after the draft's
  extend) receives every 30 cycles or right after a prefill; a prefill runs the target's extend
  and then the draft's extend of the prompt (`forward_draft_extend`, eager), both priced. So a
  prefill does not run between every pair of cycles: at 1k/1k and 512 clients one of ~12.9k
  tokens (~14 prompts) runs every ~12 cycles, 23 % of the run's time; at 8k/1k and 128 clients
  every ~7 cycles, 48 %; only where the KV pool binds (8k/1k at 512 clients: a request admitted
  as one ends) is it nearly one (~1.4 prompts) every ~2.5 cycles, 56 %. The running batch is
  the measured loop's (Little's law) within a few %. For the measured TPOT, either side would
  have to cost about twice epsim's (the last two columns): a prompt token 44-77 us where epsim
  prices 18-24 at TP8, or a cycle 1.9-2.4x. Both
  sides miss something. The 1k/8k MTP rows send a prompt token for every 8 output tokens (a
  few % of the time in prefill) and still fall short by 16-26 % at 32-256 clients (table 1),
  while their non-MTP twins are within ~8 %: the verify cycle (or the accept length) is short
  there, growing with the batch. And the non-MTP TP8/EP8 8k/1k rows (no draft, `tp64 dp1
  moe_tp8 ep8` in the record) fall short like the MTP ones (-45 % at 64 clients, prefill share
  0.29, 71 us a prompt token implied) while TP4's 8k/1k rows miss ~10 % (41 against 29 us):
  the prefill-heavy rows at TP8 miss more, with or without MTP.
  Read from the source and changed with table 5 (table 1 is the record, before it): an
  InferenceX agg run's requests carry `ignore_eos` and its servers run without a radix cache, so
  SGLang admits by `add_one_req_ignore_eos` (every running request's whole remaining output
  reserved, the shorter ones' tokens freed as they end), where epsim's colocated rank applied
  the decode server's rule (512 tokens reserved a request); `epsim.sim.kv_pool` now walks
  SGLang's rule. It binds only where the pool does (8k/1k from ~256 clients, 1k/8k at 512):
  the 1k/8k row at 512 clients runs ~294 requests (the measured loop ~342; 491 before, whose
  contexts outgrew the 1.96M-token pool: SGLang would have retracted, which epsim does not), its
  TTFT 157 s (measured 159 s, 14.6 s before), its TPOT 31 ms (measured 43, 44 before): short
  like the other 1k/8k rows' once its batch is the pool's; the 8k/1k rows at 256 and 512 admit
  a few more (the shortest-left requests' tokens count as freed), TTFT 7.4 -> 4.6 s and 75.6
  -> 71.9 s (measured 8.7 and 119 s), TPOT 68.5 -> 71.4 and 69.7 -> 73.2 ms.
  The H200 FP8 8k/1k rows at 64 clients (pool-bound too) move the same way: TTFT 1848 -> 1284
  ms (measured 2279), TPOT 56.6 -> 57.1 (measured 50.2).
- What would close the rest: a TP8 DeepSeek-R1 FP8 prefill forward of 8-16k tokens on B200 timed
  against epsim's 18-24 us a token (its MoE, ~53 %, and attention, ~30 %, in table 5's row at
  8k/1k), or SGLang's prefill-step host work with overlap off (`process_batch_result_prefill`,
  not priced), whichever the op tables or a trace show; and the verify cycle at 128-512
  requests of 4-5k keys (the 1k/8k rows), measured.
"""
MOE_WHERE = dict(moe_dtype="fp8_block", hidden_size=7168, inter_size=2048, num_experts=256,
                 topk=8, moe_tp_size=8, moe_ep_size=1)


def _ran_mtp(entry: dict) -> str:
    """'mtp' (only the -mtp twin ran the row), 'both' (both twins did), or 'base'."""
    said = " ".join(entry["epsim"]["assumptions"])
    if "MTP: only" in said:
        return "mtp"
    return "both" if "spread" in entry["epsim"] else "base"


def record_rows() -> list[dict]:
    """The whole-set record's rows (`RECORD`)."""
    return json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]


def record_split(rows: list[dict], accept: float) -> list[str]:
    """Part 1: the record's B200 FP8 agg TP8 SGLang 0.5.9 rows (`rows`: the record's entries)
    by shape and clients (module doc); `accept`: epsim's accept length for them."""
    groups: dict[tuple, dict] = defaultdict(lambda: {"measured": set(), "base": None, "mtp": None})
    for r in rows:
        if (r["system"], r["mode"], r["precision"]) != ("b200_sxm", "agg", "fp8") \
                or not r["layout"].startswith("tp8 ") or r["epsim"].get("tpot_ms") is None \
                or r["version"] != "0.5.9":
            continue
        g = groups[(r["isl"], r["osl"], r["concurrency"])]
        g["measured"].add(round(r["measured"]["tpot_ms"], 3))
        ran = _ran_mtp(r)
        if ran == "mtp":
            g["mtp"] = r["epsim"]["tpot_ms"]
        elif ran == "both":
            c = {x["deployment"].split(",")[0]: x["tpot_ms"] for x in r["epsim"]["spread"]["candidates"]}
            g["base"], g["mtp"] = c["without MTP"], c["with MTP"]
    lines = ["| ISL/OSL | clients | twins ran | measured no-MTP | measured MTP | epsim no-MTP | "
             "epsim MTP | MTP error | speed-up measured | speed-up epsim |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_clients: dict[str, list[float]] = defaultdict(list)
    for (isl, osl, c), g in sorted(groups.items()):
        got = sorted(g["measured"])
        base_m, mtp_m = (got[-1], got[0]) if g["base"] is not None else (None, got[0])
        err = 100.0 * (g["mtp"] / mtp_m - 1.0)
        by_clients["4-16" if c <= 16 else "32-64" if c <= 64 else "128-512"].append(err)
        fmt = (lambda v: "-" if v is None else f"{v:.2f}")
        lines.append(f"| {isl}/{osl} | {c} | {'both' if g['base'] is not None else 'MTP only'} | "
                     f"{fmt(base_m)} | {mtp_m:.2f} | {fmt(g['base'])} | {g['mtp']:.2f} | "
                     f"{err:+.1f} % | {fmt(base_m and base_m / mtp_m)} | "
                     f"{fmt(g['base'] and g['base'] / g['mtp'])} |")
    implied = [(isl, osl, accept * max(g["measured"]) / min(g["measured"]) * g["mtp"] / g["base"])
               for (isl, osl, c), g in sorted(groups.items()) if c == 4 and g["base"] is not None]
    lines += ["", f"Accept length implied at 4 clients (epsim's {accept:.2f} x measured / epsim "
              "speed-up; "
              "diagnostic only): " + ", ".join(f"{i}/{o}: {a:.2f}" for i, o, a in implied) + "."]
    lines += ["", "MTP error by clients (signed mean / MAPE over the shapes): " + "; ".join(
        f"{k}: {np.mean(v):+.1f} / {np.mean(np.abs(v)):.1f} % (n {len(v)})"
        for k, v in sorted(by_clients.items(), key=lambda kv: int(kv[0].split('-')[0])))]
    return lines


def cycle_parts(row) -> tuple[list[str], Acceptance, dict]:
    """Part 2: epsim's decode step, verify step and draft forwards at each batch (ms); also the
    row's acceptance and {b: (decode MoE, verify MoE, verify + draft)} (µs a step)."""
    data = plan_row(row).instances[0].data
    sim = Simulation(scenario_from_dict(json.loads(json.dumps(data)), where="silicon row"))
    cm, m, d = sim.cost_model, sim.cost_model.model, sim.scenario.deployment
    steps, _, draft_tokens = d.speculative_steps
    acceptance = Acceptance(steps, d.speculative_accept_length, 0,
                            sim.scenario.workload.prompt_kind)   # the row's prompts' (mapping)
    draft = DraftPricer(sim.scenario, sim.profile, 0)
    lines = ["| requests b | decode step | its MoE | verify step (3b tokens) | its MoE | its "
             "attention | draft forwards | cycle / decode | CUDA graph (verify) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    cycle = {}
    for b in BATCHES:
        batch = BatchCounts.uniform_decode(1, b, KEYS)
        verify = verify_counts(batch, draft_tokens)
        dec = cm.step(batch, uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, b, 0),
                      sim.placement.tables)
        ver = cm.step(verify, uniform_loads(m.num_moe_layers, m.num_experts, m.top_k,
                                            b * draft_tokens, 0), sim.placement.tables)
        drf = draft.cycle_us(np.array([b]), np.array([b * KEYS]), None, 0.0,
                             np.random.default_rng(0))
        lines.append(f"| {b} | {dec.step_us / 1e3:.2f} | {dec.experts_us.sum() / 1e3:.2f} | "
                     f"{ver.step_us / 1e3:.2f} | {ver.experts_us.sum() / 1e3:.2f} | "
                     f"{ver.attention_us.sum() / 1e3:.2f} | {drf / 1e3:.2f} | "
                     f"{(ver.step_us + drf) / dec.step_us:.2f} | {cm.uses_graph(verify)} |")
        cycle[b] = (dec.experts_us.sum(), ver.experts_us.sum(), ver.step_us + drf)
    return lines, acceptance, cycle


def moe_growth(cycle: dict) -> list[str]:
    """Part 3: one MoE layer's routed experts, epsim against AIC, decode to verify token counts;
    and what a verify cycle (`cycle_parts`) would gain if its MoE grew over the decode step's as
    AIC's power_law_1.01 rows do (a what-if: epsim's decode-step MoE x AIC's ratio)."""
    from aic_stages import row_simulation
    rows = {r.id: r for r in read_rows(default_csv_path())}
    sim = row_simulation(rows["dsr1_b200_sglang_fp8_agg_1024x8192_c64_cfg87"])
    cm, m = sim.cost_model, sim.cost_model.model
    f = frames("b200_sxm", MOE_TABLE)["moe"]
    at: dict[int, tuple[float, float, float, float]] = {}
    for t in sorted({b * k for b in BATCHES for k in (1, 3)}):
        batch = BatchCounts.uniform_decode(1, t, KEYS)
        counts = np.tile(grouped_balanced_counts(t, m.num_experts, m.top_k, 8, 4),
                         (m.num_moe_layers, 1))
        ours = float(cm.moe(counts, cm.ep_tokens(batch), sim.placement.tables,
                            graph=True).experts_us[0])
        uniform = uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, t, 0)
        ours_u = float(cm.moe(uniform, cm.ep_tokens(batch), sim.placement.tables,
                              graph=True).experts_us.mean())
        at[t] = (measured(f, distribution="balanced", num_tokens=t, **MOE_WHERE), ours,
                 measured(f, distribution="power_law_1.01", num_tokens=t, **MOE_WHERE), ours_u)
    lines = ["| tokens | AIC balanced | epsim at AIC's counts | ratio | AIC power_law_1.01 | "
             "epsim uniform | ratio |", "|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {t} | {a:.1f} | {o:.1f} | {o / a:.2f} | {p:.1f} | {u:.1f} | {u / p:.2f} |"
              for t, (a, o, p, u) in at.items() if not np.isnan(a)]
    lines += ["", "The verify step's MoE over the decode step's (3b tokens over b), per layer:", "",
              "| requests b | AIC balanced | epsim at AIC's counts | AIC power_law_1.01 | "
              "epsim uniform | what-if: verify cycle's MoE at AIC's growth | cycle, ms "
              "(epsim -> what-if) |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for b in BATCHES:
        lo, hi = at[b], at[3 * b]
        if np.isnan(lo[0]) or np.isnan(hi[0]):
            continue
        dec_moe, ver_moe, total = cycle[b]
        grown = dec_moe * hi[2] / lo[2]
        lines.append(f"| {b} | {hi[0] / lo[0]:.2f} | {hi[1] / lo[1]:.2f} | {hi[2] / lo[2]:.2f} | "
                     f"{hi[3] / lo[3]:.2f} | {ver_moe / 1e3:.1f} -> {grown / 1e3:.1f} ms | "
                     f"{total / 1e3:.1f} -> {(total - ver_moe + grown) / 1e3:.1f} |")
    return lines


def verify_kernel(row) -> list[str]:
    """Part 4: the verify step's MLA decode kernel, one layer (µs): epsim's (each of a request's
    `num_draft_tokens` queries its own sequence over the request's keys, `mla_attention_us` over
    `verify_counts`) against AIC's B200 `trtllm_mla` rows (FP8 cache; `num_heads` the heads a
    rank runs, 16 at TP 8). SGLang's one kernel call packs a request's 3 queries x 16 heads into
    one sequence's 48 rows (`forward_extend`: `q.view(bs, -1, heads, head_dim)`), between AIC's
    32 and 64 heads of b sequences (the two kernels `TllmGenFmhaKernel` picks between); AIC's
    16 heads at 3b sequences (linear between its batch sizes) is epsim's form."""
    from aic_stages import between
    data = plan_row(row).instances[0].data
    sim = Simulation(scenario_from_dict(json.loads(json.dumps(data)), where="silicon row"))
    cm = sim.cost_model
    q = sim.scenario.deployment.speculative_steps[2]
    f = frames("b200_sxm", MLA_TABLE)["mla"]
    lines = ["| keys | requests b | epsim decode (b x 1) | epsim verify (b x 3, as priced) | "
             "AIC 16 heads, b seqs | AIC 32 heads, b seqs | AIC 64 heads, b seqs | AIC 16 heads, "
             "3b seqs | epsim verify / the dearer of AIC 32, 64 | over 61 layers, ms |",
             "|---:|" + "---:|" * 9]
    for keys in MLA_KEYS:
        for b in BATCHES[1:]:
            dec = float(cm._decode_kernel.us(np.array([b], float), np.array([b * keys], float))[0])
            ctx = b * q * keys + b * q * (q - 1) / 2.0                   # as `verify_counts`
            ver = float(cm._decode_kernel.us(np.array([b * q], float), np.array([ctx]))[0])
            where = dict(kv_cache_dtype="fp8", step=keys)
            a16, a32, a64 = (measured(f, batch_size=b, num_heads=h, **where) for h in (16, 32, 64))
            a16x = between(f, "batch_size", b * q, num_heads=16, **where)
            packed = max(a32, a64)
            lines.append(f"| {keys + 1} | {b} | {dec:.0f} | {ver:.0f} | {a16:.0f} | {a32:.0f} | "
                         f"{a64:.0f} | {a16x:.0f} | {ver / packed:.2f} | "
                         f"{61 * (ver - packed) / 1e3:+.1f} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/mtp_b200_verify.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")              # the profile's extrapolation notes
    rows = {r.id: r for r in read_rows(default_csv_path())}
    parts, acceptance, cycle = cycle_parts(rows[MTP_ROW])
    accept = acceptance.mean
    lines = ["# B200 FP8 DeepSeek-R1 agg TP8 with MTP: where epsim's TPOT falls short", "",
             f"Generated by `python benchmarks/mtp_b200_verify.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). "
             "The script's docstring says what each table compares.", "",
             "## 1. The whole-set record, SGLang 0.5.9 rows (TPOT, ms; validation only)", ""]
    lines += record_split(record_rows(), accept)
    lines += ["", f"## 2. epsim's verify cycle at b requests x {KEYS} keys (`{MTP_ROW}`; ms a step)",
              "", f"epsim's accept length here: {accept:.2f} tokens a verify step "
              f"({acceptance.label}; `epsim.sim.accept_sources`).", ""]
    lines += parts
    lines += ["", "## 3. Routed experts, one MoE layer, µs: epsim against AIC's "
              f"`{MOE_TABLE['moe']}`", ""]
    lines += moe_growth(cycle)
    lines += ["", "## 4. The verify step's MLA decode kernel, one layer, µs: epsim against AIC's "
              f"`{MLA_TABLE['mla']}`", ""]
    lines += verify_kernel(rows[MTP_ROW])
    lines += ["", "## 5. epsim's agg benchmark runs, the middle half: prefill steps between the "
              "cycles (ms; measured columns validation only, a diagnostic)", ""]
    record = {r["id"]: r for r in record_rows()}
    lines += timeline_table(rows, record, [(row_id, 1.0, accept if mtp else 1.0)
                                           for row_id, mtp in TIMELINE_ROWS])
    lines += ["", READING.rstrip()]
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
