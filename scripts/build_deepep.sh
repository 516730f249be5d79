#!/usr/bin/env bash
# Build DeepEP from source against the GPU machine's own torch and CUDA (issue #18).
#
# The `sgl-deep-ep` wheels need torch >= 2.13; the lent GPU image has torch 2.11.0+cu130, so
# DeepEP is compiled there from a pinned upstream release, fetched as source (never vendored
# into this repo). NVSHMEM comes from the image's `nvidia-nvshmem-cu13` package, which enables
# the low-latency and internode kernels; if no NVSHMEM is found the build is intranode-only
# and says so in its log and in the build info.
#
# Two steps, because the GPU machine reaches no network:
#   here (a machine with the upstream clone):
#     scripts/build_deepep.sh --source-archive /path/to/DeepEP.git .gpu/deepep/DeepEP-v1.2.1.tar
#   on the GPU machine (kind nvidia-h200, carry .gpu/deepep):
#     scripts/build_deepep.sh --build .gpu/deepep/DeepEP-v1.2.1.tar "$OUT"
# The build writes to OUTDIR: the wheel deep_ep-*.whl, build_deepep.log, build_info.json
# (release, commit, torch, CUDA, nvcc, NVSHMEM versions, wheel sha256 and size). The same info
# is compiled into the wheel as `deep_ep._build_info.BUILD_INFO`, which live.bench.provenance writes
# into every record of the `deepep` backend.
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

DEEPEP_RELEASE=v1.2.1
DEEPEP_COMMIT=9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee   # the tag's commit, checked below
PY=${PYTHON:-python3}

usage() {
    echo "usage: build_deepep.sh --source-archive GIT_DIR OUT.tar | --build ARCHIVE.tar OUTDIR" >&2
    exit 2
}

source_archive() {      # git archive of the pinned release; git records the commit in the tar
    local git_dir=$1 out=$2
    local commit
    commit=$(git --git-dir="$git_dir" rev-parse "$DEEPEP_RELEASE^{commit}")
    if [ "$commit" != "$DEEPEP_COMMIT" ]; then
        echo "build_deepep.sh: $DEEPEP_RELEASE is $commit in $git_dir, expected $DEEPEP_COMMIT" >&2
        exit 2
    fi
    mkdir -p "$(dirname "$out")"
    git --git-dir="$git_dir" archive --format=tar --prefix=DeepEP/ "$DEEPEP_COMMIT" > "$out"
    echo "wrote $out ($(du -h "$out" | cut -f1), DeepEP $DEEPEP_RELEASE $DEEPEP_COMMIT)"
}

build() {
    local archive=$1 outdir=$2
    mkdir -p "$outdir"
    local log="$outdir/build_deepep.log"
    exec > >(tee "$log") 2>&1
    echo "== DeepEP $DEEPEP_RELEASE ($DEEPEP_COMMIT) from $archive, $(date -u +%FT%TZ)"
    # the archive must be the pinned commit: `git archive` stores it as the pax comment
    local found
    found=$("$PY" -c "import tarfile,sys; print(tarfile.open(sys.argv[1]).pax_headers.get('comment',''))" "$archive")
    if [ "$found" != "$DEEPEP_COMMIT" ]; then
        echo "build_deepep.sh: $archive holds commit '$found', expected $DEEPEP_COMMIT" >&2
        exit 2
    fi
    local work
    work=$(mktemp -d /tmp/deepep-build.XXXXXX)
    tar -xf "$archive" -C "$work"
    local src="$work/DeepEP"

    local cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
    export CUDA_HOME=$cuda_home
    # CUDA 13 moved libcu++/CUB/Thrust headers under include/cccl
    if [ -d "$cuda_home/include/cccl" ]; then
        export CPLUS_INCLUDE_PATH="$cuda_home/include/cccl${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
    fi
    export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
    export MAX_JOBS=${MAX_JOBS:-$(nproc)}
    local nvshmem_dir nvshmem_version
    nvshmem_dir=$("$PY" -c "import nvidia.nvshmem as m; print(list(m.__path__)[0])" 2>/dev/null || true)
    nvshmem_version=$("$PY" -c "from importlib import metadata as m; print(m.version('nvidia-nvshmem-cu13'))" 2>/dev/null || true)
    local kernels="intranode, internode, low_latency"
    if [ -z "$nvshmem_dir" ] || ! ls "$nvshmem_dir"/lib/libnvshmem_host.so* >/dev/null 2>&1; then
        echo "!! no NVSHMEM (nvidia-nvshmem-cu13) found: building intranode kernels only"
        kernels="intranode"
        nvshmem_version=""
    fi
    local torch_version torch_cuda nvcc_version
    torch_version=$("$PY" -c "import torch; print(torch.__version__)")
    torch_cuda=$("$PY" -c "import torch; print(torch.version.cuda)")
    nvcc_version=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
    echo "torch $torch_version (CUDA $torch_cuda), nvcc $nvcc_version, NVSHMEM ${nvshmem_version:-none} at ${nvshmem_dir:-none}"
    echo "TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST MAX_JOBS=$MAX_JOBS CPLUS_INCLUDE_PATH=${CPLUS_INCLUDE_PATH:-}"

    # what was built travels inside the wheel, for the provenance of every deepep record
    cat > "$src/deep_ep/_build_info.py" <<EOF
"""Written by epsim's scripts/build_deepep.sh: what this DeepEP build is."""
BUILD_INFO = {"release": "$DEEPEP_RELEASE", "commit": "$DEEPEP_COMMIT", "torch": "$torch_version",
              "cuda": "$torch_cuda", "nvcc": "$nvcc_version", "nvshmem": "$nvshmem_version",
              "arch": "$TORCH_CUDA_ARCH_LIST", "kernels": "$kernels"}
EOF
    local start=$SECONDS
    if [ "$kernels" = "intranode" ]; then
        (cd "$src" && env -u NVSHMEM_DIR "$PY" -m pip wheel -v --no-build-isolation --no-deps -w "$outdir" .)
    else
        (cd "$src" && "$PY" -m pip wheel -v --no-build-isolation --no-deps -w "$outdir" .)
    fi
    local wheel
    wheel=$(ls "$outdir"/deep_ep-*.whl)
    echo "== built $(basename "$wheel") in $((SECONDS - start)) s, $(du -h "$wheel" | cut -f1)"
    "$PY" - "$wheel" "$outdir/build_info.json" "$src/deep_ep/_build_info.py" "$((SECONDS - start))" <<'EOF'
import hashlib, json, os, runpy, sys
wheel, out, info_py, seconds = sys.argv[1:5]
info = runpy.run_path(info_py)["BUILD_INFO"]
info.update(wheel=os.path.basename(wheel), wheel_bytes=os.path.getsize(wheel),
            wheel_sha256=hashlib.sha256(open(wheel, "rb").read()).hexdigest(),
            build_s=int(seconds))
json.dump(info, open(out, "w"), indent=1)
print(json.dumps(info))
EOF
    rm -rf "$work"
}

case "${1:-}" in
    --source-archive) [ $# -eq 3 ] || usage; source_archive "$2" "$3" ;;
    --build) [ $# -eq 3 ] || usage; build "$2" "$3" ;;
    *) usage ;;
esac
