"""CostParams: one resolution per deployment and profile content, frozen, shared by every
CostModel of that deployment (epsim.cost.params, epsim.cost.resolve)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from epsim.cost import CostModel, resolve_params
from epsim.cost.resolve import _Resolver
from epsim.profile import Component, Profile
from epsim.sim import Simulation
from epsim.spec import scenario_from_dict
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model
from tests.epsim.plan_fixtures import TINY_PLAN_SCENARIO


def _specs(backend: str = "torch"):
    return (get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200"),
            DeploymentSpec(ep_size=8, moe_a2a_backend=backend))


def _fitted(base_us: float) -> Profile:
    return Profile(name="fit", hardware="H200", components={
        "torch/dispatch": Component(params={"base_us": base_us, "nvl_gbps": 10.0}, source="fit")})


def test_equal_inputs_share_one_resolution_and_a_changed_profile_gets_its_own():
    model, cluster, deployment = _specs()
    params = resolve_params(model, cluster, deployment, _fitted(99.0))
    # equal specs and an equal profile, other objects: the same resolution
    again = resolve_params(model.model_copy(), cluster.model_copy(), deployment.model_copy(),
                           _fitted(99.0))
    assert again is params
    assert CostModel(model, cluster, deployment, _fitted(99.0)).params is params
    other = resolve_params(model, cluster, deployment, _fitted(50.0))
    assert other is not params
    assert other.eager.dispatch[""].params["base_us"] == 50.0
    assert params.eager.dispatch[""].params["base_us"] == 99.0
    # graph steps of `torch` read its eager fit (it cannot be captured): the same coefficients
    assert params.graph.dispatch[""].params == params.eager.dispatch[""].params


def test_params_are_frozen():
    params = resolve_params(*_specs(), _fitted(99.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.num_ranks = 4
    with pytest.raises(TypeError):
        params.eager.dispatch[""].params["base_us"] = 1.0
    with pytest.raises(TypeError):
        params.eager.dispatch["low_latency"] = params.eager.dispatch[""]
    with pytest.raises(ValueError):
        params.eager.host_rows[""][0] = 1.0


def test_stages_per_step_kind_and_backend():
    deepep = resolve_params(*_specs("deepep"), Profile(name="d", hardware="H200"))
    assert set(deepep.eager.dispatch) == set(deepep.graph.combine) == {"normal", "low_latency"}
    assert deepep.kernel_modes == {"prefill": "normal", "decode": "low_latency"}
    assert deepep.dedup["low_latency"] == "pair"
    none = resolve_params(*_specs("none"), Profile(name="d", hardware="H200"))
    assert none.eager.stage("dispatch") is None and none.graph.comm_stages == ()
    assert none.eager.stage("experts") is none.eager.experts


def test_the_screen_and_the_engine_price_with_one_resolution(monkeypatch):
    """A run that starts at its steady batch asks the screen for it: two CostModels (the
    engine's and the screen's), one resolution."""
    built, resolved = [], []
    init, resolve = CostModel.__init__, _Resolver.resolve
    monkeypatch.setattr(CostModel, "__init__",
                        lambda self, *a, **k: built.append(self) or init(self, *a, **k))
    monkeypatch.setattr(_Resolver, "resolve",
                        lambda self, *a, **k: resolved.append(self) or resolve(self, *a, **k))
    monkeypatch.setattr("epsim.cost.resolve._RESOLVED", {})
    data = copy.deepcopy(TINY_PLAN_SCENARIO)
    data["workload"]["initial_running_per_rank"] = "steady"
    data["seed"] = 4321                      # a steady batch no other test has priced
    sim = Simulation(scenario_from_dict(data))
    assert sim.initial_running_per_rank >= 1
    assert len(built) == 2 and len(resolved) == 1
    engine, screen = built
    assert engine is sim.cost_model and screen.params is engine.params
