"""The vocabulary (`epsim.vocab`) is the one list of backends, selections, dtypes and modes:
the spec literals, the record schema, the CLI and the cost models take theirs from it.
(The live backend registry is checked against it in tests/live/test_backends.py.)"""

from typing import get_args

import pytest

from epsim import vocab
from epsim.cli import build_parser
from epsim.cost.comm import _BASE_US, comm_defaults, dedup_for
from epsim.records import MeasurementRecord
from epsim.spec.deployment import A2ABackend, DeepEPMode, DeploymentSpec, ReplicaSelection
from epsim.spec.hardware import ClusterSpec


def test_spec_literals_are_the_vocabulary():
    assert get_args(A2ABackend) == vocab.A2A_BACKENDS
    assert get_args(DeepEPMode) == vocab.DEEPEP_MODE_CHOICES
    assert get_args(ReplicaSelection) == vocab.REPLICA_SELECTIONS
    assert get_args(DeploymentSpec.model_fields["dispatch_dtype"].annotation) == vocab.DISPATCH_DTYPES
    assert set(vocab.LIVE_REPLICA_SELECTIONS) <= set(vocab.REPLICA_SELECTIONS)
    record_dtypes = get_args(MeasurementRecord.model_fields["dispatch_dtype"].annotation)
    assert record_dtypes == (*vocab.DISPATCH_DTYPES, "")


def test_cli_choices_are_the_vocabulary():
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["cost"]
    choices = {a.dest: a.choices for a in sub._actions}
    assert tuple(choices["dispatch_dtype"]) == vocab.DISPATCH_DTYPES
    assert tuple(choices["deepep_mode"]) == vocab.DEEPEP_MODE_CHOICES        # auto first, as SGLang


@pytest.mark.parametrize("name", vocab.A2A_BACKENDS)
def test_cost_models_cover_every_backend(name):
    """Each backend (in each kernel mode) has datasheet cost coefficients, and only the
    DeepEP-class ones count dispatched copies."""
    modes = vocab.DEEPEP_MODES if name == "deepep" else ("",)
    for mode in modes:
        params = comm_defaults(name, mode, ClusterSpec())
        assert params["base_us"] > 0
    assert (dedup_for(name) != "") == vocab.is_deepep_class(name)
    assert {backend for backend, _ in _BASE_US} == set(vocab.A2A_BACKENDS)


def test_capabilities():
    assert vocab.backends_with("fp8_dispatch") == ("deepep", "mooncake")
    assert vocab.backends_with("masking") == ("mooncake",)
    assert [vocab.is_deepep_class(n) for n in vocab.A2A_BACKENDS] == [False, True, True, True]
    with pytest.raises(ValueError, match=r"moe_a2a_backend \('nccl'\) must be one of \['none', "):
        vocab.backend("nccl")
