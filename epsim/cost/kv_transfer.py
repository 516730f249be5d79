"""KV-cache transfer from a prefill instance to a decode instance (prefill/decode disaggregation).

Bytes per request are the prompt's KV cache as the model lays it out:

    kv_bytes = prompt_tokens * num_layers * kv_bytes_per_token_per_layer

(`ModelSpec.kv_bytes_per_token_per_layer`: 2 x KV heads x head_dim x 2 bytes for GQA, MLA's
compressed latent + rope key for DeepSeek). One request's cache lives on one prefill GPU (DP
attention) and goes to one decode GPU over the scale-out network, so

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


def kv_bytes_per_request(model, prompt_tokens: float) -> float:
    """KV-cache bytes of a prompt of `prompt_tokens` tokens (all layers)."""
    return float(prompt_tokens) * model.num_layers * model.kv_bytes_per_token_per_layer


def kv_transfer(model, cluster, path: str, prompt_tokens: float, profile=None) -> KVTransfer:
    """The KV transfer of a mean prompt over `path` on `cluster`.

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
    return KVTransfer(path, kv_bytes_per_request(model, prompt_tokens), params["gbps"],
                      params["latency_us"], source)
