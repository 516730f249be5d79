"""What epsim is known to miss on a silicon row: the named gaps, each a mechanism diagnosed in
docs/silicon.md or a reader under benchmarks/, that is not priced (or only in part) and the rows it
applies to.

A gap names a row from what the row *states* (system, mode, precision, model, clients, when and
by which harness it was measured, the layout InferenceX ran): never from its measured TTFT or
TPOT, which a gap's rule cannot see (`Facts` does not carry them). The tables of docs/silicon.md
then say how much of epsim's error falls on each gap's rows (`report.gaps_table`) and which gaps
the buckets above issue 39's targets hold (`report.targets_table`): the answer to "why does this
bucket miss" that the issue asks for, kept beside the numbers it explains, and a bucket where no
gap applies is said to have none named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from epsim.validate.silicon.agg_recipes import cold
from epsim.validate.silicon.inferencex import moment
from epsim.validate.silicon.mapping import INFERENCEX_SOURCE, with_draft
from epsim.validate.silicon.resolve import Resolved
from epsim.validate.silicon.rows import SiliconRow

FEW_CLIENTS = 8             # the few-client floor's runs (benchmarks/silicon_ttft_gap.py)
WIDE_EP = 8                 # an instance wider than one node's EP 8: its busiest rank's load sets the step


@dataclass(frozen=True)
class Facts:
    """What a row states, as a gap's rule sees it (no measured latency).

    Attributes:
        mode: "agg" or "disagg" as InferenceX ran it (GB200 rows filed as agg ran P/D pairs).
        measured_at: the source's measurement time (None: not stated).
        inferencex: the row comes from InferenceX's results (its harness is known).
        cold: measured before InferenceX's harness warmed the server up (`agg_recipes.cold`).
        mtp: it ran DeepSeek's MTP draft (`mapping.with_draft`; False where not known).
        decode_dp, decode_ep: attention DP and MoE EP of the instance whose steps set TPOT, as run.
        widest_ep: the largest MoE EP of any instance of the row, as run.
    """

    system: str
    mode: str
    precision: str
    model: str
    clients: int
    measured_at: str | None
    inferencex: bool
    cold: bool
    mtp: bool
    decode_dp: int
    decode_ep: int
    widest_ep: int


def facts(row: SiliconRow, ran: Resolved) -> Facts:
    """`row`'s stated facts, its layout as InferenceX ran it where known (`ran`, `resolve`)."""
    as_run = ran.row if ran.error is None else row
    drafted = with_draft(ran)
    sides = [as_run.agg] if as_run.mode == "agg" else [as_run.prefill, as_run.decode]
    return Facts(system=row.system, mode=as_run.mode, precision=row.precision, model=row.model,
                 clients=row.concurrency or 0, measured_at=row.measured_at,
                 inferencex=bool(INFERENCEX_SOURCE.search(row.source)), cold=cold(row),
                 mtp=drafted.error is None and drafted.speculative,
                 decode_dp=as_run.tpot_side.attention_dp_size, decode_ep=as_run.tpot_side.moe_ep_size,
                 widest_ep=max(side.moe_ep_size for side in sides))


def _before(f: Facts, when: str) -> bool:
    return f.measured_at is not None and moment(f.measured_at) < moment(when)


@dataclass(frozen=True)
class Gap:
    """One named gap.

    Attributes:
        key: its short name (the JSON entry's `gaps`, the tables' rows).
        metric: what it moves: "TTFT", "TPOT" or "both".
        status: "unexplained" (the rows' shape measured, no mechanism found), "unpriced" (a
            mechanism found, not modelled), "partly priced", or "input approximated".
        what: the mechanism or the measured shape, one sentence.
        evidence: where it is diagnosed.
        applies: the rule, on the row's stated facts.
    """

    key: str
    metric: str
    status: str
    what: str
    evidence: str
    applies: Callable[[Facts], bool]


GAPS = (
    Gap("cold first wave", "TTFT", "partly priced",
        "InferenceX's one-node harness before 2026-01-21 ran no warm-up: the first wave meets a cold "
        "server; its compiles and allocator growth are priced, the NVFP4 first-wave stall under "
        "`--enable-symm-mem` (2.7-6 s, NCCL symmetric-memory registration) is not: timing it needs 4-8 GPUs",
        "docs/silicon.md, \"What a cold v0.5.5 server meets first\"",
        lambda f: f.inferencex and f.mode == "agg" and f.cold),
    Gap("few-client floor", "TTFT", "unexplained",
        f"at 1-{FEW_CLIENTS} clients a 50-180 ms floor before the first token that moves with the server's "
        "release, not with the prompt, the client, the GPUs or the P/D handoff",
        "benchmarks/results/silicon_ttft_gap.md",
        lambda f: 0 < f.clients <= FEW_CLIENTS),
    Gap("P/D TTFT under load", "both", "unexplained",
        f"P/D runs past {FEW_CLIENTS} clients measure about 1.5x epsim's TTFT at every load: the "
        "few-client floor carried up (added to each series' runs it takes their MAPE at 16-64 clients "
        "from 33 to 18 %) and, past a few hundred clients, the prefill side's sustained rate (plateaus "
        "at 10-12 k prompt tokens/s a GPU where epsim's runs up to 2x faster at 1k prompts), which also "
        "sends the decode more requests than ran",
        "benchmarks/results/silicon_ttft_load.md",
        lambda f: f.mode == "disagg" and f.clients > FEW_CLIENTS),
    Gap("2025 GB200 wide-EP decode", "TPOT", "unpriced",
        "the 2025 campaigns' SGLang (a fork near 0.5.3, 0.5.1-rc0, 0.5.5.post2) runs a GB200 FP8 "
        "DP-attention decode step 8-10 ms slower than epsim's at the same batch; no op table older "
        "than SGLang 0.5.9 holds it",
        "benchmarks/results/gb200_wide_decode_tpot.md",
        lambda f: (f.system == "gb200" and f.precision == "fp8" and f.decode_dp > 1
                   and f.decode_ep > WIDE_EP and _before(f, "2026-01-01T00:00:00Z"))),
    Gap("R1's expert loads", "both", "input approximated",
        f"instances wider than EP {WIDE_EP}: DeepSeek-R1's expert loads on the harness's random prompts "
        "are recorded nowhere; DeepSeek-V3's recorded loads are replayed, and the busiest rank sets the step",
        "docs/silicon.md, \"Why the GB200 FP8 wide-EP 8k/1k rows miss\"",
        lambda f: f.widest_ep > WIDE_EP),
    Gap("MTP verify and acceptance", "TPOT", "unexplained",
        "MTP runs: the measured gain from the draft shrinks with the clients (B200 FP8 TP8 twin pairs "
        "1.5x at 4, 1.1-1.2x at 64) where epsim's grows (1.7-1.8x at 256-512), so its verify steps of 3 "
        "tokens a request are priced too fast at load (-29 to -54 % there); and the acceptance on the "
        "harness's chat-wrapped random prompts is InferenceX PR #649's MI355X figure (2.17 tokens a "
        "verify at 2 draft steps), not measured on these rows",
        "docs/silicon.md, \"Why the aggregated rows miss\"; benchmarks/results/mtp_acceptance_rows.md",
        lambda f: f.mtp),
    Gap("Qwen3-235B H200 step", "TPOT", "unexplained",
        "AIConfigurator's own runs (server flags not stated): the measured decode step at 2-4 requests "
        "sits above the sum of the op tables, which epsim's step matches",
        "benchmarks/results/qwen_h200_decode_stages.md",
        lambda f: f.model.startswith("Qwen3-235B") and f.system == "h200_sxm"),
)


def named(row: SiliconRow, ran: Resolved) -> list[str]:
    """The keys of the gaps that apply to `row` (`ran`: `resolve(row)`), in `GAPS` order."""
    stated = facts(row, ran)
    return [gap.key for gap in GAPS if gap.applies(stated)]
