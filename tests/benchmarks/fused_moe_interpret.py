"""Run by test_fused_moe_configs_gpu.py in a fresh process (TRITON_INTERPRET=1 before Triton is
imported): benchmarks/fused_moe_configs_gpu.py's `LayerCopy` on CPU through Triton's interpreter
at tiny shapes (6 experts, hidden 256, intermediate 128, 3 tokens x top-3), per tile config, against
torch. Prints one JSON line: {case: [w13 relative error, layer relative error]}; the layer's
reference starts from the kernel's own w13 output, so the FP8 requantisation of the intermediate
does not blur the comparison."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402

import fused_moe_configs as fmc  # noqa: E402
import fused_moe_configs_gpu as gpu  # noqa: E402

_patch = interpreter._patch_lang_tensor


def _patch_index(tensor, scope):
    """Triton 3.6's interpreter takes `int()` of a 1-element array, which NumPy 2.5 refuses."""
    _patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


interpreter._patch_lang_tensor = _patch_index


def cfg(m: int, n: int, k: int, g: int) -> dict:
    return {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": g,
            "num_warps": 4, "num_stages": 2}


CASES = {   # w13 swap-AB + c_sorted, w2 through TMA; w2 TMA at BK 64; BM 64 plain, no swap
    "served": fmc.Picked(cfg(16, 64, 128, 1), cfg(16, 128, 128, 16), True, "", ""),
    "served_bk64": fmc.Picked(cfg(16, 64, 128, 16), cfg(16, 256, 64, 1), True, "", ""),
    "collector_bm64": fmc.Picked(cfg(64, 128, 128, 32), cfg(64, 128, 128, 32), False, "", ""),
}


def main() -> None:
    torch.manual_seed(0)
    experts, inter, hidden, tokens, top_k = 6, 128, 256, 3, 3
    f8 = torch.float8_e4m3fn
    w13 = (torch.randn(experts, 2 * inter, hidden) * 0.1).to(f8)
    s13 = torch.rand(experts, 2 * inter // 128, hidden // 128) + 0.5
    w2 = (torch.randn(experts, hidden, inter) * 0.1).to(f8)
    s2 = torch.rand(experts, hidden // 128, inter // 128) + 0.5
    ids = torch.tensor([[0, 2, 5], [1, 2, 5], [4, 0, 5]], dtype=torch.int32)
    wts = torch.rand(tokens, top_k)

    def dequant(w, s):                                   # [E, N, K] fp32
        return w.float() * s.repeat_interleave(128, 1).repeat_interleave(128, 2)

    def dequant_rows(q, s):                              # [rows, K] fp32
        return (q.float().view(q.shape[0], -1, 128) * s[..., None]).view(q.shape)

    w13f, w2f = dequant(w13, s13), dequant(w2, s2)
    out = {}
    for name, picked in CASES.items():
        c = gpu.LayerCopy(torch, (w13, s13, w2, s2), picked, ids, wts, sm90=True)
        c.layer()
        x = dequant_rows(*fmc.quant_fp8_groups(c.hidden))
        rows = ({int(r): i for i, r in enumerate(c.sorted.tolist()) if r < ids.numel()}
                if picked.w2_tma else {r: r for r in range(ids.numel())})
        ref = torch.zeros(tokens, hidden)
        w13_err = 0.0
        for t in range(tokens):
            for j in range(top_k):
                e = int(ids[t, j])
                h_ref = x[t] @ w13f[e].T
                h = c.cache1[rows[t * top_k + j]]
                w13_err = max(w13_err, float((h.float() - h_ref).abs().max() / h_ref.abs().max()))
                act = (torch.nn.functional.silu(h[:inter]) * h[inter:]).view(1, inter)
                xa = dequant_rows(*fmc.quant_fp8_groups(act))[0]
                ref[t] += (xa @ w2f[e].T).to(torch.bfloat16).float() * wts[t, j]
        ref *= fmc.ROUTED_SCALING
        out[name] = [w13_err, float((c.out.float() - ref).abs().max() / ref.abs().max())]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
