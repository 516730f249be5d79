"""KV-cache transfer from a prefill instance to a decode instance (prefill/decode disaggregation).

Bytes per request are the prompt's KV cache as the model lays it out:

    kv_bytes = prompt_tokens * num_layers * kv_bytes_per_token(kv_cache_dtype)

(`ModelSpec.kv_bytes_per_token`: 2 x KV heads x head_dim elements for GQA, MLA's compressed
latent + rope key, 512 + 64 = 576, for DeepSeek; 2 bytes each at `auto`/bf16, 1 at fp8). One
request's cache lives on one prefill GPU (DP attention; under attention TP each rank holds a copy
of MLA's latent and sends it to its own decode rank, sglang 0.5.8
`disaggregation/mooncake/conn.py:753-761`) and goes to one decode GPU over the scale-out network
(Mooncake's default transport is RDMA; its NVLink pool is opt-in), so

    transfer_us = latency_us + kv_bytes / (gbps * 1e3)          (GB/s = 1e3 bytes/us)

with `gbps` the GPU's scale-out bandwidth (`ClusterSpec.rdma_gbps_resolved`) times the path's
achieved share. Paths (`KV_PATHS`): `mooncake` (Mooncake transfer engine, GPUDirect RDMA
writes) and `nccl` (NCCL send/recv between the instances). Both are datasheet estimates:
epsim's live bench has not measured a KV transfer; a profile component `<path>/kv_transfer`
(params `latency_us`, `gbps`) replaces them and is tagged as measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from epsim.errors import SpecError

KV_PATHS = ("mooncake", "nccl")

# datasheet assumptions (not measured): achieved share of the NIC line rate and a fixed setup
# latency per transfer (the engine's descriptor exchange / NCCL's handshake and launch)
_EFFICIENCY = {"mooncake": 0.85, "nccl": 0.75}
_LATENCY_US = {"mooncake": 50.0, "nccl": 100.0}


@dataclass(frozen=True)
class KVTransfer:
    """One request's KV-cache transfer.

    Attributes:
        path: "mooncake" | "nccl".
        bytes_per_request: KV bytes of a mean prompt.
        gbps: achieved bandwidth of one GPU's transfer, GB/s.
        latency_us: fixed cost per transfer, µs.
        source: "datasheet" or "measured" (a profile component).
    """

    path: str
    bytes_per_request: float
    gbps: float
    latency_us: float
    source: str

    @property
    def transfer_us(self) -> float:
        return self.latency_us + self.bytes_per_request / (self.gbps * 1e3)

    def link_utilization(self, requests_per_s: float, num_gpus: int) -> float:
        """Share of `num_gpus` GPUs' scale-out bandwidth the transfers of `requests_per_s` use."""
        return requests_per_s * self.bytes_per_request / (num_gpus * self.gbps * 1e9)


def kv_bytes_per_request(model, prompt_tokens: float, kv_cache_dtype: str = "auto") -> float:
    """KV-cache bytes of a prompt of `prompt_tokens` tokens (all layers) at `kv_cache_dtype`."""
    return float(prompt_tokens) * model.num_layers * model.kv_bytes_per_token(kv_cache_dtype)


def last_chunk_tokens(prompt_tokens: int, chunk_tokens: int) -> int:
    """Prompt tokens whose KV is still to send when a chunked prefill ends: its last chunk's.

    SGLang's prefill server sends each chunk's KV once the chunk is computed (sglang 0.5.8
    `disaggregation/prefill.py:617-652`, `process_prefill_chunk` -> `send_kv_chunk`), so the
    earlier chunks travel while later ones compute and only the last chunk's transfer follows
    the forward that samples the first token.
    """
    if prompt_tokens <= 0:
        return 0
    return prompt_tokens - chunk_tokens * ((prompt_tokens - 1) // chunk_tokens)


def kv_transfer(model, cluster, path: str, prompt_tokens: float, profile=None,
                kv_cache_dtype: str = "auto") -> KVTransfer:
    """The KV transfer of a mean prompt over `path` on `cluster` at `kv_cache_dtype`.

    Raises:
        SpecError: an unknown path.
    """
    if path not in KV_PATHS:
        raise SpecError(f"kv transfer path ({path!r}) must be one of {list(KV_PATHS)}")
    params = {"gbps": cluster.rdma_gbps_resolved * _EFFICIENCY[path],
              "latency_us": _LATENCY_US[path]}
    source = "datasheet"
    component = profile.component(path, "kv_transfer") if profile is not None else None
    if component is not None:
        params.update(component.params)
        source = "measured" if component.source == "fit" else component.source
    return KVTransfer(path, kv_bytes_per_request(model, prompt_tokens, kv_cache_dtype), params["gbps"],
                      params["latency_us"], source)
