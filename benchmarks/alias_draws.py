"""Exact expert-load draws two ways: numpy's `rng.multinomial` (one binomial per expert and row)
and the alias table (`epsim.routing.sampling.AliasTable.slot_loads`: one uniform per slot), at the
shapes the simulator draws — a pool's `[draws, layers, experts]` block (DeepSeek-V3/R1: 58 MoE
layers x 256 experts; Qwen3-235B: 94 x 128) at 1 and 4 draws — over the exact branch's loads
(slots per expert below `EXACT_BELOW_SLOTS_PER_EXPERT`).

Speed: CPU ms per block, the fastest of `REPEATS` rounds of `CALLS` calls each (process time:
the machine is shared), with glibc's heap kept grown (`keep_heap`): a simulation allocates these
shapes all the time and its heap stays grown (a silicon row takes a few page faults a step), but
a process that only draws gives its heap back after every call and faults it in again (~800
page faults a call), which would time the kernel's page zeroing rather than either sampler.
The alias table is used below `ALIAS_BELOW_SLOTS_PER_EXPERT`, a level up to which it is the
cheaper of the two on both models and both block sizes (tests/benchmarks/
test_recorded_results.py holds the constant to this table).

Distribution: at each level, `DRAWS` alias draws of a skewed popularity (gamma(0.3) shares, some
experts at 0, capped at 1/8) against the multinomial's moments: chi-square per degree of freedom
of the mean counts (experts expecting >= 20 slots in all; ~1 for exact draws, as numpy's own
multinomial gives beside it), the median ratio of the variance to n q (1 - q), and slots landing
on zero-share experts (must be 0).

    python benchmarks/alias_draws.py --write      # record benchmarks/results/alias_draws.md
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

import numpy as np

from recorded import recorded_main

from epsim.routing.sampling import ALIAS_BELOW_SLOTS_PER_EXPERT, EXACT_BELOW_SLOTS_PER_EXPERT, AliasTable

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "alias_draws.md"
MODELS = (("DeepSeek-V3/R1", 58, 256), ("Qwen3-235B", 94, 128))
LEVELS = (0.0625, 0.25, 1.0, 2.0, 3.0, 4.0, 6.0, 7.9)        # slots per expert
BLOCKS = (1, 4)
CALLS, REPEATS = 10, 3
DRAWS = 4000


def popularity(layers: int, experts: int, seed: int = 0) -> np.ndarray:
    """[layers, experts] skewed shares: gamma(0.3), a few experts at 0, capped at 1/8."""
    rng = np.random.default_rng(seed)
    shares = rng.gamma(0.3, size=(layers, experts))
    shares[:, :3] = 0.0
    for _ in range(8):
        shares /= shares.sum(axis=1, keepdims=True)
        shares = np.minimum(shares, 1 / 8)
    return shares / shares.sum(axis=1, keepdims=True)


def keep_heap() -> None:
    """glibc's heap: serve blocks up to 32 MiB from it and give back only above 64 MiB free
    (`mallopt` M_MMAP_THRESHOLD, M_TRIM_THRESHOLD; nothing where there is no glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(-1, 64 << 20)          # M_TRIM_THRESHOLD
    libc.mallopt(-3, 32 << 20)          # M_MMAP_THRESHOLD


def cpu_ms(draw) -> float:
    draw()
    best = np.inf
    for _ in range(REPEATS):
        start = time.process_time()
        for _ in range(CALLS):
            draw()
        best = min(best, (time.process_time() - start) / CALLS * 1e3)
    return best


def moments(draws: np.ndarray, shares: np.ndarray, num_slots: int) -> tuple[float, float, int]:
    """(chi-square per degree of freedom of the mean counts, median variance ratio, slots on
    zero-share experts) of `draws` [draws, layers, experts]."""
    num = draws.shape[0]
    expected = num_slots * shares
    big = expected * num >= 20
    mean = draws.mean(axis=0)
    chi2 = float(((mean - expected)[big] ** 2 * num / expected[big]).sum() / big.sum())
    var = draws.var(axis=0)[big] / (num_slots * shares * (1 - shares))[big]
    return chi2, float(np.median(var)), int(draws[:, shares == 0].sum())


def make() -> str:
    keep_heap()
    rng = np.random.Generator(np.random.SFC64(7))
    lines = ["Speed: CPU ms per block (`multinomial` / `alias`, and the alias table's speed-up).",
             "", "| model | layers x experts | draws | slots per expert | slots | multinomial ms | "
             "alias ms | speed-up |", "|---|---|---|---|---|---|---|---|"]
    wins = {}
    for name, layers, experts in MODELS:
        shares = popularity(layers, experts)
        table = AliasTable(shares)
        for num_draws in BLOCKS:
            block = np.broadcast_to(shares, (num_draws, layers, experts))
            for level in LEVELS:
                slots = max(int(level * experts), 1)
                multi = cpu_ms(lambda: rng.multinomial(slots, block).astype(np.float64))
                alias = cpu_ms(lambda: table.slot_loads(num_draws, slots, rng))
                wins.setdefault(level, []).append(multi / alias)
                lines.append(f"| {name} | {layers} x {experts} | {num_draws} | {level:g} | {slots} | "
                             f"{multi:.3f} | {alias:.3f} | {multi / alias:.2f}x |")
    lines += ["", f"The alias table is used below {ALIAS_BELOW_SLOTS_PER_EXPERT:g} slots per expert "
              f"(exact draws end at {EXACT_BELOW_SLOTS_PER_EXPERT:g}); its least speed-up over "
              "every model and block, per level: "
              + ", ".join(f"{level:g}: {min(w):.2f}x" for level, w in wins.items()) + ".", "",
              f"Distribution: {DRAWS} draws of DeepSeek-V3/R1's shape (58 x 256) at each level, "
              "alias beside numpy's multinomial.", "",
              "| slots per expert | sampler | chi-square / dof (mean) | variance / n q (1 - q), "
              "median | slots on zero-share experts |", "|---|---|---|---|---|"]
    shares = popularity(58, 256, seed=1)
    table = AliasTable(shares)
    for level in (0.25, 1.0, 3.0):
        slots = int(level * 256)
        for sampler, draw in (("alias", lambda: table.slot_loads(8, slots, rng)),
                              ("multinomial", lambda: rng.multinomial(
                                  slots, np.broadcast_to(shares, (8, 58, 256))).astype(float))):
            draws = np.concatenate([draw() for _ in range(DRAWS // 8)])
            chi2, var, zero = moments(draws, shares, slots)
            lines.append(f"| {level:g} | {sampler} | {chi2:.3f} | {var:.3f} | {zero} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULT, "Exact expert-load draws: multinomial against "
                         "the alias table", "python benchmarks/alias_draws.py --write", make)


if __name__ == "__main__":
    sys.exit(main())
