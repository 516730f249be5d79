"""Backend registry, the forward-path predicate, and the errors a user can hit."""

import pytest
import torch

from epsim import vocab
from live.backends import (BACKENDS, AllReduceBackend, BackendSpec, DeepEPBackend, MooncakeBackend,
                           TorchA2ABackend, backend_class, make_backend)
from live.errors import BackendUnavailableError, LiveError


def _spec(**kwargs):
    base = dict(hidden_size=4096, num_physical_experts=128, top_k=8, dtype=torch.bfloat16)
    return BackendSpec(**{**base, **kwargs})


def test_registry_and_forward_path_predicate():
    assert list(BACKENDS) == ["none", "torch", "deepep", "mooncake"]
    assert backend_class("torch") is TorchA2ABackend
    assert [vocab.is_deepep_class(name) for name in BACKENDS] == [False, True, True, True]
    single = make_backend("none", _spec(dtype=torch.float32, num_physical_experts=8))
    assert isinstance(single, AllReduceBackend) and not single.capabilities.deepep_class
    assert make_backend("torch", _spec()).capabilities.deepep_class


def test_registry_matches_vocabulary():
    """Every class's capabilities are the vocabulary's: masking is `set_active_ranks`, the
    low-latency layout is `LowLatencyLayout`, the normal forward is the all-reduce backend's."""
    from live.backends.packed import LowLatencyLayout

    assert tuple(BACKENDS) == vocab.A2A_BACKENDS
    for name, cls in BACKENDS.items():
        caps = vocab.backend(name)
        assert cls.name == name
        assert hasattr(cls, "set_active_ranks") == caps.masking, name
        assert issubclass(cls, LowLatencyLayout) == caps.low_latency, name
        assert (not issubclass(cls, AllReduceBackend)) == caps.deepep_class, name


def test_fp8_dispatch_only_where_the_backend_casts():
    with pytest.raises(LiveError, match=r"dispatch_dtype \('fp8'\) must be 'bf16' for backend "
                                        r"'torch'; FP8 dispatch: deepep, mooncake"):
        make_backend("torch", _spec(dispatch_dtype="fp8"))


def test_unknown_backend():
    with pytest.raises(LiveError, match=r"moe_a2a_backend \('nccl'\) must be one of none, torch, "
                                        r"deepep, mooncake"):
        make_backend("nccl", _spec())


def test_hidden_size_the_backend_cannot_take_is_reported_before_any_gpu_check():
    with pytest.raises(LiveError, match=r"hidden_size \(1000\) must be a multiple of 256 and "
                                        r"<= 8192 for the mooncake backend"):
        make_backend("mooncake", _spec(hidden_size=1000))
    with pytest.raises(LiveError, match=r"top_k \(10\) must be <= 9 for the deepep low_latency"):
        make_backend("deepep", _spec(top_k=10, mode="low_latency"))
    with pytest.raises(LiveError, match=r"dtype \(torch.float32\) must be torch.bfloat16 for the "
                                        r"mooncake backend"):
        make_backend("mooncake", _spec(dtype=torch.float32))
    with pytest.raises(LiveError, match=r"deepep_mode \('auto'\) must be one of normal, low_latency"):
        make_backend("deepep", _spec(mode="auto"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("name", ["mooncake", "deepep"])
def test_gpu_backend_without_a_gpu(name):
    with pytest.raises(BackendUnavailableError, match=rf"moe_a2a_backend \('{name}'\) needs a CUDA "
                                                      rf"GPU; device is 'cpu'"):
        make_backend(name, _spec(device=torch.device("cpu")))


def test_spec_values_are_checked():
    with pytest.raises(LiveError, match=r"dispatch_dtype \('fp4'\) must be one of \['bf16', 'fp8'\]"):
        _spec(dispatch_dtype="fp4")
    with pytest.raises(LiveError, match=r"max_tokens_per_rank \(0\) must be >= 1"):
        _spec(max_tokens_per_rank=0)


def test_mooncake_imports_where_installed():
    try:
        import mooncake.mooncake_ep_buffer  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"mooncake EP is not installed here ({exc}); its equality runs in the GPU suite")
    assert MooncakeBackend.requires_cuda


def test_deepep_imports_where_installed():
    pytest.importorskip("deep_ep", reason="deep_ep is not installed here; build it for the GPU "
                                          "machine's torch with scripts/build_deepep.sh")
    assert DeepEPBackend.requires_cuda
