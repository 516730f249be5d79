"""benchmarks/fused_moe_configs_gpu.py without a GPU: the torch `moe_align_block_size` against a
brute-force one, the FP8 group quantiser, SGLang 0.5.9's config choice per source (served E 257
json + TMA down json, the collector's Triton 3.1.0 E 256 table, the default config where a device
has none), `--render` of synthetic records, the argument errors, and (where Triton is installed)
the vendored kernel compiling for sm_90 in both its plain and TMA forms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fused_moe_configs as fmc  # noqa: E402  (a script folder, not a package)
import fused_moe_configs_gpu as gpu  # noqa: E402
from tests.benchmarks import assert_refused  # noqa: E402

H100 = "NVIDIA_H100_80GB_HBM3"


def _brute_align(topk_ids, block_m: int, num_experts: int):
    flat = topk_ids.flatten().tolist()
    numel = len(flat)
    em = numel * block_m if numel < num_experts + 1 else numel + (num_experts + 1) * (block_m - 1)
    sorted_ids, expert_ids = [], []
    for e in range(num_experts):
        rows = [i for i, x in enumerate(flat) if x == e]
        if not rows:
            continue
        padded = -(-len(rows) // block_m) * block_m
        sorted_ids += rows + [numel] * (padded - len(rows))
        expert_ids += [e] * (padded // block_m)
    post = len(sorted_ids)
    sorted_ids += [numel] * (em - post)
    expert_ids += [-1] * (-(-em // block_m) - len(expert_ids))
    return sorted_ids, expert_ids, post


@pytest.mark.parametrize("tokens,top_k,experts,block_m", [(1, 9, 257, 16), (3, 8, 256, 64),
                                                           (40, 9, 257, 16), (64, 4, 8, 16),
                                                           (5, 2, 4, 4)])
def test_align_matches_a_brute_force_one(tokens, top_k, experts, block_m):
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    sorted_ids, expert_ids, post = fmc.align(ids.to(torch.int32), block_m, experts)
    want_sorted, want_experts, want_post = _brute_align(ids, block_m, experts)
    assert sorted_ids.tolist() == want_sorted
    assert expert_ids.tolist() == want_experts
    assert post.tolist() == [want_post] and post.dtype == torch.int32
    # every routed row once; each block one expert's
    real = sorted_ids[sorted_ids < ids.numel()]
    assert sorted(real.tolist()) == list(range(ids.numel()))
    blocks = sorted_ids[:want_post].view(-1, block_m)
    for b, e in zip(blocks, expert_ids[:want_post // block_m]):
        rows = b[b < ids.numel()]
        assert (ids.flatten()[rows.long()] == e).all()


def test_quantiser_scales_each_group_to_the_fp8_range():
    x = (torch.randn(5, 256) * torch.tensor([1.0, 30.0]).repeat_interleave(128)).to(torch.bfloat16)
    q, s = fmc.quant_fp8_groups(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (5, 2)
    amax = x.float().view(5, 2, 128).abs().amax(-1)
    assert torch.allclose(s, amax / 448.0)
    back = (q.float().view(5, 2, 128) * s[..., None]).view(5, 256)
    assert ((back - x.float()).abs() <= 0.07 * x.float().abs() + 1e-3 * amax.max()).all()


def test_the_served_source_runs_the_e257_h200_tables_with_a_tma_down_gemm():
    tables = fmc.load_tables()
    w13_file = "triton_3_5_1/" + fmc.config_file_name(257, 256, "NVIDIA_H200", down=False)
    down_file = "triton_3_5_1/" + fmc.config_file_name(257, 256, "NVIDIA_H200", down=True)
    for tokens, key in ((1, 1), (3, 2), (5, 4), (100, 96), (256, 256)):   # ties: the first key
        p = fmc.pick(fmc.SOURCES["served"], tokens, tables, H100)
        assert (p.w13_file, p.w2_file) == (w13_file, down_file)
        assert p.w13 == tables[w13_file][str(key)]
        down = dict(tables[down_file][str(key)])
        assert down.pop("USE_TMA") is True and p.w2 == down and p.w2_tma
        assert p.w13["BLOCK_SIZE_M"] == 16
    assert not fmc.pick(fmc.SOURCES["served"], 8, tables, H100, tma_supported=False).w2_tma


def test_the_collector_runs_triton_3_1_0s_e256_table_for_both_gemms():
    tables = fmc.load_tables()
    want_file = "triton_3_1_0/" + fmc.config_file_name(256, 256, "NVIDIA_H200", down=False)
    block_m = {}
    for tokens in fmc.TOKENS:
        for name in ("collector", "collector_tiles_e257"):
            p = fmc.pick(fmc.SOURCES[name], tokens, tables, H100)
            assert p.w13_file == p.w2_file == want_file and p.w13 == p.w2 and not p.w2_tma
            block_m[tokens] = p.w13["BLOCK_SIZE_M"]
    # h200_fused_moe_tiles.py's E256_N256_TRITON_3_1_0_BLOCK_M at these counts
    assert block_m == {1: 16, 2: 16, 4: 64, 8: 64, 16: 16, 32: 64, 64: 64, 128: 64, 256: 64}


def test_a_device_with_no_table_gets_sglangs_default_config():
    tables = fmc.load_tables()
    for name in ("device_served", "device_collector"):
        p = fmc.pick(fmc.SOURCES[name], 16, tables, H100)
        assert p.w13 == p.w2 == fmc.default_config() and p.w13_file == "default"
        assert not p.w2_tma
    on_h200 = fmc.pick(fmc.SOURCES["device_served"], 16, tables, "NVIDIA_H200")
    assert on_h200 == fmc.pick(fmc.SOURCES["served"], 16, tables, H100)
    assert fmc.sglang_device_name("NVIDIA H100 80GB HBM3") == H100


def test_the_version_fallback_follows_sglangs_list():
    name = fmc.config_file_name(257, 256, "X", down=False)
    tables = {f"triton_3_2_0/{name}": {"1": {"a": 1}}, f"triton_3_3_1/{name}": {"1": {"a": 2}}}
    assert fmc.moe_configs(tables, 257, 256, "X", "3.5.1", False) == (
        {1: {"a": 2}}, f"triton_3_3_1/{name}")               # newest listed first
    tables[f"triton_3_5_1/{name}"] = {"1": {"a": 3}}
    assert fmc.moe_configs(tables, 257, 256, "X", "3.5.1", False)[0] == {1: {"a": 3}}
    assert fmc.moe_configs(tables, 257, 256, "X", "3.5.1", True) == (None, "default")


def _records() -> list[dict]:
    tables = fmc.load_tables()
    out = []
    for name in ("served", "collector"):
        s = fmc.SOURCES[name]
        for i, t in enumerate((1, 16)):
            p = fmc.pick(s, t, tables, H100)
            w13, w2 = 20.0 + 10 * i + (5 if name == "collector" else 0), 10.0 + i
            out.append({"source": name, "what": s.what, "tokens": t, "num_experts": s.num_experts,
                        "top_k": 9, "active_experts": 9.0 + 40 * i, "weight_bytes": 1.0,
                        "layer_us": w13 + w2 + 8.0, "w13_us": w13, "w2_us": w2,
                        "gemm_gbps": 1000.0, "config_w13": p.w13, "config_w2": p.w2,
                        "w2_tma": p.w2_tma, "w13_file": p.w13_file, "w2_file": p.w2_file,
                        "layers": 8, "replays": 30, "gpu": "NVIDIA H100 80GB HBM3",
                        "torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0",
                        "command": "benchmarks/fused_moe_configs_gpu.py --out o",
                        "date": "2026-12-06 10:00 UTC"})
    return out


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "benchmarks/fused_moe_configs_gpu.py", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_render_rebuilds_the_table_from_records(tmp_path):
    records = _records()
    failed = {k: records[0][k] for k in ("what", "num_experts", "layers", "replays", "gpu",
                                          "torch", "triton", "cuda", "command", "date")}
    records.append({**failed, "source": "device_served", "tokens": 1,
                    "error": "OutOfResources: shared memory"})
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = _run("--render", str(tmp_path / "records.jsonl"), "--out", str(tmp_path / "t"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "t" / "table.md").read_text()
    assert text == gpu.table(records)
    assert ("| 1 | 9.0 / 9.0 | 38.0 (20.0 + 10.0), 1000 | 43.0 (25.0 + 10.0), 1000 | - | "
            "1.13 (1.17) |") in text
    assert "- `device_served` at 1 tokens: OutOfResources: shared memory" in text
    assert "16/64/128 g1 w4 s5 \\| 16/128/128 g16 w4 s2 TMA" in text      # served, 1 token
    assert "on NVIDIA H100 80GB HBM3" in text


def test_bad_arguments_are_refused_in_one_line_before_any_gpu_work(tmp_path):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    cases = ((["--sources", "nope"], "--sources: unknown ['nope']"),
             (["--tokens", "0"], "--tokens (0) must be >= 1"),
             (["--replays", "5"], "--replays (5) must be >= 20"),
             (["--layers", "0"], "--layers must be >= 1"),
             (["--render", str(tmp_path / "missing.jsonl")], "--render"),
             (["--render", str(tmp_path / "bad.jsonl")], "--render"))
    assert_refused(_run, tmp_path / "o", cases)


def test_without_cuda_it_exits_2_with_one_line():
    done = _run("--out", "/nonexistent/never-written")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["fused_moe_configs_gpu: no CUDA device"]


@pytest.mark.parametrize("tma", [False, True])
def test_the_vendored_kernel_compiles_for_sm90(tma):
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import sglang_fused_moe_kernel as kernel
    fn = kernel.fused_moe_kernel
    ptrs = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "a_scale_ptr": "*fp32",
            "b_scale_ptr": "*fp32", "topk_weights_ptr": "*fp32", "sorted_token_ids_ptr": "*i32",
            "expert_ids_ptr": "*i32", "num_tokens_post_padded_ptr": "*i32",
            "a_desc": "tensordesc<fp8e4nv[16, 128]>", "b_desc": "tensordesc<fp8e4nv[1, 128, 128]>"}
    const = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 16,
             "group_n": 128, "group_k": 128, "MUL_ROUTED_WEIGHT": tma, "top_k": 1 if tma else 9,
             "compute_type": tl.bfloat16, "use_fp8_w8a8": True, "use_int8_w8a8": False,
             "use_int8_w8a16": False, "per_channel_quant": False, "even_Ks": True,
             "c_sorted": not tma, "filter_expert": False, "swap_ab": True, "bias_ptr": None}
    if not tma:
        const.update(a_desc=None, b_desc=None)
    names = fn.arg_names
    sig = {n: "constexpr" if n in const else ptrs.get(n, "i32") for n in names}
    src = ASTSource(fn, sig, {(names.index(n),): v for n, v in const.items()})
    out = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": 4, "num_stages": 2 if tma else 5})
    assert "cubin" in out.asm and len(out.asm["cubin"]) > 0


def test_the_layer_matches_torch_in_tritons_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    done = subprocess.run([sys.executable, "tests/benchmarks/fused_moe_interpret.py"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(errors) == {"served", "served_bk64", "collector_bm64"}
    for name, (w13_err, layer_err) in errors.items():
        assert w13_err < 0.01 and layer_err < 0.01, (name, w13_err, layer_err)   # bf16 rounding
