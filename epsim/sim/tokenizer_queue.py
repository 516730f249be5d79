"""The server's tokenizer, which every text prompt passes before the scheduler sees it.

SGLang's `TokenizerManager` tokenises each text prompt synchronously in its asyncio loop
(`epsim.cost.tokenize`), so requests sent together reach the scheduler one tokenisation apart: the
k-th of a wave of N waits for the k - 1 before it (`serial`). Dynamo's frontend tokenises in Rust
on its tokio runtime's worker threads, each request in its own task (`parallel`: each waits for
its own prompt only). A request's TTFT still counts from its send (`SlotState.arrival_s`); only
the time its rank's queue sees it moves (`RankQueues.add`).
"""

from __future__ import annotations

import numpy as np

from epsim.cost.tokenize import tokenize_s


class TokenizerQueue:
    """One server's tokenizer (module doc).

    Args:
        serial: one prompt at a time (SGLang); False: every prompt at once (Dynamo).
    Attributes:
        free_s: when the tokenizer finishes the last prompt it was given (serial).
    """

    def __init__(self, serial: bool = True):
        self.serial = serial
        self.free_s = 0.0

    def through(self, sent_s: np.ndarray, input_len: np.ndarray) -> np.ndarray:
        """[n] times the scheduler receives requests sent at `sent_s` [n] (in send order) with
        prompts of `input_len` [n] tokens."""
        cost_s = tokenize_s(input_len)
        if not self.serial:
            return np.asarray(sent_s, dtype=np.float64) + cost_s
        out = np.empty(len(sent_s), dtype=np.float64)
        free = self.free_s
        for i, (sent, cost) in enumerate(zip(np.asarray(sent_s, dtype=np.float64), cost_s)):
            free = max(free, sent) + cost
            out[i] = free
        self.free_s = free
        return out
