"""The decode path: a decode instance's slots kept by step count, not by per-slot counters.

While every rank of a decode instance is alive, every running request decodes one token per
step. So instead of counting each slot's context and tokens left down every step (the per-slot
path, `epsim.sim.batching`), a slot keeps the commit count at which its request finishes: its
context is its start plus the commits since, the slots that finish at each commit are looked
up in a queue (`FinishQueue`), and a step's inter-token gaps are all "now minus the last
commit". The per-slot arrays are formed only when asked for (`context`, `out_left`, the
window's last-token times) and for good once a rank fails (`Scheduler` then leaves this path).
The same bits as the per-slot path (tests/epsim/sim/test_batching.py).

One token per request per step is what this path rests on: decoding that makes a varying
number of tokens a step (speculative MTP steps) runs on the per-slot path.
"""

from __future__ import annotations

import numpy as np

from epsim.sim.slots import EMPTY_LEFT, FEW_FREE, SlotState
from epsim.sim.token_gaps import StepGaps, uniform_gaps


class DecodePath:
    """A decode instance's step counts over `state`'s slots (module doc).

    Attributes:
        commits: steps committed so far.
        ctx0: [ranks, slots] int64 context of a used slot's request less `commits`.
        end: [ranks, slots] int64 commit count at which a used slot's request finishes.
        finishing: the used slots by their `end`.
        last_commit_s: when the last step was committed: every used slot's last token but the
            in-flight step's admissions' (initial requests: t=0).
        in_flight: flat slots admitted by the step planned and not yet committed (None: none).
    """

    def __init__(self, state: SlotState):
        self.state = state
        shape = state.slot_req.shape
        self.commits = 0
        self.ctx0 = np.zeros(shape, dtype=np.int64)
        self.end = np.zeros(shape, dtype=np.int64)
        self.finishing = FinishQueue()
        self.last_commit_s = 0.0
        self.in_flight: np.ndarray | None = None
        self._gap_buf = np.empty(state.slot_req.size)

    def start(self, slots: np.ndarray, context: np.ndarray, out_left: np.ndarray) -> None:
        """Flat `slots` start with `context` and `out_left` tokens to go, now."""
        self.ctx0.reshape(-1)[slots] = context - self.commits
        # a request always decodes at least one token (`out_left` 0 ends after its first)
        end = self.commits + np.maximum(out_left, 1)
        self.end.reshape(-1)[slots] = end
        self.finishing.add(end, slots)

    def context(self) -> np.ndarray:
        """[ranks, slots] int32 KV entries of each slot's request (0 in a free slot)."""
        return np.where(self.state.used, self.ctx0 + self.commits, 0).astype(np.int32)

    def out_left(self) -> np.ndarray:
        """[ranks, slots] int32 tokens each slot's request has still to produce."""
        return np.where(self.state.used, self.end - self.commits, EMPTY_LEFT).astype(np.int32)

    def stamp_clock(self) -> None:
        """Write the last-token times this path does not keep: every used slot but those the
        step in flight admitted got its last token at the last commit."""
        timed = self.state.used.copy()
        if self.in_flight is not None:
            timed.reshape(-1)[self.in_flight] = False
        self.state.clock.stamp(timed, self.last_commit_s)

    def gaps(self, count: int, last_s: float, now_s: float) -> StepGaps:
        """The gaps closed at `now_s` by `count` slots whose last token came at `last_s`,
        summed as `TokenClock.emit` sums the gathered times (the same bits)."""
        return uniform_gaps(count, last_s, now_s, self._gap_buf)

    def commit(self, fresh_ids: np.ndarray | None, now_s: float) -> StepGaps:
        """A step finished at `now_s`: every used slot decoded one token, requests `fresh_ids`
        (admitted by this step) their first.

        Returns:
            the inter-token gaps the step closed.
        """
        state = self.state
        num_used = int(state.occupied.sum())     # = the plan's decode tokens (all used decode)
        fresh = 0 if self.in_flight is None else self.in_flight.shape[0]
        gaps = self.gaps(num_used - fresh, self.last_commit_s, now_s)   # slots with a token before
        self.last_commit_s = now_s
        self.in_flight = None
        self.commits += 1
        state.context_sum += state.occupied
        state.output_tokens_done += num_used
        if fresh_ids is not None:
            state.first_token_s[fresh_ids] = now_s
        done = self.finishing.pop(self.commits)
        if done is not None:
            state.finish(done, self.ctx0.reshape(-1)[done] + self.commits, now_s)
        return gaps


class FinishQueue:
    """Flat slots by the commit count at which their request ends (the decode path): a few
    slots a step in a dict, a cohort of many (the initial requests, a first admission) as one
    sorted array read with a cursor."""

    def __init__(self):
        self._few: dict[int, list[int]] = {}
        self._cohorts: list[list] = []          # [ends sorted, their slots, cursor]
        self._popped = 0                        # the last commit count asked for

    def add(self, ends: np.ndarray, slots: np.ndarray, few: bool = False) -> None:
        """Slots `slots` end at commit counts `ends`; `few`: into the dict whatever their
        number (a leap's admissions: many, but a few per count)."""
        if ends.shape[0] > FEW_FREE and not few:
            order = np.argsort(ends, kind="stable")
            self._cohorts.append([ends[order], slots[order], 0])
            return
        few = self._few
        for at, slot in zip(ends.tolist(), slots.tolist()):
            if at in few:
                few[at].append(slot)
            else:
                few[at] = [slot]

    def pop(self, at: int) -> np.ndarray | None:
        """int64 flat slots ending at commit count `at`, ascending (None: none); each count is
        asked for once, in increasing order."""
        parts = []
        self._popped = at
        few = self._few.pop(at, None)
        if few is not None:
            parts.append(np.array(few, dtype=np.int64))
        for cohort in self._cohorts:
            ends, slots, cursor = cohort
            if ends[cursor] == at:
                stop = int(np.searchsorted(ends, at, side="right"))
                parts.append(slots[cursor:stop])
                cohort[2] = stop
        if self._cohorts and any(c[2] == c[0].shape[0] for c in self._cohorts):
            self._cohorts = [c for c in self._cohorts if c[2] < c[0].shape[0]]
        if not parts:
            return None
        return np.sort(parts[0] if len(parts) == 1 else np.concatenate(parts))

    def peek(self, first: int, last: int) -> list[np.ndarray]:
        """What `pop(at)` would return for each `at` in `first..last` (empty arrays for none),
        leaving the queue as it is."""
        parts: list[list[np.ndarray]] = [[] for _ in range(last - first + 1)]
        few = self._few
        for at in range(first, last + 1):
            slots = few.get(at)
            if slots is not None:
                parts[at - first].append(np.array(slots, dtype=np.int64))
        for ends, slots, cursor in self._cohorts:
            bounds = np.searchsorted(ends, np.arange(first, last + 2), side="left").tolist()
            for i in range(last - first + 1):
                lo, hi = max(bounds[i], cursor), bounds[i + 1]
                if hi > lo:
                    parts[i].append(slots[lo:hi])
        empty = np.zeros(0, dtype=np.int64)
        return [empty if not p else np.sort(p[0] if len(p) == 1 else np.concatenate(p))
                for p in parts]

    def drop_through(self, last: int) -> None:
        """Forget every slot ending at a commit count up to `last` (`pop` of each in turn)."""
        few = self._few
        for at in range(self._popped + 1, last + 1):
            few.pop(at, None)
        self._popped = max(self._popped, last)
        for cohort in self._cohorts:
            cohort[2] = max(cohort[2], int(np.searchsorted(cohort[0], last, side="right")))
        self._cohorts = [c for c in self._cohorts if c[2] < c[0].shape[0]]
