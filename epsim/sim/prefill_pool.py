"""A prefill server's KV pool holds a batch until its KV has gone to the decode side: where the
pool cannot hold the next batch beside the running one, the next forward waits for the transfer.

As SGLang 0.5.8 serves a P/D prefill (line numbers of `sglang/srt/` in the 0.5.8 wheel):

- the prefill server sets every request's `max_new_tokens` to 1 (`disaggregation/prefill.py`
  221-225), so its `PrefillAdder` takes a request only while the whole prompt (+1) fits the free
  pool (`managers/schedule_policy.py` 702-721: `total_tokens >= self.rem_total_tokens` ->
  `NO_TOKEN`): the engine's pool rule (`epsim.sim.kv_pool`) reserves one token a request on a
  prefill server, not `num_reserved_decode_tokens` (`reserve_tokens`);
- a prefilled request's KV stays in the pool until its transfer is done: the batch's result
  sends it (`process_batch_result_disagg_prefill`, `prefill.py` 478, `send_kv_chunk`) and moves
  the request to the inflight queue, which frees it on `KVPoll.Success`
  (`process_disagg_prefill_inflight_queue`, `prefill.py` 554-555, `release_kv_cache`);
- the overlap loop forms the next batch while the current one runs (`prefill.py` 364-401), so
  the pool must hold the running batch and the next one. With less than two chunks the next
  batch finds no room until the previous batch's transfer ends (the loop turns with no batch,
  polling the inflight queue each turn): forward and transfer take turns.

`--max-total-tokens` caps the pool (`DeploymentSpec.max_total_tokens`, `epsim.sim.memory`); the
srt-slurm FP4 8k/1k TP4 prefills set it to their chunk, 131072, and the low-latency TP prefills
to 8192 beside an 8192 chunk (1k/1k) or 32768 beside 24576 or 32768 (8k/1k)
(`epsim.validate.silicon.pd_recipe_flags`). The transfer is the batch's KV from the GPU that
sends it -- under DP attention each rank its own requests, under attention TP one rank for the
group (MLA's latent: the decode side asks attention-TP rank 0 only, `disaggregation/common/
conn.py` 340-359, `target_tp_rank`) -- over one GPU's scale-out NIC (`epsim.cost.kv_transfer`:
datasheet unless the profile holds a measured `<path>/kv_transfer`). Between one and two chunks
the next batch would get what the running one leaves; that is not modelled: the rule is all or
nothing, an upper bound on the wait where a pool sits there (the GB200 FP4 and FP8 and GB300 FP4
low-latency 8k/1k prefills, 32768 beside a 24576 chunk: their forwards wait for each batch's
transfer, a few ms at 8k). The wait delays the next batch; a request's own KV after its forward
stays the P/D handoff's term (`epsim.validate.silicon.handoff`: its last chunk alone, not its
share of the batch's transfer).
"""

from __future__ import annotations

from dataclasses import dataclass

from epsim.cost.kv_transfer import kv_transfer

KV_PATH = "mooncake"      # SGLang's default --disaggregation-transfer-backend, as the handoff prices it
BATCHES_HELD = 2          # the running batch and the one the overlap loop forms beside it


@dataclass(frozen=True)
class PrefillHold:
    """The wait a serialising prefill pool puts between forwards.

    Attributes:
        pool_tokens: one GPU's KV pool (tokens).
        chunk_tokens: a rank's prefill tokens per forward (`chunked_prefill_size`).
        model, cluster, profile, kv_cache_dtype: what prices the transfer (`kv_transfer`; a
            profile's measured `<path>/kv_transfer` replaces the datasheet rate).
    """

    pool_tokens: int
    chunk_tokens: int
    model: object
    cluster: object
    profile: object
    kv_cache_dtype: str

    def wait_us(self, sent_tokens: float) -> float:
        """The transfer (µs) of `sent_tokens` prompt tokens' KV from one GPU: the time the
        next forward waits for the pool."""
        if sent_tokens <= 0:
            return 0.0
        return kv_transfer(self.model, self.cluster, KV_PATH, sent_tokens, self.profile,
                           kv_cache_dtype=self.kv_cache_dtype).transfer_us


def reserve_tokens(deployment) -> int:
    """KV tokens a rank's pool keeps free per running request when it admits another
    (`epsim.sim.kv_pool`): one on a P/D prefill server (its requests' `max_new_tokens`, module
    doc), `num_reserved_decode_tokens` elsewhere."""
    if deployment.disaggregation_mode == "prefill":
        return 1
    return deployment.num_reserved_decode_tokens


def prefill_hold(scenario, pool_tokens: int, profile=None) -> PrefillHold | None:
    """The hold of `scenario`'s prefill server whose pool holds `pool_tokens` a GPU, or None
    where none applies: not a prefill server, or a pool that holds two chunks (module doc)."""
    d = scenario.deployment
    if d.disaggregation_mode != "prefill" or pool_tokens >= BATCHES_HELD * d.chunked_prefill_size:
        return None
    return PrefillHold(int(pool_tokens), int(d.chunked_prefill_size), scenario.model,
                       scenario.cluster, profile, d.kv_cache_dtype)
