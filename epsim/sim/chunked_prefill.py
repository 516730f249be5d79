"""Chunked prefill: how a rank's extend step splits its token budget over pending prompts.

SGLang's rule: each step a rank prefills at most `chunked_prefill_size` tokens (less the decode
count with `enable_mixed_chunk`), oldest requests first; a prompt whose last chunk fits finishes
this step and samples its first token. A request joins the step only while its prompt is shorter
than what is left of `max_prefill_tokens` (`PrefillAdder.add_one_req`), the first one always: a
small `max_prefill_tokens` runs one long prompt a step, however large the chunk.
`extend_counts` forms that step's per-slot allocation and the per-rank counts the cost model
prices (`epsim.cost.attention.BatchCounts`); the scheduler's per-slot path
(`epsim.sim.batching.Scheduler.plan`) calls it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Extend:
    """One extend step's prefill, per slot and per rank.

    Attributes:
        alloc: [ranks, slots] int prefill tokens each slot runs this step.
        finishing: [ranks, slots] bool, the slot's prompt completes this step.
        prefill_tokens: [ranks] float64 prefill tokens.
        prefill_context: [ranks] float64 sum over prefilling slots of their context after it.
        prefill_pairs: [ranks] float64 query-key pairs of the chunks' causal attention.
        prefill_seqs: [ranks] float64 slots that prefill.
        finishing_count: [ranks] float64 prompts that complete.
    """

    alloc: np.ndarray
    finishing: np.ndarray
    prefill_tokens: np.ndarray
    prefill_context: np.ndarray
    prefill_pairs: np.ndarray
    prefill_seqs: np.ndarray
    finishing_count: np.ndarray


def chunk(pending: np.ndarray, budget: np.ndarray, slot_req: np.ndarray,
          prefill_left: np.ndarray, input_budget: np.ndarray | None = None) -> np.ndarray:
    """[ranks, slots] prefill tokens per slot: oldest requests (lowest id) first until `budget`.

    SGLang 0.5.6's `PrefillAdder` (`schedule_policy.py` `add_one_req`, `_update_prefill_budget`)
    keeps a second budget, `rem_input_tokens` (`--max-prefill-tokens`, less the decode count with
    mixed chunks): a request after the first joins only if its prompt left is below what the
    batch has left of it (`input_tokens >= rem_input_tokens` and a non-empty batch: stop), and
    the first that does not join ends the batch (the scheduler's loop breaks).

    Args:
        pending: [ranks, slots] bool, slots with prompt tokens left.
        budget: [ranks] int64 prefill tokens each rank may run.
        slot_req: [ranks, slots] int32 request id per slot (-1: free).
        prefill_left: [ranks, slots] int32 prompt tokens each slot has left.
        input_budget: [ranks] int64 `rem_input_tokens` at the batch's start; None: never binds.
    """
    # the fill at slot_req's own dtype: NumPy 2.5 refuses a Python int its dtype cannot hold
    key = np.where(pending, slot_req, np.iinfo(slot_req.dtype).max)
    order = np.argsort(key, axis=1, kind="stable")
    left = np.take_along_axis(np.where(pending, prefill_left, 0), order, axis=1)
    before = np.cumsum(left, axis=1) - left
    take = np.clip(budget[:, None] - before, 0, left)
    if input_budget is not None:
        # the first request always joins; each later one while its prompt is below the input
        # budget the ones before it left; the first refused ends the batch
        joins = left < (input_budget[:, None] - before)
        joins[:, 0] = True
        take = np.where(np.logical_and.accumulate(joins, axis=1), take, 0)
    alloc = np.empty_like(take)
    np.put_along_axis(alloc, order, take, axis=1)
    return alloc


def extend_counts(pending: np.ndarray, budget: np.ndarray, slot_req: np.ndarray,
                  prefill_left: np.ndarray, context: np.ndarray,
                  input_budget: np.ndarray | None = None) -> Extend:
    """The extend step's allocation (`chunk`) and its per-rank counts.

    Args (beyond `chunk`'s):
        context: [ranks, slots] int32 KV entries each slot holds before the step.
    """
    alloc = chunk(pending, budget, slot_req, prefill_left, input_budget)
    finishing = (alloc > 0) & (alloc == prefill_left)
    return Extend(
        alloc=alloc, finishing=finishing,
        prefill_tokens=alloc.sum(axis=1).astype(np.float64),
        prefill_context=np.where(alloc > 0, context + alloc, 0).sum(axis=1).astype(np.float64),
        # each chunk token attends to the slot's context and the chunk up to itself
        prefill_pairs=(alloc * context + alloc * (alloc + 1) / 2.0).sum(axis=1),
        prefill_seqs=(alloc > 0).sum(axis=1).astype(np.float64),
        finishing_count=finishing.sum(axis=1).astype(np.float64))
