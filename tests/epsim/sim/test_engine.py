"""The SimPy engine: determinism, decode timing, extension hooks (observers, processes, stalls,
placement updates, failed ranks), and the import rule."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from epsim.eplb import fill_lost
from epsim.profile import Profile
from epsim.sim import Simulation, simulate
from epsim.spec import scenario_from_dict

TINY_MODEL = {"name": "tiny-moe", "num_layers": 4, "hidden_size": 256, "moe_intermediate_size": 128,
              "num_experts": 16, "top_k": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "vocab_size": 1000}


def tiny_scenario(**sections):
    data = {
        "name": "tiny", "model": TINY_MODEL, "cluster": {"gpu": "H200", "num_nodes": 1},
        "deployment": {"ep_size": 4, "moe_a2a_backend": "torch", "max_running_requests": 16,
                       "chunked_prefill_size": 512},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 400.0},
                     "input_len": {"kind": "fixed", "value": 128},
                     "output_len": {"kind": "fixed", "value": 16},
                     "skew": {"kind": "zipf", "alpha": 0.8, "drift_rate_per_s": 1.0},
                     "duration_s": 0.5, "warmup_s": 0.1},
        "seed": 7,
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    return scenario_from_dict(data)


def test_same_seed_identical_run_other_seed_differs():
    a, b = simulate(tiny_scenario()), simulate(tiny_scenario())
    for name in a.steps:
        np.testing.assert_array_equal(a.steps[name], b.steps[name], err_msg=name)
    np.testing.assert_array_equal(a.finish_s, b.finish_s)
    c = simulate(tiny_scenario(), seed=8)
    assert not np.array_equal(a.steps["step_us"][:50], c.steps["step_us"][:50])


def test_decode_instance_tpot_is_the_step_time():
    # decode-only, every rank full from t=0 and never short of work: each running request makes
    # one token per step, so its TPOT is the mean step time over its lifetime
    sc = tiny_scenario(deployment={"disaggregation_mode": "decode"},
                       workload={"initial_running_per_rank": 16, "duration_s": 0.2,
                                 "arrivals": {"kind": "poisson", "rate_per_s": 50_000.0}})
    res = simulate(sc)
    steps = res.steps
    assert (steps["decode_tokens"] == 4 * 16).all()                   # batches stay full
    assert not steps["is_prefill"].any() and not steps["prefill_tokens"].any()
    done = np.isfinite(res.finish_s) & ~res.is_initial
    tpot = (res.finish_s[done] - res.first_token_s[done]) / (res.output_len[done] - 1) * 1e6
    ends = steps["start_us"] + steps["step_us"]
    for request in np.nonzero(done)[0][:20]:
        first, last = res.first_token_s[request] * 1e6, res.finish_s[request] * 1e6
        inside = (ends > first + 1e-6) & (ends <= last + 1e-6)
        assert inside.sum() == res.output_len[request] - 1
        assert tpot[np.nonzero(done)[0] == request][0] == pytest.approx(steps["step_us"][inside].mean())


def test_observers_see_every_step_with_conserved_loads():
    sim = Simulation(tiny_scenario())
    seen = []
    sim.add_observer(seen.append)
    res = sim.run()
    assert len(seen) == len(res.steps["step_us"])
    for info in seen[:30]:
        assert info.loads.shape == (4, 16)
        np.testing.assert_allclose(info.loads.sum(axis=1), info.tokens_per_rank.sum() * 4)
        assert info.end_us - info.start_us == pytest.approx(info.cost.step_us)


def test_stall_and_charge_from_a_process():
    sim = Simulation(tiny_scenario())

    def manager(s):
        yield s.env.timeout(0.2e6)
        s.stall(50_000.0, "rebalance")           # stop the world for 50 ms
        s.charge(123.0)                           # and add to the next step

    sim.add_process(manager)
    res = sim.run()
    assert res.stalls and res.stalls[0][1] == 50_000.0 and res.stalls[0][2] == "rebalance"
    steps = res.steps
    gap = steps["start_us"][1:] - (steps["start_us"][:-1] + steps["step_us"][:-1])
    assert gap.max() == pytest.approx(50_000.0)
    assert (steps["extra_us"] == 123.0).sum() == 1
    with pytest.raises(ValueError, match=r"stall us \(-1\) must be >= 0"):
        sim.stall(-1)


def test_placement_update_changes_traffic():
    sc = tiny_scenario(workload={"skew": {"kind": "hotset", "num_hot": 4, "hot_frac": 0.6,
                                          "shuffle_per_layer": False}})
    # hot experts 0-3 sit on rank 0 by default; spreading them over the ranks balances the load
    spread = np.tile(np.array([0, 4, 5, 6, 1, 7, 8, 9, 2, 10, 11, 12, 3, 13, 14, 15]), (4, 1))
    sim = Simulation(sc)
    before = sim.placement.version

    def rebalance(s):
        yield s.env.timeout(0.25e6)
        s.placement.update(spread)

    sim.add_process(rebalance)
    res = sim.run()
    version = res.steps["placement_version"]
    early, late = res.steps["imbalance"][version == before], res.steps["imbalance"][version > before]
    assert len(early) and len(late)
    assert early.mean() > 2.0 and late.mean() < 0.7 * early.mean()


def test_a_failed_rank_gets_no_tokens():
    # 16 experts + 8 redundant on 4 ranks: the 3 survivors' 18 slots can hold every expert
    sc = tiny_scenario(deployment={"enable_eplb": True, "ep_num_redundant_experts": 8})
    sim = Simulation(sc, scenario_processes=False)
    tokens = []
    sim.add_observer(lambda info: tokens.append((info.start_us, info.tokens_per_rank.copy(),
                                                 info.cost.traffic.pairs[:, 2].sum())))

    def failure(s):
        yield s.env.timeout(0.2e6)
        p2l = s.placement.physical_to_logical.copy()
        live = np.r_[0:12, 18:24]                                # rank 2 holds slots 12..17
        p2l[:, live] = fill_lost(p2l[:, live], 16)[0]
        s.placement.set_alive(2, False, placement=p2l)

    sim.add_process(failure)
    sim.run()
    after = [(t, pairs) for start, t, pairs in tokens if start > 0.2e6]
    assert after and all(t[2] == 0 and pairs == 0 for t, pairs in after)
    assert any(t[2] > 0 for start, t, _ in tokens if start < 0.2e6)


def test_progress_bar_reaches_the_end(capsys):
    simulate(tiny_scenario(workload={"duration_s": 0.2, "warmup_s": 0.0}), progress=True)
    assert "0.2/0.2 sim s" in capsys.readouterr().err


def test_import_epsim_loads_no_torch():
    code = ("import sys, epsim.cli, epsim.sim, epsim.cost, epsim.report, epsim.commands.simulate, "
            "epsim.commands.cost; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("backend, deployment", [
    ("none", {"enable_dp_attention": False}),
    ("deepep", {"deepep_mode": "auto", "enable_two_batch_overlap": True}),
    ("deepep", {"disaggregation_mode": "prefill", "dispatch_dtype": "fp8"}),
    ("mooncake", {"enable_mixed_chunk": True}),
    ("torch", {"enable_eplb": True, "ep_num_redundant_experts": 4, "ep_dispatch_algorithm": "static"}),
    ("torch", {"enable_eplb": True, "ep_num_redundant_experts": 4, "ep_dispatch_algorithm": "round_robin"}),
])
def test_deployment_variants_run_and_conserve_tokens(backend, deployment):
    sc = tiny_scenario(deployment={"moe_a2a_backend": backend, **deployment},
                       cluster={"num_nodes": 2, "gpus_per_node": 2})   # 2 nodes of 2 GPUs
    sim = Simulation(sc)
    checked = []

    def check(info):
        tr = info.cost.traffic
        np.testing.assert_allclose(tr.pairs.sum(axis=1), info.tokens_per_rank.sum() * 4 * (
            0.5 if sc.deployment.enable_two_batch_overlap else 1.0))
        np.testing.assert_allclose(tr.rdma_send.sum(axis=1), tr.rdma_recv.sum(axis=1), atol=1e-9)
        checked.append(info.cost.step_us)

    sim.add_observer(check)
    res = sim.run()
    assert checked and np.isfinite(checked).all()
    assert np.isfinite(res.first_token_s).any()


def test_eplb_or_failures_without_a_process_warn():
    # the scenario's own processes turned off and nothing in their place: the run says so
    eplb = tiny_scenario(deployment={"enable_eplb": True}, workload={"duration_s": 0.05,
                                                                     "warmup_s": 0.0})
    with pytest.warns(UserWarning, match="enable_eplb is set but no EPLB process runs: the placement"):
        Simulation(eplb, scenario_processes=False).run()
    failing = tiny_scenario(deployment={"failures": [{"at_s": 0.01, "rank": 1, "recover_after_s": 0.01}],
                                        "elastic_recovery": "reload"},
                            workload={"duration_s": 0.05, "warmup_s": 0.0})
    with pytest.warns(UserWarning, match="failures is set but no failure process runs"):
        Simulation(failing, scenario_processes=False).run()
    def rebalancer(s):                           # a (trivial) EPLB process takes it over
        yield s.env.timeout(1.0)

    datasheet = Profile(name="datasheet-H200", hardware="H200")   # no extrapolation warnings
    sim = Simulation(eplb, profile=datasheet, scenario_processes=False)
    sim.add_process(rebalancer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.run()
        simulate(eplb, profile=datasheet)        # the scenario's EPLB manager runs: no warning
