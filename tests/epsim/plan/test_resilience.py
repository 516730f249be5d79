"""The plan's failure columns, term by term: what a GPU failure costs an elastic-EP instance
(`epsim.plan.resilience.failure_seconds`). Datasheet costs: the terms, not a profile's values."""

from __future__ import annotations

import pytest

from epsim.eplb import rebalance_params
from epsim.eplb.recovery import deployment_rejoin_terms
from epsim.plan.resilience import _reprefill_s, failure_seconds
from epsim.sim.steady import steady_model, steady_state
from tests.epsim.sim.test_elastic import failing_scenario
from tests.epsim.sim.test_eplb_process import DATASHEET


def _seconds(mode: str):
    sc = failing_scenario({"disaggregation_mode": mode, "failures": [], "failure_repair_s": 60.0})
    steady = steady_state(sc, DATASHEET)
    return sc, steady, failure_seconds(sc, DATASHEET, None, steady)


def test_lost_requests_are_decoded_again_and_prefilled_again_where_the_instance_prefills():
    agg, steady, (interruption, lost_s) = _seconds("null")
    model = steady_model(agg, DATASHEET)
    redo_decode = steady.running_per_rank * model.output_len / 2.0 / steady.output_per_s
    reprefill = _reprefill_s(agg, model, steady.running_per_rank * model.input_len)
    assert reprefill > 0
    # the rejoin runs no rebalance (SGLang 0.5.12); the survivors pause for its resync's
    # collectives over the 4 ranks (16 experts + 16 redundant: every expert twice)
    rejoin_s = deployment_rejoin_terms(agg, rebalance_params(DATASHEET, agg.cluster), 2).interruption_us * 1e-6
    assert 0 < rejoin_s < 1e-2
    assert lost_s == pytest.approx(interruption + rejoin_s + 60.0 / agg.deployment.ep_size
                                   + redo_decode + reprefill)
    # one prefill chunk per rank per step: the prompts of one rank's requests over all ranks
    chunk = agg.deployment.chunked_prefill_size
    assert reprefill == pytest.approx(steady.running_per_rank * model.input_len / (model.dp * chunk)
                                      * model.prefill_s(chunk))
    # a decode instance's lost prompts are prefilled again by its prefill instance, not by it
    dec, _, _ = _seconds("decode")
    assert _reprefill_s(dec, steady_model(dec, DATASHEET), 1e6) == 0.0
