"""How much of SGLang's dual-stream shared expert overlaps on one GPU: the shared expert on the
main stream beside the router and routed experts on an alternate one, each branch timed alone,
both in series and both on two streams, inside one CUDA graph (as SGLang's decode runs it).

    python dual_stream_overlap_gpu.py --out "$OUT"    # on a GPU machine; writes dual_stream.json
    python dual_stream_overlap_gpu.py --out "$OUT" --routed dense --tokens 1 2 4 8 16 32 64 128
                                   # the routed branch at a step's length: dual_stream_dense.json

SGLang's `DeepseekV2MoE.forward_normal_dual_stream` (0.5.x, CUDA, no DeepEP-class backend, shared
expert not fused, 1-1024 tokens on the rank) runs the shared expert's MLP on the current stream
while `alt_stream` runs the router GEMM, top-k and the routed experts, then joins. epsim priced the
layer's MoE part as the longer branch (`max`, ideal overlap): a bound, since both branches share
the SMs and HBM. This times what the overlap gives: for each token count T,

  shared_us     the shared expert alone: gate_up GEMM [T, H] x [H, 2 I_s], SiLU-and-mul, down GEMM
  routed_us     the router alone and the routed experts: gate GEMM [T, H] x [H, E], softmax, top-k,
                the tokens gathered by expert, a grouped gate_up GEMM, SiLU-and-mul, a grouped down
                GEMM, the top-k weighted sum; the k T routed rows spread evenly over the min(E, k T)
                experts they hit (fixed on the host: the experts' weight bytes a step reads, no
                host sync in the graph)
  serial_us     both on one stream (no overlap)
  dual_us       both on two streams, forked and joined as SGLang does (`alt_stream.wait_stream`)

and `exposed` = (dual_us - max(shared_us, routed_us)) / min(shared_us, routed_us): the share of the
shorter branch the two streams leave exposed, 0 where it hides entirely (the `max` bound), 1 where
the layer lasts as long as both in series (`overlap` = (serial_us - dual_us) / min(...), the same
against the serial run, which also pays the one-stream join). Shapes: DeepSeek-V3/R1 (H 7168, 256 routed
experts, top 8, expert and shared intermediate 2048) with the MLPs split `--tp` ways (TP8 / TP4,
as the B200 agg rows' MoE-TP runs them: every rank holds every expert's 1/tp slice). Weights in
BF16 (`torch._grouped_mm`; the B200 rows' FP8 and NVFP4 kernels are not on this GPU's image): the
overlap is a ratio of two branches' GPU time, not a rate, and is taken as such. Each graph replays
`--replays` times a burst; the median of `--bursts` bursts; CUDA events.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

HIDDEN, EXPERTS, TOP_K, INTER, SHARED_INTER = 7168, 256, 8, 2048, 2048
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Branches:
    """The two branches' weights and buffers at one TP split and token count."""

    def __init__(self, tokens: int, tp: int, device: torch.device, dense: bool = False):
        bf = torch.bfloat16
        inter, shared_inter = INTER // tp, SHARED_INTER // tp
        g = torch.Generator(device=device).manual_seed(0)
        self.x = torch.randn(tokens, HIDDEN, device=device, dtype=bf, generator=g)
        self.w_shared_up = torch.randn(HIDDEN, 2 * shared_inter, device=device, dtype=bf, generator=g) * 0.02
        self.w_shared_down = torch.randn(shared_inter, HIDDEN, device=device, dtype=bf, generator=g) * 0.02
        self.w_gate = torch.randn(HIDDEN, EXPERTS, device=device, dtype=bf, generator=g) * 0.02
        # Only the experts the step's tokens hit are read: with top-k routing of T tokens that is
        # up to k T of them. The routing is fixed here (k T rows spread evenly over
        # min(E, k T) experts, the routed counts set on the host), so the grouped GEMMs read the
        # weight bytes a real step reads and the graph needs no host sync; the router GEMM,
        # softmax and top-k still run, and their weights scale the combine.
        groups = min(EXPERTS, TOP_K * tokens)
        rows = TOP_K * tokens
        group_of_row = torch.arange(rows) % groups
        order = torch.argsort(group_of_row, stable=True)
        counts = torch.bincount(group_of_row, minlength=groups)
        self.offs = torch.cumsum(counts, 0).to(torch.int32).to(device)
        self.order = order.to(device)                       # [k T] rows sorted by expert
        self.token_of_row = (order // TOP_K).to(device)     # [k T] the token each sorted row is
        # stored [G, N, K] and passed transposed (column-major [G, K, N]), as transformers does
        self.w_up = torch.randn(groups, 2 * inter, HIDDEN, device=device, dtype=bf, generator=g) * 0.02
        self.w_down = torch.randn(groups, HIDDEN, inter, device=device, dtype=bf, generator=g) * 0.02
        self.tokens = tokens
        self.dense = dense
        if dense:
            # `--routed dense`: the same experts' bytes as one dense GEMM pair, every token through
            # all of them (cuBLAS streams weights near HBM speed at few tokens, where the grouped
            # GEMM above runs several times slower), so the routed branch lasts about what a step's
            # weight reads take and the shared expert is the share of it a real step sees
            self.w_dense_up = self.w_up.reshape(-1, HIDDEN).T            # [H, G 2I] view
            self.w_dense_down = self.w_down.transpose(1, 2).reshape(-1, HIDDEN)     # [G I, H]

    def shared(self) -> torch.Tensor:
        up = self.x @ self.w_shared_up
        gate, val = up.chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * val) @ self.w_shared_down

    def routed(self) -> torch.Tensor:
        logits = self.x @ self.w_gate
        probs = torch.softmax(logits.float(), dim=-1)
        weights, _ = torch.topk(probs, TOP_K, dim=-1)                   # [T, k]
        if self.dense:
            up = self.x @ self.w_dense_up
            gate, val = up.view(self.tokens, -1, 2, up.shape[-1] // self.w_up.shape[0] // 2).unbind(2)
            act = (torch.nn.functional.silu(gate) * val).reshape(self.tokens, -1)
            return (act @ self.w_dense_down) * weights.sum(-1, keepdim=True).to(act.dtype)
        xs = self.x[self.token_of_row]                                   # [k T, H] by expert
        up = torch._grouped_mm(xs, self.w_up.transpose(-2, -1), offs=self.offs)
        gate, val = up.chunk(2, dim=-1)
        down = torch._grouped_mm((torch.nn.functional.silu(gate) * val).contiguous(),
                                 self.w_down.transpose(-2, -1), offs=self.offs)
        scaled = down * weights.flatten()[self.order].to(down.dtype)[:, None]
        return torch.zeros_like(self.x).index_add_(0, self.token_of_row, scaled)


def capture(fn) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def time_us(graph: torch.cuda.CUDAGraph, replays: int, bursts: int) -> float:
    for _ in range(20):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(bursts):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / replays)
    return statistics.median(times)


def measure(tokens: int, tp: int, replays: int, bursts: int, dense: bool = False) -> dict:
    b = Branches(tokens, tp, torch.device("cuda"), dense)
    alt = torch.cuda.Stream()

    def serial():
        return b.shared() + b.routed()

    def dual():
        # as `forward_normal_dual_stream`: fork the alternate stream off the current one, run the
        # shared expert here and the router and routed experts there, then join
        current = torch.cuda.current_stream()
        alt.wait_stream(current)
        shared = b.shared()
        with torch.cuda.stream(alt):
            routed = b.routed()
        current.wait_stream(alt)
        return shared + routed

    us = {name: time_us(capture(fn), replays, bursts)
          for name, fn in (("shared_us", b.shared), ("routed_us", b.routed),
                           ("serial_us", serial), ("dual_us", dual))}
    short = min(us["shared_us"], us["routed_us"])
    us["overlap"] = (us["serial_us"] - us["dual_us"]) / short if short > 0 else 0.0
    us["exposed"] = (us["dual_us"] - max(us["shared_us"], us["routed_us"])) / short if short > 0 else 0.0
    us["dual_over_max"] = us["dual_us"] / max(us["shared_us"], us["routed_us"])
    return {"tokens": tokens, "tp": tp, **us}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", required=True, help="folder for dual_stream.json")
    parser.add_argument("--tp", type=int, nargs="+", default=[8, 4], choices=(1, 2, 4, 8))
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--bursts", type=int, default=15)
    parser.add_argument("--routed", choices=("grouped", "dense"), default="grouped",
                        help="the routed experts as torch's grouped GEMM over the experts hit, or "
                             "their bytes as one dense GEMM pair (writes dual_stream_dense.json)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("dual_stream_overlap_gpu: no CUDA device", file=sys.stderr)
        return 2
    rows = []
    for tp in args.tp:
        for tokens in args.tokens:
            row = measure(tokens, tp, args.replays, args.bursts, args.routed == "dense")
            rows.append(row)
            print(f"tp{tp} T={tokens:5d} shared {row['shared_us']:7.1f} routed {row['routed_us']:7.1f} "
                  f"serial {row['serial_us']:7.1f} dual {row['dual_us']:7.1f} us  "
                  f"overlap {row['overlap']:.2f}  exposed {row['exposed']:.2f}  "
                  f"dual/max {row['dual_over_max']:.3f}", flush=True)
    record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "python": platform.python_version(), "platform": platform.platform(),
              "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "command": "python benchmarks/dual_stream_overlap_gpu.py " + " ".join(argv or sys.argv[1:]),
              "shapes": {"hidden": HIDDEN, "experts": EXPERTS, "top_k": TOP_K, "inter": INTER,
                         "shared_inter": SHARED_INTER, "dtype": "bf16"}, "routed": args.routed,
              "replays": args.replays, "bursts": args.bursts, "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "dual_stream_dense.json" if args.routed == "dense"
                        else "dual_stream.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
