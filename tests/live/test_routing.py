"""Router and forced routing: Qwen3's top-k, and the simulator's own expert draws."""

import numpy as np
import pytest
import torch

from epsim.routing import skew_from_dict
from live.errors import LiveError
from live.routing import Routing, forced_routing, route


def test_router_is_softmax_topk_renormalized(rng):
    x = torch.from_numpy(rng.standard_normal((6, 16)).astype(np.float32))
    gate = torch.from_numpy(rng.standard_normal((8, 16)).astype(np.float32))
    out = route(x, gate, top_k=3)
    probs = torch.softmax(x @ gate.T, dim=-1)
    top, ids = probs.topk(3, dim=-1)
    assert torch.equal(out.topk_ids, ids)
    torch.testing.assert_close(out.topk_weights, top / top.sum(-1, keepdim=True))
    assert out.topk_weights.dtype == torch.float32
    raw = route(x, gate, top_k=3, norm_topk_prob=False)
    torch.testing.assert_close(raw.topk_weights, top)


def test_forced_routing_draws_the_simulators_choices():
    skew = skew_from_dict("hotset:2:0.6", num_layers=2, num_experts=8, top_k=2, seed=4)
    forced = forced_routing(skew, 50, np.random.default_rng(9), layer=1)
    expected = skew.topk(50, np.random.default_rng(9), layer=1)
    np.testing.assert_array_equal(forced.topk_ids.numpy(), expected)
    torch.testing.assert_close(forced.topk_weights.sum(-1), torch.ones(50))


def test_routing_check_names_bad_shapes_and_ids():
    ids = torch.tensor([[0, 1], [2, 8]])
    weights = torch.full((2, 2), 0.5)
    with pytest.raises(LiveError, match=r"topk_ids \(range \[0, 8\]\) must lie in \[0, 8\)"):
        Routing(ids, weights).check(2, 2, 8)
    with pytest.raises(LiveError, match=r"topk_weights \(shape \[2, 2\]\) must be \[tokens, "
                                        r"top_k\] = \[2, 3\]"):
        Routing(torch.zeros(2, 3, dtype=torch.int64), weights).check(2, 3, 8)
    with pytest.raises(LiveError, match=r"topk_ids \(dtype torch.int32\) must be torch.int64"):
        Routing(ids.int(), weights).check(2, 2, 16)
