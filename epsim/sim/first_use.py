"""The kernels a run compiles on first use: which prefill steps stop for a compile, and how long.

`deployment.first_use_compile.kernel` picks what is compiled:

- `sglang_triton_fused_moe`: a serving process compiles a Triton kernel the first time a batch
  needs a shape key it has not met (`epsim.cost.first_use`). What it met before the simulated
  run: its start-up (CUDA-graph capture of every decode batch size up to `cuda_graph_max_bs`,
  which compiles their keys) and the benchmark's warm-up (`warmup_batches`: prefill batches of
  that many copies of the run's first prompt, InferenceX's `--num-warmups 2N` of
  `input_requests[0]`, split into chunks of `chunked_prefill_size`). Each prefill step of the run
  whose token count maps to a key not met yet adds `KERNELS_PER_KEY x compile_s` to that step
  (every TP rank compiles at once, so the step waits for one rank's compile); the key is then met.
- `flashinfer_cutlass_fmha`: one module, built the first time a prefill step attends to a prefix
  (a request whose prompt an earlier chunk began: SGLang's `trtllm_mla` backend then plans
  FlashInfer's CUTLASS FMHA wrappers for the prefix chunks, `epsim.validate.silicon.first_use`).
  Start-up decodes and prefills single short prompts, so it never meets it; a warm-up batch meets
  it where its copies straddle a chunk boundary. The step waits `compile_s` once (the ranks share
  one build behind FlashInfer's file lock).
- `sglang_paged_alloc`: the paged KV allocator's Triton kernels (`epsim.sim.first_use_alloc`),
  keyed by the batch's request count, the largest extend seen and `free_pages`' alignment; a step
  waits for each new key's compile.
- `flashinfer_cutlass_fmha` with `alloc_compile_s`: both, the module build and the allocator's
  compiles (`FirstUseTerms`): the same scheduler thread runs the allocator before the forward that
  plans the module, so a step that meets both waits for their sum.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.first_use import KERNELS_PER_KEY, TILE_TABLES, fused_moe_key, warm_keys
from epsim.cost.shared_experts import fused_shared_experts
from epsim.errors import SpecError
from epsim.sim.first_use_alloc import PagedAllocCompiles


def _chunks(num_tokens: int, chunk: int) -> list[int]:
    """A prefill of `num_tokens` as the chunked-prefill steps that run it (token counts)."""
    full, rest = divmod(num_tokens, chunk)
    return [chunk] * full + ([rest] if rest else [])


class FirstUseCompiles:
    """The keys one serving process has compiled, and the stall a new one costs.

    Args:
        tiles: the GPU's tuned (w13, w2) tables (`epsim.cost.first_use.TILE_TABLES`).
        num_experts: experts in the fused kernel (routed plus fused shared ones).
        top_k: experts per token in the kernel (the router's plus fused shared ones).
        compile_s: one kernel's compile, host seconds.
        warm_token_counts: token counts of the batches run before the simulated run.
    Attributes:
        num_compiles: kernels compiled inside the run so far.
        stalled_us: microseconds the run's steps waited for them.
    """

    def __init__(self, tiles: tuple, num_experts: int, top_k: int, compile_s: float,
                 warm_token_counts: list[int]):
        self.tiles, self.num_experts, self.top_k = tiles, num_experts, top_k
        self.compile_us = compile_s * 1e6 * KERNELS_PER_KEY
        self.met = warm_keys(warm_token_counts, num_experts, top_k, tiles)
        self.num_compiles = 0
        self.stalled_us = 0.0

    def stall_us(self, batch) -> float:
        """Microseconds a step running `batch` (`BatchCounts`) waits for compiles."""
        prefill_tokens = float(batch.prefill_tokens.sum())
        if prefill_tokens < 1:
            return 0.0
        key = fused_moe_key(int(round(prefill_tokens)), self.num_experts, self.top_k, self.tiles)
        if key in self.met:
            return 0.0
        self.met.add(key)
        self.num_compiles += KERNELS_PER_KEY
        self.stalled_us += self.compile_us
        return self.compile_us


def splits_a_prompt(copies: int, prompt_tokens: int, chunk_tokens: int) -> bool:
    """Whether a batch of `copies` prompts of `prompt_tokens` each, prefilled in chunks of
    `chunk_tokens` (oldest first), ends a chunk inside a prompt: the next chunk then attends to
    that prompt's prefix."""
    total = copies * prompt_tokens
    return any((k * chunk_tokens) % prompt_tokens for k in range(1, -(-total // chunk_tokens)))


class FirstPrefixBuild:
    """The module a server builds on its first prefill step that attends to a prefix.

    Args:
        compile_s: the build, host seconds.
        met: built before the run (a warm-up batch attended to a prefix).
    Attributes:
        num_compiles: modules built inside the run so far (0 or 1).
        stalled_us: microseconds the run's steps waited for them.
    """

    def __init__(self, compile_s: float, met: bool):
        self.compile_us = compile_s * 1e6
        self.met = met
        self.num_compiles = 0
        self.stalled_us = 0.0

    def stall_us(self, batch) -> float:
        """Microseconds a step running `batch` waits: the build, on its first step where a rank
        prefills a chunk with a prefix (`prefill_context`, prefix + chunk, above the chunk)."""
        if self.met or not np.any(batch.prefill_context > batch.prefill_tokens):
            return 0.0
        self.met = True
        self.num_compiles += 1
        self.stalled_us += self.compile_us
        return self.compile_us


class FirstUseTerms:
    """Two first-use terms of one server: the FMHA module build and the paged allocator's
    compiles, each met on its own steps; a step waits for the sum of what it meets.

    Args:
        build: the module's `FirstPrefixBuild`.
        alloc: the allocator's `PagedAllocCompiles`.
    """

    def __init__(self, build: FirstPrefixBuild, alloc: PagedAllocCompiles):
        self.build, self.alloc = build, alloc

    @property
    def num_compiles(self) -> int:
        """Modules and kernels built inside the run so far."""
        return self.build.num_compiles + self.alloc.num_compiles

    @property
    def stalled_us(self) -> float:
        """Microseconds the run's steps waited for them."""
        return self.build.stalled_us + self.alloc.stalled_us

    def stall_us(self, plan, context: np.ndarray, slot_req: np.ndarray) -> float:
        """Microseconds a step running `plan` waits (`PagedAllocCompiles.stall_us`'s arguments)."""
        return self.build.stall_us(plan.batch) + self.alloc.stall_us(plan, context, slot_req)


def _paged_alloc(spec, d, first_prompt_tokens: int, first_output_tokens: int,
                 extend_compile_s: float) -> PagedAllocCompiles:
    """The allocator term of `spec` (`deployment.first_use_compile`) on deployment `d`."""
    return PagedAllocCompiles(spec.page_size, extend_compile_s,
                              spec.decode_compile_s or extend_compile_s, d.chunked_prefill_size,
                              spec.warmup_batches, (first_prompt_tokens, first_output_tokens),
                              spec.spec_compile_s if d.speculative_algorithm else None,
                              d.speculative_steps[0] if d.speculative_algorithm else 0,
                              spec.extend_keys_tokens)


def first_use_compiles(scenario, first_prompt_tokens: int, first_output_tokens: int = 1
                       ) -> FirstUseCompiles | FirstPrefixBuild | PagedAllocCompiles | \
        FirstUseTerms | None:
    """The scenario's first-use term (None without `deployment.first_use_compile`).

    Args:
        scenario: one instance's `Scenario`.
        first_prompt_tokens: the run's first request's prompt (the harness warms up on it).
        first_output_tokens: its output tokens (the warm-up's decodes).
    Raises:
        SpecError: no tuned table for the scenario's GPU.
    """
    m, c, d = scenario.model, scenario.cluster, scenario.deployment
    spec = d.first_use_compile
    if spec is None:
        return None
    first = (int(first_prompt_tokens), int(first_output_tokens))
    if spec.kernel == "flashinfer_cutlass_fmha":
        build = FirstPrefixBuild(spec.compile_s, any(
            splits_a_prompt(copies, first[0], d.chunked_prefill_size)
            for copies in spec.warmup_batches))
        if spec.alloc_compile_s is None:
            return build
        return FirstUseTerms(build, _paged_alloc(spec, d, *first, spec.alloc_compile_s))
    if spec.kernel == "sglang_paged_alloc":
        return _paged_alloc(spec, d, *first, spec.compile_s)
    tiles = TILE_TABLES.get(c.gpu)
    if tiles is None:
        raise SpecError(f"deployment.first_use_compile ({spec.kernel}) has no tuned table for "
                        f"cluster.gpu ({c.gpu}); known: {', '.join(sorted(TILE_TABLES))}")
    shared = fused_shared_experts(m, d, d.block_kernels, d.parallel.ep_size)
    startup = list(range(1, d.cuda_graph_max_bs + 1))
    warmup = [n for copies in spec.warmup_batches
              for n in _chunks(copies * int(first_prompt_tokens), d.chunked_prefill_size)]
    return FirstUseCompiles(tiles, m.num_experts + shared, m.top_k + shared, spec.compile_s,
                            startup + warmup)
