"""The host work of FlashInfer's JIT build of its CUTLASS SM100 FMHA module, without a GPU.

SGLang's `trtllm_mla` attention backend (0.5.3-0.5.5 on B200) plans FlashInfer ragged-prefill
wrappers with `backend="cutlass"` for the prefix chunks of a chunked prefill
(`FlashInferMhaChunkKVRunner.update_wrapper`); the plan loads FlashInfer's `fmha_cutlass_sm100a`
module (`flashinfer/prefill.py` `get_fmha_module` -> `gen_fmha_cutlass_sm100a_module(...)
.build_and_load()`), which FlashInfer builds with nvcc on first use where no AOT copy is installed
(`epsim.validate.silicon.first_use_nvcc` says why the rows' images had none). This compiles that
module's sources (`fmha_cutlass_sm100.cu`, `fmha_cutlass_sm100_binding.cu`,
`blackwell_fmha_plan.cu` of the FlashInfer wheel given) for sm_100a with the flags FlashInfer's
JIT gives them (`jit/core.py` `gen_jit_spec`, `jit/cpp_ext.py`, `compilation_context.py`: -O3,
--threads=1, -gencode=arch=compute_100a,code=sm_100a, ...) and records per source the wall time
and the CPU time of the nvcc process tree: on a shared machine the CPU seconds are what an idle
core would take, roughly. The link of the objects into the module is left out (seconds).

    python benchmarks/first_use_nvcc_aot.py --flashinfer DIR --tvm-ffi DIR --out DIR

    python benchmarks/first_use_nvcc_aot.py ... --include CURAND_INCLUDE   # toolkit from wheels

DIR for `--flashinfer`: the `flashinfer` package of an unpacked flashinfer-python wheel (`pip
download --no-deps flashinfer-python==0.5.0`); `--tvm-ffi`: the `tvm_ffi` package of
apache-tvm-ffi 0.1 (its headers). Writes `records.jsonl` (one line per source, with the nvcc and
FlashInfer versions, CPU and command).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

SOURCES = ("fmha_cutlass_sm100.cu", "fmha_cutlass_sm100_binding.cu", "blackwell_fmha_plan.cu")
ARCH = "-gencode=arch=compute_100a,code=sm_100a"     # B200 (10.0 -> "10.0a" in FlashInfer)
# gen_jit_spec's CUDA flags (non-debug), CompilationContext.COMMON_NVCC_FLAGS, cpp_ext's
FLAGS = ("-std=c++17", "--threads=1", "-use_fast_math", "-DFLASHINFER_ENABLE_F16",
         "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2",
         "-DNDEBUG", "-O3", "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1",
         "--compiler-options=-fPIC", "--expt-relaxed-constexpr",
         "-static-global-template-stub=false", "-D_GLIBCXX_USE_CXX11_ABI=1")


def nvcc_command(nvcc: str, flashinfer: Path, tvm_ffi: Path, source: Path, obj: Path,
                 extra: tuple = ()) -> list[str]:
    """The nvcc line FlashInfer's ninja file runs for one source of the module (`extra`: header
    folders a CUDA toolkit from wheels keeps apart, e.g. cuRAND's, which CUTLASS's util includes)."""
    data = flashinfer / "data"
    cuda = Path(nvcc).resolve().parent.parent
    includes = [sysconfig.get_path("include"), cuda / "include", cuda / "include" / "cccl",
                tvm_ffi / "include", data / "include", data / "cutlass" / "include",
                data / "cutlass" / "tools" / "util" / "include", data / "spdlog" / "include", *extra]
    system = [f for d in includes for f in ("-isystem", str(d))]
    return [nvcc, *system, *FLAGS, ARCH, "-c", str(source), "-o", str(obj)]


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _version(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(1) if match else ""


def compile_one(nvcc: str, flashinfer: Path, tvm_ffi: Path, name: str, out_dir: Path,
                extra: tuple = ()) -> dict:
    """Compile one source; its wall and CPU seconds (the nvcc tree: cicc, ptxas, the host cc)."""
    command = nvcc_command(nvcc, flashinfer, tvm_ffi, flashinfer / "data" / "csrc" / name,
                           out_dir / f"{name}.o", extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed on {name}: {done.stderr[-2000:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"source": name, "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2),
            "object_bytes": (out_dir / f"{name}.o").stat().st_size,
            "load_avg_1m": os.getloadavg()[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--flashinfer", type=Path, required=True)
    parser.add_argument("--tvm-ffi", type=Path, required=True)
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--include", type=Path, nargs="*", default=[],
                        help="more header folders (cuRAND's, where the toolkit lacks it)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=list(SOURCES), choices=SOURCES)
    args = parser.parse_args(argv)
    for path, name in ((args.flashinfer / "data" / "csrc", "--flashinfer"),
                       (args.tvm_ffi / "include", "--tvm-ffi")):
        if not path.is_dir():
            print(f"{name} ({path.parent}) must hold {path.name}/", file=sys.stderr)
            return 2
    nvcc_version = _version(subprocess.run([args.nvcc, "--version"], capture_output=True,
                                           text=True).stdout, r"release ([0-9.]+)")
    init = (args.flashinfer / "_build_meta.py")
    flashinfer_version = _version(init.read_text(), r"__version__ = \"([^\"]+)\"") \
        if init.is_file() else ""
    args.out.mkdir(parents=True, exist_ok=True)
    context = {"nvcc": nvcc_version, "flashinfer": flashinfer_version, "target": "sm_100a",
               "cpu": _cpu(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "command": "python benchmarks/first_use_nvcc_aot.py " + shlex.join(
                   sys.argv[1:] if argv is None else argv)}
    with tempfile.TemporaryDirectory() as tmp, (args.out / "records.jsonl").open("w") as out:
        for order, name in enumerate(args.only):
            record = {**compile_one(args.nvcc, args.flashinfer, args.tvm_ffi, name, Path(tmp),
                                    tuple(args.include)),
                      "order": order, **context}
            out.write(json.dumps(record) + "\n")
            out.flush()
            print(f"{name}: wall {record['wall_s']:.1f} s, cpu {record['cpu_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
