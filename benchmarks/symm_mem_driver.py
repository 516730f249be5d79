"""The CUDA driver calls inside one NCCL symmetric-window registration, timed one by one on one GPU.

NCCL 2.28.3 (tag v2.28.3-1) makes a new segment of SGLang's symmetric pool in two calls:
`ncclMemAlloc` (`src/allocator.cc:13-85`: `cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`, then
`cuMemSetAccess` once per peer-capable GPU) and the collective
`ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)`, whose per-rank work is
`symMemoryMapLsaTeam` (`src/dev_runtime.cc:135-186`): for each of the node's n ranks, the peer's
handle fetched as a file descriptor over the proxy's Unix socket, `cuMemImportFromShareableHandle`,
`cuMemMap` and `cuMemSetAccess` into the flat window space (its own handle mapped the same way,
without the import), two bootstrap exchanges, then `cuMulticastBindMem` of the segment to the
team's multicast object when NVLS is on (`symBindTeamMemory`, `:188-197`).

On one GPU each of those driver calls runs as it does there except that the "peer" handle is this
GPU's own, exported and imported again in this process: `export`, `import`, `map_peer` and
`access_peer` time the per-peer path on local memory (the page-table work is the local GPU's in
both cases; what this leaves out is the proxy's fd passing, the bootstrap exchanges and the link).
`mc_bind` binds to a multicast team of one, where the driver allows it (NVSwitch systems with
multicast; otherwise its record says why not). Every call is timed on the host
(`time.perf_counter`), as a serving process waits for it.

Used by `benchmarks/symm_mem_register_gpu.py --local`; no effect on import.
"""

from __future__ import annotations

import ctypes
import os
import time

CU_MEM_ALLOCATION_TYPE_PINNED = 0x1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_HANDLE_TYPE_FABRIC = 0x1, 0x8
CU_MEM_LOCATION_TYPE_DEVICE = 0x1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
CU_MULTICAST_GRANULARITY_MINIMUM = 0x0
CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110   # cuda.h (12.x, 13.0)
CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED = 128
CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
CUDA_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_SUPPORTED = 800, 801

# The calls of one segment, in NCCL's order; the per-peer ones run n - 1 times at n ranks.
SELF_CALLS = ("create", "reserve", "map", "access")
PEER_CALLS = ("export", "import", "map_peer", "access_peer")
BIND_CALLS = ("mc_create", "mc_add_device", "mc_bind")


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class MemAllocationProp(ctypes.Structure):
    """cuda.h `CUmemAllocationProp` (v1)."""
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", MemLocation), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


class MemAccessDesc(ctypes.Structure):
    _fields_ = [("location", MemLocation), ("flags", ctypes.c_int)]


class MulticastObjectProp(ctypes.Structure):
    """cuda.h `CUmulticastObjectProp` (v1)."""
    _fields_ = [("numDevices", ctypes.c_uint), ("size", ctypes.c_size_t),
                ("handleTypes", ctypes.c_ulonglong), ("flags", ctypes.c_ulonglong)]


class DriverError(RuntimeError):
    def __init__(self, what: str, code: int):
        super().__init__(f"{what} returned CUresult {code}")
        self.code = code


def _ok(code: int, what: str) -> None:
    if code != 0:
        raise DriverError(what, code)


def _timed(rec: dict, key: str, fn, *args, what: str) -> None:
    t0 = time.perf_counter()
    code = fn(*args)
    rec[f"{key}_s"] = time.perf_counter() - t0
    _ok(code, what)


def align_up(size_bytes: int, granularity_bytes: int) -> int:
    """`size_bytes` rounded up to a whole number of `granularity_bytes` (NCCL's ALIGN_SIZE)."""
    return -(-size_bytes // granularity_bytes) * granularity_bytes


def time_segments(device: int, sizes_bytes: list[int], repeats: int) -> tuple[dict, list[dict]]:
    """Allocate, map, re-import and bind one segment per size and repeat on `device` (whose
    primary context the caller has made current), keeping them all as SGLang's pool does.
    Returns (the device's facts, one record per segment with `<call>_s` for each call timed)."""
    cu = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    _ok(cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")

    def attr(code: int) -> int:
        value = ctypes.c_int()
        return value.value if cu.cuDeviceGetAttribute(ctypes.byref(value), code, dev) == 0 else 0
    fabric, rdma = attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED), attr(
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)
    multicast = attr(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED)
    handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | (CU_MEM_HANDLE_TYPE_FABRIC if fabric
                                                                 else 0)
    prop = MemAllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED, requestedHandleTypes=handle_types,
                             location=MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, dev.value))
    prop.allocFlags.gpuDirectRDMACapable = 1 if rdma else 0
    gran = ctypes.c_size_t()
    _ok(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                         CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity")
    access = MemAccessDesc(MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, dev.value),
                           CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    facts = {"fabric_handles": fabric, "rdma_vmm": rdma, "multicast_supported": multicast,
             "alloc_granularity_bytes": gran.value}
    held, records = [], []
    for size in sizes_bytes:
        for repeat in range(repeats):
            nbytes = align_up(size, gran.value)
            rec = {"size_bytes": size, "mapped_bytes": nbytes, "repeat": repeat}
            handle, ptr, peer_ptr = ctypes.c_ulonglong(), ctypes.c_ulonglong(), ctypes.c_ulonglong()
            t0 = time.perf_counter()
            code = cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(nbytes), ctypes.byref(prop),
                                  ctypes.c_ulonglong(0))
            if code in (CUDA_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_SUPPORTED) and handle_types & 0x8:
                handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR   # as NCCL falls back
                prop.requestedHandleTypes = handle_types
                facts["fabric_handles"] = 0
                code = cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(nbytes),
                                      ctypes.byref(prop), ctypes.c_ulonglong(0))
            rec["create_s"] = time.perf_counter() - t0
            _ok(code, "cuMemCreate")
            _timed(rec, "reserve", cu.cuMemAddressReserve, ctypes.byref(ptr), ctypes.c_size_t(nbytes),
                   ctypes.c_size_t(gran.value), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0),
                   what="cuMemAddressReserve")
            _timed(rec, "map", cu.cuMemMap, ptr, ctypes.c_size_t(nbytes), ctypes.c_size_t(0), handle,
                   ctypes.c_ulonglong(0), what="cuMemMap")
            _timed(rec, "access", cu.cuMemSetAccess, ptr, ctypes.c_size_t(nbytes),
                   ctypes.byref(access), ctypes.c_size_t(1), what="cuMemSetAccess")
            fd, imported = ctypes.c_int(-1), ctypes.c_ulonglong()
            _timed(rec, "export", cu.cuMemExportToShareableHandle, ctypes.byref(fd), handle,
                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, ctypes.c_ulonglong(0),
                   what="cuMemExportToShareableHandle")
            _timed(rec, "import", cu.cuMemImportFromShareableHandle, ctypes.byref(imported),
                   ctypes.c_void_p(fd.value), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                   what="cuMemImportFromShareableHandle")
            os.close(fd.value)
            _ok(cu.cuMemAddressReserve(ctypes.byref(peer_ptr), ctypes.c_size_t(nbytes),
                                       ctypes.c_size_t(gran.value), ctypes.c_ulonglong(0),
                                       ctypes.c_ulonglong(0)), "cuMemAddressReserve")
            _timed(rec, "map_peer", cu.cuMemMap, peer_ptr, ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                   imported, ctypes.c_ulonglong(0), what="cuMemMap")
            _timed(rec, "access_peer", cu.cuMemSetAccess, peer_ptr, ctypes.c_size_t(nbytes),
                   ctypes.byref(access), ctypes.c_size_t(1), what="cuMemSetAccess")
            cu.cuMemRelease(imported)           # NCCL releases the imported handle after mapping
            mc = ctypes.c_ulonglong()
            if multicast:
                try:
                    _bind(cu, rec, mc, dev, handle, nbytes)
                except DriverError as err:
                    rec["mc_error"] = str(err)
                    mc = None
            else:
                rec["mc_error"] = "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0"
                mc = None
            held.append((handle, ptr, peer_ptr, nbytes, mc))
            records.append(rec)
    for handle, ptr, peer_ptr, nbytes, mc in held:
        for base in (ptr, peer_ptr):
            cu.cuMemUnmap(base, ctypes.c_size_t(nbytes))
            cu.cuMemAddressFree(base, ctypes.c_size_t(nbytes))
        if mc is not None and mc.value:
            cu.cuMulticastUnbind(mc, dev, ctypes.c_ulonglong(0), ctypes.c_size_t(nbytes))
            cu.cuMemRelease(mc)
        cu.cuMemRelease(handle)
    return facts, records


def _bind(cu, rec: dict, mc, dev, handle, nbytes: int) -> None:
    """A multicast object for a team of one, this segment bound to it (NCCL binds each window to
    the team's object at an offset; the object itself is made once, at the first window)."""
    mprop = MulticastObjectProp(numDevices=1, size=nbytes,
                                handleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, flags=0)
    mgran = ctypes.c_size_t()
    _ok(cu.cuMulticastGetGranularity(ctypes.byref(mgran), ctypes.byref(mprop),
                                     CU_MULTICAST_GRANULARITY_MINIMUM), "cuMulticastGetGranularity")
    mprop.size = align_up(nbytes, mgran.value)
    rec["mc_granularity_bytes"] = mgran.value
    _timed(rec, "mc_create", cu.cuMulticastCreate, ctypes.byref(mc), ctypes.byref(mprop),
           what="cuMulticastCreate")
    _timed(rec, "mc_add_device", cu.cuMulticastAddDevice, mc, dev, what="cuMulticastAddDevice")
    _timed(rec, "mc_bind", cu.cuMulticastBindMem, mc, ctypes.c_size_t(0), handle, ctypes.c_size_t(0),
           ctypes.c_size_t(nbytes), ctypes.c_ulonglong(0), what="cuMulticastBindMem")
