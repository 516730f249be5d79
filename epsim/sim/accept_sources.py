"""Published acceptance of DeepSeek's MTP draft by the kind of prompts a workload sends.

A speculative run whose deployment states no `speculative_accept_length` takes its acceptance
from a published measurement chosen by `workload.prompt_kind` (`SOURCES`). Acceptance is a
property of the text the target writes, and that follows the prompt: DeepSeek-R1 answers random
token ids wrapped in its chat template with ordinary chat prose, and continues raw random ids
(no template) with text its MTP module predicts far more easily.

Each source gives either a per-position acceptance or a mean tokens per verify step (SGLang's
`avg_spec_accept_length`: accepted drafts + 1) at a stated draft depth. The chain
(`epsim.sim.speculative.Acceptance`) accepts every draft position with one rate `a`: a mean
`L` at depth `S` is held as the `a` whose chain mean `1 + a + ... + a^S` is `L`
(`chain_rate`), and a deployment with another depth takes the same `a` (deeper or shallower
positions extrapolated: the MTP module is reused autoregressively past its first position).
"""

from __future__ import annotations

from dataclasses import dataclass

def chain_mean(rate: float, steps: int) -> float:
    """Mean tokens per verify step of a chain accepting each draft with `rate`: 1 + a + ... + a^S."""
    return float(sum(rate ** j for j in range(steps + 1)))


def chain_rate(mean: float, steps: int) -> float:
    """The per-position acceptance `a` in [0, 1] whose chain mean over `steps` drafts is `mean`
    (bisection: the mean grows with `a`); 1.0 at or above `steps + 1`."""
    if mean >= steps + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if chain_mean(mid, steps) < mean else (low, mid)
    return 0.5 * (low + high)


@dataclass(frozen=True)
class AcceptSource:
    """One published acceptance (module doc).

    Attributes:
        prompt_kind: the `workload.prompt_kind` it serves.
        rate: per-position acceptance `a` of the chain.
        label: a few words for a CLI line; text: the citation and its conditions, one sentence.
    """

    prompt_kind: str
    rate: float
    label: str
    text: str


DEEPSEEK_ACCEPT_RATE = 0.85     # DeepSeek-V3 report: second-token acceptance 85-90 %
# InferenceX PR #649 (SemiAnalysisAI/InferenceX, merged 2026-02-06 as dab13cea0): DeepSeek-R1
# under SGLang on MI355X, accept length with and without `--use-chat-template` on the harness's
# random dataset. The PR states no draft depth; a mean of 3.55 needs at least 3 draft steps
# (2 steps cap it at 3), so both figures are read at 3: the fewest that hold them both.
PR649_STEPS = 3
PR649_CHAT_MEAN = 2.50          # random ids in the chat template (MT-Bench: ~2.50 alike)
PR649_RAW_MEAN = 3.55           # raw random ids, no template

_PR649 = ("InferenceX PR #649 (SemiAnalysisAI/InferenceX, 2026-02-05, DeepSeek-R1 MTP under "
          "SGLang on MI355X, bench_serving's random dataset): accept length ~{mean:.2f} {what}; "
          "no draft depth stated, read at {steps} steps (the fewest that hold the same "
          "comparison's 3.55 without the template): a = {rate:.3f} at every position")

SOURCES = {
    "natural": AcceptSource(
        "natural", DEEPSEEK_ACCEPT_RATE, "DeepSeek-V3 report, 0.85 a position",
        "DeepSeek-V3 technical report (arXiv 2412.19437, section 5.4.3): second-token "
        "acceptance 85-90 % for natural text; a = 0.85 at every position (deeper positions "
        "extrapolated)"),
    "random_chat": AcceptSource(
        "random_chat", chain_rate(PR649_CHAT_MEAN, PR649_STEPS),
        f"InferenceX #649, random ids in the chat template, {PR649_CHAT_MEAN:.2f} at "
        f"{PR649_STEPS} steps",
        _PR649.format(mean=PR649_CHAT_MEAN, steps=PR649_STEPS,
                      rate=chain_rate(PR649_CHAT_MEAN, PR649_STEPS),
                      what="with random token ids in DeepSeek-R1's chat template "
                           "(--use-chat-template; MT-Bench ~2.50 alike)")),
    "random": AcceptSource(
        "random", chain_rate(PR649_RAW_MEAN, PR649_STEPS),
        f"InferenceX #649, raw random ids, {PR649_RAW_MEAN:.2f} at {PR649_STEPS} steps",
        _PR649.format(mean=PR649_RAW_MEAN, steps=PR649_STEPS,
                      rate=chain_rate(PR649_RAW_MEAN, PR649_STEPS),
                      what="with raw random token ids (no chat template)")),
}
