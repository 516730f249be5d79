"""The host work a P/D prefill server spends per request beyond its tokens' forward.

Counted from SGLang 0.5.8 (line numbers of `sglang/srt/` in the 0.5.8 wheel) as the GB200/GB300
srt-slurm recipes run it: `--disaggregation-transfer-backend nixl`, overlap scheduling on (no
recipe disables it, and nothing in `server_args.py` does for this setup), DP attention, no CUDA
graph on the prefill. The loop is `event_loop_overlap_disagg_prefill`
(`disaggregation/prefill.py:364-401`): it launches batch k's forward, *then* processes batch
k-1's result, polls the transfers in flight and the bootstrap queue, and schedules batch k+1, so
the host work below runs while batch k computes and costs the step nothing while it is shorter
than the forward -- unless the forward itself waits for the host: DeepEP's normal-mode dispatch
spins the CPU on each MoE layer's receive counts (`num_recv_tokens_per_expert` comes back as a
host list, `layers/moe/token_dispatcher/deepep.py:426-490`), so with it the CPU is never more
than a layer ahead and the work between forwards is exposed (`exposed_s`).

Per request, on the scheduler thread (NIXL has no transfer thread: `NixlKVSender.send` ->
`add_transfer_request` -> `send_kvcache` and `send_aux` run inline, `nixl/conn.py:314-391,
524-629, 719-740`):

- `send_kv_chunk` (`prefill.py:652-730`): the request's KV slot indices read back
  (`req_to_token[...].cpu()`), the metadata buffer written (`set_buf`, CPU tensors), then one
  KV transfer of `layers x runs` descriptors -- one per layer's KV buffer (MLA: one buffer a
  layer; MHA: K and V) per run of pages contiguous on both sides (`group_concurrent_contiguous`)
  -- built in Python, turned into NIXL descriptor lists (`get_xfer_descs`, twice),
  `initialize_xfer` and posted (`transfer`); on the last chunk one aux transfer of the metadata
  buffers (`AUX_BUFFERS`, host memory). A chunked request sends each chunk (`prefill.py:617-650`).
- the tree cache updated and, when the transfer is done, released (`release_kv_cache`), the
  request streamed out (`process_disagg_prefill_inflight_queue`, `prefill.py:524-598`), its
  handles polled (`check_xfer_state`) once per loop iteration while in flight.
- the bootstrap (`pop_bootstrapped`, `prefill.py:227-315`): a status read and `sender.init`;
  the decode's pre-allocation arrives on a separate thread (`nixl/conn.py:667-702`).

Each request goes to exactly one decode rank when both sides run attention TP 1 (DP attention:
`required_dst_info_num = 1`, `common/conn.py:317-360`), whatever the decode's size: a larger
decode side (DEP32 -> DEP48) adds only peers registered once at start-up (`add_remote_agent`
per decode rank, `nixl/conn.py:306-312`), nothing per request.

Runs of contiguous pages: under disaggregation both sides' page allocators keep their free list
sorted (`need_sort`, `model_runner_kv_cache_mixin.py:587`; `mem_cache/allocator.py:82`), so a
request's pages are mostly one run (`runs = 1`); `runs = pages` is the fragmented upper bound.

Unit costs: an eager host op at `launch_us` (as `epsim.cost.scheduler_host`), and a posted NIXL
descriptor at `DESCRIPTOR_US`, NIXL's own op-level measurement: 18,880 descriptors posted in
~46 ms on one thread (github.com/ai-dynamo/nixl issue 1514, LIBFABRIC backend). Public reports
put UCX's cuda_ipc (the GB200 MNNVL path) higher: 15k descriptors in 0.6 s through
`agent.transfer` (nixl issue 176, UCX, 2025-04; `DESCRIPTOR_US_HIGH`), ~20x rc_x per descriptor
(vllm-project/vllm issue 55434, GB200). Datasheet-class: no epsim record measures either.
"""

from __future__ import annotations

from dataclasses import dataclass

# eager host ops a finished request costs the scheduler thread outside its descriptors
REQUEST_OPS = {
    "kv_indices_readback": 1,      # req_to_token[idx, start:end].cpu()
    "metadata_set_buf": 2,         # output id and cached tokens written to the CPU buffers
    "transfer_calls": 8,           # get_xfer_descs x2, initialize_xfer, transfer: KV and aux
    "tree_cache": 2,               # cache_unfinished_req, release_kv_cache (frees its pages)
    "poll": 2,                     # check_xfer_state, KV and aux handles, one loop iteration
    "bootstrap": 2,                # status poll, sender.init
}
AUX_BUFFERS = 9                    # MetadataBuffers.get_buf_infos: the first token's metadata
DESCRIPTOR_US = 46e3 / 18880       # nixl issue 1514: one thread's post of 18,880 descriptors
DESCRIPTOR_US_HIGH = 0.6e6 / 15e3  # nixl issue 176: agent.transfer of 15k segments, UCX


@dataclass(frozen=True)
class PrefillRequestHost:
    """One prefill request's host work on the scheduler thread (module doc).

    Attributes:
        ops: eager host ops outside the descriptors.
        descriptors: NIXL descriptors it posts (its KV over every chunk, plus the aux).
        launch_us: host time of one op.
        descriptor_us: host time of one posted descriptor.
    """

    ops: int
    descriptors: int
    launch_us: float
    descriptor_us: float

    @property
    def host_us(self) -> float:
        return self.ops * self.launch_us + self.descriptors * self.descriptor_us


def kv_descriptors(prompt_tokens: int, page_size: int, kv_buffers: int,
                   fragmented: bool = False) -> int:
    """Descriptors of one request's KV transfer: `kv_buffers` (layers x 1 for MLA, x 2 for MHA)
    per run of contiguous pages; one run, or one a page where `fragmented` (module doc)."""
    pages = -(-prompt_tokens // page_size)
    return kv_buffers * (pages if fragmented else 1)


def request_host(prompt_tokens: int, chunk_tokens: int, page_size: int, kv_buffers: int,
                 launch_us: float, descriptor_us: float = DESCRIPTOR_US,
                 fragmented: bool = False) -> PrefillRequestHost:
    """The host work of one request of `prompt_tokens` prefilled in chunks of `chunk_tokens`."""
    chunks = max(1, -(-prompt_tokens // chunk_tokens))
    if fragmented:
        descriptors = kv_descriptors(prompt_tokens, page_size, kv_buffers, True)
    else:
        descriptors = kv_buffers * chunks              # each chunk's pages one run
    # an earlier chunk's send repeats the read-back and the KV transfer's four calls
    ops = sum(REQUEST_OPS.values()) + (chunks - 1) * (REQUEST_OPS["kv_indices_readback"] + 4)
    return PrefillRequestHost(ops, descriptors + AUX_BUFFERS, launch_us, descriptor_us)


def exposed_s(host_s: float, forward_s: float, overlap: bool, forward_waits_host: bool) -> float:
    """Host time a prefill step adds to its forward: all of it where the loop does not overlap
    or the forward waits on the host (DeepEP normal mode), else what outlasts the forward."""
    if not overlap or forward_waits_host:
        return host_s
    return max(0.0, host_s - forward_s)
