"""`epsim models` / `epsim hardware`: list the zoo."""

from __future__ import annotations

from epsim.commands.output import Report
from epsim.profile import Profile, default_profile_path
from epsim.text import table
from epsim.zoo import (get_hardware, get_model, get_network, hardware_names, model_names,
                       network_defaults)


def run(args):
    if args.command == "models":
        rows = [get_model(n) for n in model_names()]
        data = {"models": [m.model_dump() | {"expert_bytes": m.expert_bytes} for m in rows]}
        lines = table(["model", "layers", "dense layers", "hidden", "moe_inter", "experts", "top-k",
                       "expert weights"],
                      [[m.name, m.num_layers, m.num_dense_layers, m.hidden_size,
                        m.moe_intermediate_size, m.num_experts, m.top_k,
                        f"{m.expert_bytes / 1e6:.2f} MB {m.weight_dtype}"] for m in rows], indent="")
        lines.append("expert weights: one routed expert (gate, up, down projections) in its dtype; "
                     "1 MB = 1e6 bytes")
        return Report(data, lines)
    rows = [get_hardware(n) for n in hardware_names()]
    networks = [(kind, gpu, entry, get_network(kind, gpu)) for kind, gpu, entry in network_defaults()]
    data = {"gpus": [h.model_dump() for h in rows],
            "networks": [{"kind": kind, "gpu": gpu, **entry, "nic_gbps_per_gpu": net.nic_gbps_per_gpu}
                         for kind, gpu, entry, net in networks]}
    lines = table(["gpu", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB/s", "HBM GiB", "NVLink GB/s",
                   "GPUs/node", "network"],
                  [[h.name, h.bf16_tflops, h.fp8_tflops, h.hbm_gbps, h.hbm_gib, h.nvlink_gbps,
                    h.gpus_per_node, str(h.network)] for h in rows], indent="")
    lines += ["", "networks (datasheet defaults; NIC speeds in Gb/s = gigabits, per-GPU share in "
                  "GB/s = 1e9 bytes/s)"]
    lines += table(["kind", "gpu", "system", "NICs", "Gb/s per NIC", "GB/s per GPU"],
                   [[kind, gpu, entry["system"], net.nics_per_node, net.nic_gbit_per_s,
                     net.nic_gbps_per_gpu] for kind, gpu, entry, net in networks], indent="")
    profiles = shipped_profiles()
    data["profiles"] = profiles
    lines += ["", "profiles (shipped; without --profile the default prices its own GPU and every "
                  "other GPU is priced from the datasheet; --profile PATH picks one)"]
    lines += table(["profile", "gpu", "default", "data source", "components"],
                   [[p["name"], p["gpu"], "yes" if p["default"] else "", p["source"],
                     p["num_components"]] for p in profiles], indent="")
    return Report(data, lines)


def shipped_profiles() -> list[dict]:
    """The profiles under epsim/data/profiles: file, GPU, whether it is the default, and where
    its components' data came from (`provenance.sources`; our live records where absent)."""
    folder = default_profile_path().parent
    out = []
    for path in sorted(folder.glob("*.json")):
        profile = Profile.load(path)
        sources = (profile.provenance.model_extra or {}).get("sources") or {}
        kinds = sorted({v.get("source", "") for v in sources.values()} - {""})
        out.append({"name": path.name, "gpu": profile.hardware,
                    "default": path.resolve() == default_profile_path().resolve(),
                    "source": ", ".join(kinds) or "epsim live records (docs/calibration.md)",
                    "num_components": len(profile.components),
                    "path": str(path)})
    return out
