"""`epsim models` / `epsim hardware`: list the zoo."""

from __future__ import annotations

from epsim.commands.output import Report
from epsim.default_profile import default_profile
from epsim.profile import Profile, default_profile_path
from epsim.profile import shipped_profiles as profiles_by_name
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
    lines = table(["gpu", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "HBM GB/s", "HBM GiB",
                   "NVLink GB/s", "GPUs/node", "network", "default profile"],
                  [[h.name, h.bf16_tflops, h.fp8_tflops, h.fp4_tflops or "-", h.hbm_gbps,
                    h.hbm_gib, h.nvlink_gbps, h.gpus_per_node, str(h.network),
                    default_profile(h.name).name] for h in rows], indent="")
    lines.append("peaks: dense tensor-core TFLOP/s per GPU from each GPU's datasheet (its zoo "
                 "file's `source`); fp4: NVFP4, none on Hopper")
    lines += ["", "networks (datasheet defaults; NIC speeds in Gb/s = gigabits, per-GPU share in "
                  "GB/s = 1e9 bytes/s)"]
    lines += table(["kind", "gpu", "system", "NICs", "Gb/s per NIC", "GB/s per GPU"],
                   [[kind, gpu, entry["system"], net.nics_per_node,
                     net.nic_gbit_per_s, net.nic_gbps_per_gpu] for kind, gpu, entry, net in networks],
                   indent="")
    profiles = shipped_profiles()
    data["profiles"] = profiles
    data["default_profiles"] = {h.name: default_profile(h.name).name for h in rows}
    lines += ["", "profiles (shipped; --profile NAME or a JSON file picks one; without it a "
                  "cluster is priced by its GPU's default, above: H200 by h200x2 with aic_h200's "
                  "quantised and MLA kernels and DeepEP, H100/B200/B300/GB200/GB300 by their aic_ profile, other "
                  "GPUs from the datasheet)"]
    lines += table(["profile", "gpu", "data source: components", "components"],
                   [[p["name"], p["gpu"], "; ".join(f"{k}: {v}" for k, v in p["sources"].items()),
                     p["num_components"]] for p in profiles], indent="")
    return Report(data, lines)


def shipped_profiles() -> list[dict]:
    """The profiles under epsim/data/profiles: name, GPU, and how many of its components each
    data source gave (`Profile.data_source`: a component's `data_source`, or for a profile
    older than that field, its provenance)."""
    out = []
    for name, path in shipped.items() if (shipped := profiles_by_name()) else ():
        profile = Profile.load(path)
        sources: dict[str, int] = {}
        for key in profile.components:
            source = profile.data_source(key)
            sources[source] = sources.get(source, 0) + 1
        out.append({"name": name, "gpu": profile.hardware, "sources": sources,
                    "default": path.resolve() == default_profile_path().resolve(),
                    "num_components": len(profile.components), "path": str(path)})
    return out
