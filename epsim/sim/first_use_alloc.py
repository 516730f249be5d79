"""SGLang's paged KV allocator compiles its Triton kernels on first use of a key, in the run.

With `page_size` > 1 (the `trtllm_mla` backend's 64 on Blackwell), SGLang 0.5.9's
`PagedTokenToKVPoolAllocator` (`sglang/srt/mem_cache/allocator.py`) launches a Triton kernel from
the scheduler loop of every TP rank before each forward: `alloc_extend_kernel` for a prefill batch
and `alloc_decode_kernel` for a decode batch. Its compiled-kernel key (Triton 3.5's JIT) is:

- `bs_upper = next_power_of_2(requests in the batch)`, a `tl.constexpr`;
- for the extend kernel `max_num_extend_tokens`, a constexpr, the allocator's
  `seen_max_num_extend_tokens_next_power_of_2` (the largest `next_power_of_2` of a batch's extend
  tokens so far: it only grows);
- the 16-byte alignment of `free_page_ptr`: `self.free_pages`, an int64 tensor that every
  allocation slices (`self.free_pages[num_new_pages:]`), so it is aligned iff an even number of
  pages went out since it was last rebuilt. An aggregated server rebuilds it on every `free`
  (`torch.cat`, `need_sort` is off outside P/D), i.e. whenever a request finishes.

The other arguments are fresh allocations (aligned) or fixed. Before the run the server met: its
start-up request (3 tokens in, 8 out: an extend of one request at `max_num_extend_tokens` 4, then
decodes of one), and the harness's warm-up (`warmup_batches`: batches of copies of the run's first
request, prefilled in chunks, decoded together, finished together). A step whose batch needs a key
not met waits for its compile (every rank compiles at once: the step waits for one).

Under EAGLE v1 speculative decoding (MTP: topk 1, a paged cache) each decode cycle also launches,
outside the CUDA graph, `assign_req_to_token_pool` and `assign_draft_cache_locs` keyed on
`next_power_of_2(requests)` and `create_extend_after_decode_spec_info` keyed on
`next_power_of_2(max(steps + 1, requests))` (`sglang/srt/speculative/`; their other constexprs are
the server's, their pointers fresh tensors): `spec_compile_s` prices them, met as the allocator's
decode keys are (the start-up request's and the warm-up's decodes included).
"""

from __future__ import annotations

import numpy as np

STARTUP_PROMPT_TOKENS, STARTUP_OUTPUT_TOKENS = 3, 8   # `_execute_server_warmup` (http_server.py)
# the spec-v1 kernels keyed on the batch: the least `requests` their `bs_upper` takes, by the
# draft's steps (eagle_info.py:716 pads `create_extend_after_decode_spec_info` to steps + 1)
SPEC_KERNELS = {"assign_req_to_token_pool": lambda steps: 1,
                "assign_draft_cache_locs": lambda steps: 1,
                "create_extend_after_decode_spec_info": lambda steps: steps + 1}


def next_power_of_2(n: int) -> int:
    """Triton's `next_power_of_2` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def new_pages(context: np.ndarray, extend: np.ndarray, page_size: int) -> int:
    """Pages an allocation of `extend` tokens after `context` ones takes, summed over requests.

    Args:
        context: [requests] int, KV entries each request holds already.
        extend: [requests] int, tokens it adds.
    """
    after = -(-(context + extend) // page_size)
    return int((after - -(-context // page_size)).sum())


class PagedAllocCompiles:
    """The allocator kernels' keys one scheduler process met, and the stall a new one costs.

    Args:
        page_size: KV page size (tokens).
        extend_compile_s: one `alloc_extend_kernel` compile, host seconds.
        decode_compile_s: one `alloc_decode_kernel` compile, host seconds.
        chunk_tokens: the chunked-prefill size (the warm-up's prefill steps).
        warmup_batches: copies of the first request in each warm-up batch.
        first_request: (prompt, output) tokens of the run's first request (the warm-up's).
        spec_compile_s: under speculative decoding, host seconds of one compile of each spec-v1
            kernel by name (`SPEC_KERNELS`); empty: no draft.
        spec_num_steps: the draft's `speculative_num_steps`.
        extend_keys_tokens: the extend kernel keys on `max_num_extend_tokens` (SGLang 0.5.6-0.5.9;
            0.5.10 loops over 4096-token blocks instead, sgl-project/sglang#19898).
    Attributes:
        num_compiles: kernels compiled inside the run so far.
        stalled_us: microseconds the run's steps waited for them.
        compiled: the keys compiled inside the run, in order.
    """

    def __init__(self, page_size: int, extend_compile_s: float, decode_compile_s: float,
                 chunk_tokens: int, warmup_batches: list[int], first_request: tuple[int, int],
                 spec_compile_s: dict[str, float] | None = None, spec_num_steps: int = 0,
                 extend_keys_tokens: bool = True):
        self.page_size, self.chunk_tokens = page_size, chunk_tokens
        self.compile_us = {"extend": extend_compile_s * 1e6, "decode": decode_compile_s * 1e6}
        self.spec_us = {name: s * 1e6 for name, s in (spec_compile_s or {}).items()}
        unknown = set(self.spec_us) - set(SPEC_KERNELS)
        if unknown:
            raise ValueError(f"spec_compile_s names unknown kernels {sorted(unknown)}; known: "
                             f"{', '.join(SPEC_KERNELS)}")
        self.spec_num_steps, self.extend_keys_tokens = spec_num_steps, extend_keys_tokens
        self.met: set[tuple] = set()
        self.seen_max_extend = 1
        self.pages_out = 0                     # pages sliced off `free_pages` since its rebuild
        self.num_compiles = 0
        self.stalled_us = 0.0
        self.compiled: list[tuple] = []
        self._slot_req: np.ndarray | None = None
        self._replay(STARTUP_PROMPT_TOKENS, STARTUP_OUTPUT_TOKENS, 1)
        for copies in warmup_batches:
            self._replay(*first_request, copies)

    def _extend(self, context: np.ndarray, extend: np.ndarray) -> tuple:
        self.seen_max_extend = max(self.seen_max_extend, next_power_of_2(int(extend.sum())))
        key = ("extend", next_power_of_2(len(extend)),
               self.seen_max_extend if self.extend_keys_tokens else 0, self.pages_out % 2 == 0)
        self.pages_out += new_pages(context, extend, self.page_size)
        return key

    def _decode(self, context: np.ndarray) -> tuple:
        key = ("decode", next_power_of_2(len(context)), self.pages_out % 2 == 0)
        self.pages_out += int((context % self.page_size == 0).sum())
        return key

    def _spec(self, requests: int) -> list[tuple]:
        """The spec-v1 kernels' keys a decode cycle of `requests` meets (none without a draft)."""
        return [("spec", name, next_power_of_2(max(SPEC_KERNELS[name](self.spec_num_steps),
                                                   requests)))
                for name in self.spec_us]

    def _replay(self, prompt: int, output: int, copies: int) -> None:
        """A batch of `copies` identical requests before the run: chunked prefill, decodes, free."""
        done = np.zeros(copies, dtype=np.int64)
        while done[-1] < prompt:               # oldest first, `chunk_tokens` a step
            budget, context, extend = self.chunk_tokens, [], []
            for i in np.flatnonzero(done < prompt):
                if budget <= 0:
                    break
                take = min(prompt - done[i], budget)
                context.append(done[i]), extend.append(take)
                done[i] += take
                budget -= take
            self.met.add(self._extend(np.array(context), np.array(extend)))
        for step in range(output - 1):         # the first token comes with the prefill
            self.met.add(self._decode(np.full(copies, prompt + step)))
            self.met.update(self._spec(copies))
        self.pages_out = 0                     # they finish together: `free` rebuilds the pages

    def stall_us(self, plan, context: np.ndarray, slot_req: np.ndarray) -> float:
        """Microseconds a step running `plan` waits for compiles.

        Args:
            plan: the step's `epsim.sim.step_plan.Plan` (`decoding`, `prefill_alloc`).
            context: [ranks, slots] int, KV entries of each slot's request before the step.
            slot_req: [ranks, slots] int, request id in each slot (-1 free).
        Returns:
            the slowest rank's wait (each attention rank runs its own allocator: rank 0's here,
            the TP ranks of one scheduler sharing it).
        """
        if self._slot_req is not None and np.any(
                (self._slot_req >= 0) & (self._slot_req != slot_req)):
            self.pages_out = 0                 # a request finished: `free` rebuilt the pages
        self._slot_req = slot_req.copy()
        keys = []
        if plan.prefill_alloc is not None and np.any(plan.prefill_alloc[0] > 0):
            take = plan.prefill_alloc[0] > 0
            keys.append(self._extend(context[0][take].astype(np.int64),
                                     plan.prefill_alloc[0][take].astype(np.int64)))
        if np.any(plan.decoding[0]):
            keys.append(self._decode(context[0][plan.decoding[0]].astype(np.int64)))
            keys += self._spec(int(np.count_nonzero(plan.decoding[0])))
        wait_us = 0.0
        for key in keys:
            if key not in self.met:
                self.met.add(key)
                self.compiled.append(key)
                self.num_compiles += 1
                wait_us += self.spec_us[key[1]] if key[0] == "spec" else self.compile_us[key[0]]
        self.stalled_us += wait_us
        return wait_us
