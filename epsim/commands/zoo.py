"""`epsim models` / `epsim hardware`: list the zoo."""

from __future__ import annotations

import json


def run(args) -> int:
    from epsim.zoo import get_hardware, get_model, hardware_names, model_names
    if args.command == "models":
        rows = [get_model(n) for n in model_names()]
        if args.json:
            print(json.dumps([m.model_dump() for m in rows], indent=1))
            return 0
        print(f"{'model':<22}{'layers':>7}{'dense':>6}{'hidden':>8}{'moe_inter':>10}{'experts':>8}"
              f"{'top_k':>6}{'expert_MB':>10}")
        for m in rows:
            print(f"{m.name:<22}{m.num_layers:>7}{m.num_dense_layers:>6}{m.hidden_size:>8}"
                  f"{m.moe_intermediate_size:>10}{m.num_experts:>8}{m.top_k:>6}{m.expert_bytes / 1e6:>10.2f}")
        return 0
    from epsim.zoo import get_network, network_defaults
    rows = [get_hardware(n) for n in hardware_names()]
    networks = [(kind, gpu, entry, get_network(kind, gpu)) for kind, gpu, entry in network_defaults()]
    if args.json:
        print(json.dumps({"gpus": [h.model_dump() for h in rows],
                          "networks": [{"kind": kind, "gpu": gpu, **entry,
                                        "nic_gbps_per_gpu": net.nic_gbps_per_gpu}
                                       for kind, gpu, entry, net in networks]}, indent=1))
        return 0
    print(f"{'gpu':<6}{'bf16_TF':>8}{'fp8_TF':>8}{'HBM_GB/s':>9}{'HBM_GiB':>8}{'NVL_GB/s':>9}"
          f"{'GPUs/node':>10}  network")
    for h in rows:
        print(f"{h.name:<6}{h.bf16_tflops:>8g}{h.fp8_tflops:>8g}{h.hbm_gbps:>9g}{h.hbm_gib:>8g}"
              f"{h.nvlink_gbps:>9g}{h.gpus_per_node:>10}  {h.network}")
    print()
    print("networks (datasheet defaults; NIC speeds in Gb/s = gigabits, per-GPU share in GB/s = bytes)")
    print(f"{'kind':<11}{'gpu':<6}{'system':<27}{'NICs':>5}{'Gb/s/NIC':>9}{'GB/s/GPU':>9}")
    for kind, gpu, entry, net in networks:
        print(f"{kind:<11}{gpu:<6}{entry['system']:<27}{net.nics_per_node:>5}"
              f"{net.nic_gbit_per_s:>9g}{net.nic_gbps_per_gpu:>9g}")
    return 0
