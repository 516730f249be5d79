"""The pool stepper's row draws (`epsim.sim.stepper.PoolStepper.draw_rows`, the speculative
leap's `epsim.sim.spec_leap._picks`) take many bounded integers in one call: the same values and
the same generator state after as one call a draw, which the one-step loop makes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from epsim.sim.spec_leap import _picks
from epsim.sim.stepper import PoolStepper


def _generator(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.SFC64([seed, 0x9007]))     # the stepper's kind


def _same_state(a: np.random.Generator, b: np.random.Generator) -> bool:
    # the state holds arrays (SFC64's words) and the half-used 64-bit output: compared as text
    return repr(a.bit_generator.state) == repr(b.bit_generator.state) and a.random() == b.random()


def test_rows_drawn_at_once_are_the_rows_drawn_one_by_one():
    for seed in range(20):
        for size in (2, 3, 7, 64, 1000):
            for num in (1, 2, 5, 33):
                stepper = PoolStepper.__new__(PoolStepper)        # only its stream is used
                stepper.rng = _generator(seed)
                stepper.rng.integers(5, size=seed % 3)            # a part-used 64-bit output
                alone = _generator(seed)
                alone.integers(5, size=seed % 3)
                rows = stepper.draw_rows(SimpleNamespace(rows=[None] * size), num)
                assert rows == [int(alone.integers(size)) for _ in range(num)]
                assert _same_state(stepper.rng, alone)


def test_draft_picks_drawn_at_once_follow_the_cycles_order():
    for seed in range(20):
        for steps, sizes in ((3, (4, 6)), (2, (1, 5)), (4, (3, 1)), (3, (1, 1)), (1, (None, 3))):
            decode = None if sizes[0] is None else SimpleNamespace(rows=list(range(sizes[0])))
            extend = SimpleNamespace(rows=list(range(100, 100 + sizes[1])))
            draft = SimpleNamespace(steps=steps, _pick=_generator(seed))
            alone = _generator(seed)
            num = 1 + seed % 6
            got = _picks(draft, decode, extend, num)

            def one(pool):
                return pool.rows[int(alone.integers(len(pool.rows)))] if len(pool.rows) > 1 \
                    else pool.rows[0]

            want_decode, want_extend = [], []
            for _ in range(num):
                want_decode += [one(decode) for _ in range(steps - 1)]
                want_extend.append(one(extend))
            assert got == (want_decode, want_extend)
            assert _same_state(draft._pick, alone)
