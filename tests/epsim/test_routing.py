"""Each skew generator reproduces its target statistics from samples (seeded): uniform, Zipf
slope, hot-set fraction, per-layer variation, drift rate, trace replay; and the samplers'
moments."""

from __future__ import annotations

import json

import numpy as np
import pytest

from epsim.routing import SkewModel, gini, sample_loads, sample_topk, skew_from_dict
from epsim.errors import SpecError
from epsim.routing.popularity import zipf_shares
from epsim.routing.sampling import ALIAS_BELOW_SLOTS_PER_EXPERT, AliasTable, alias_table
from epsim.spec.workload import HotSetSkew, TraceSkew, UniformSkew, ZipfSkew


def _mean_shares(model: SkewModel, rng, num_tokens=20_000, draws=20, **when) -> np.ndarray:
    """[layers, experts] measured share of routed slots over `draws` sampled batches."""
    total = sum(model.loads(num_tokens, rng, **when) for _ in range(draws))
    return total / total.sum(axis=1, keepdims=True)


def test_uniform_spreads_evenly(rng):
    model = SkewModel(UniformSkew(), num_layers=4, num_experts=64, top_k=8, seed=1)
    shares = _mean_shares(model, rng)
    assert np.abs(shares * 64 - 1).max() < 0.05
    assert gini(shares).max() < 0.02
    topk = model.topk(20_000, rng, layer=2)
    assert all(len(set(row)) == 8 for row in topk[:200])             # distinct experts per token
    freq = np.bincount(topk.ravel(), minlength=64) / 20_000
    np.testing.assert_allclose(freq, 8 / 64, atol=0.01)               # inclusion probability


@pytest.mark.parametrize("alpha", [0.4, 0.8, 1.2])
def test_zipf_reproduces_its_slope(rng, alpha):
    model = SkewModel(ZipfSkew(alpha=alpha), num_layers=3, num_experts=64, top_k=2, seed=2)
    shares = np.sort(_mean_shares(model, rng), axis=1)[:, ::-1]      # hot experts differ per layer
    ranks = np.arange(1, 33)
    for layer in range(3):
        slope = np.polyfit(np.log(ranks), np.log(shares[layer, :32]), 1)[0]
        assert slope == pytest.approx(-alpha, abs=0.05)
    hot = [np.argmax(model.popularity()[layer]) for layer in range(3)]
    assert len(set(hot)) > 1                                          # shuffled per layer


def test_hotset_takes_its_fraction(rng):
    spec = HotSetSkew(num_hot=4, hot_frac=0.3, shuffle_per_layer=False)
    model = SkewModel(spec, num_layers=2, num_experts=32, top_k=4, seed=3)
    shares = _mean_shares(model, rng)
    np.testing.assert_allclose(shares[:, :4].sum(axis=1), 0.3, atol=0.005)
    np.testing.assert_allclose(shares[:, 4:].std(axis=1) / shares[:, 4:].mean(axis=1), 0, atol=0.05)
    # the live bench's top-k draws see the same hot set
    topk = model.topk(20_000, rng, layer=0)
    assert np.isin(topk, np.arange(4)).sum() / topk.size == pytest.approx(0.3, abs=0.01)


def test_layer_variation_has_its_sigma():
    model = SkewModel(UniformSkew(layer_variation=0.3), num_layers=64, num_experts=128, top_k=1, seed=4)
    log_pop = np.log(model.popularity())
    spread = (log_pop - log_pop.mean(axis=1, keepdims=True)).std()
    assert spread == pytest.approx(0.3, rel=0.05)


def test_drift_swaps_at_its_rate():
    rate, num_layers, num_experts = 0.5, 8, 32
    model = SkewModel(ZipfSkew(alpha=1.0, drift_rate_per_s=rate), num_layers, num_experts, 1, seed=5)
    prev = model.popularity(0.0).copy()
    changed = 0
    horizon, dt = 50.0, 0.01
    for t in np.arange(dt, horizon + dt / 2, dt):
        now = model.popularity(float(t))
        changed += int((now != prev).sum())
        prev = now.copy()
    # E*rate/2 swaps per layer per second; a swap of an expert with itself changes nothing
    expected = rate * num_experts / 2 * num_layers * horizon * (1 - 1 / num_experts)
    assert changed / 2 == pytest.approx(expected, abs=5 * np.sqrt(expected))


def test_drift_makes_a_placement_stale_at_that_rate():
    rate = 0.2
    model = SkewModel(ZipfSkew(alpha=1.0, drift_rate_per_s=rate), 64, 32, 1, seed=6)
    start = model.popularity(0.0).copy()
    later = model.popularity(1.0 / rate)
    # each expert joins swaps at `rate`: after 1/rate seconds ~e^-1 of them never moved
    still = (later == start).mean()
    assert still == pytest.approx(np.exp(-1) + (1 - np.exp(-1)) / 32, abs=0.04)
    # asking for an earlier time replays the same drift path from the seed
    np.testing.assert_array_equal(model.popularity(0.0), start)


def test_same_seed_same_draws():
    spec = ZipfSkew(alpha=0.9, layer_variation=0.2, drift_rate_per_s=0.1)
    a, b, c = (SkewModel(spec, 4, 16, 2, seed=s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a.popularity(3.0), b.popularity(3.0))
    assert not np.array_equal(a.popularity(3.0), c.popularity(3.0))
    np.testing.assert_array_equal(a.loads(100, np.random.default_rng(1), t_s=3.0),
                                  b.loads(100, np.random.default_rng(1), t_s=3.0))


def test_trace_replay_of_our_jsonl(tmp_path, rng):
    steps = [rng.integers(1, 50, (2, 8)).astype(float) for _ in range(3)]
    path = tmp_path / "trace.jsonl"
    # measurement records of kind expert_load qualify; lines are ordered by forward_pass_id
    lines = [json.dumps({"kind": "expert_load", "forward_pass_id": i, "loads": steps[i].tolist()})
             for i in (2, 0, 1)]
    path.write_text("\n".join(lines) + "\n")
    model = SkewModel(TraceSkew(path=path.name), num_layers=4, num_experts=8, top_k=1, seed=0,
                      base_dir=tmp_path)
    for step in range(4):                                             # wraps after the last pass
        expected = steps[step % 3] / steps[step % 3].sum(axis=1, keepdims=True)
        np.testing.assert_allclose(model.popularity(step=step)[:2], expected)
        np.testing.assert_allclose(model.popularity(step=step)[2:], expected)   # layers tile
    measured = _mean_shares(model, rng, num_tokens=50_000, draws=10, step=1)
    np.testing.assert_allclose(measured[:2], steps[1] / steps[1].sum(axis=1, keepdims=True), atol=0.01)
    from_string = skew_from_dict(f"trace:{path}", num_layers=2, num_experts=8, top_k=1)
    np.testing.assert_allclose(from_string.popularity(step=0), model.popularity(step=0)[:2])


def test_trace_shares_are_read_once_per_file(tmp_path, monkeypatch):
    """A trace file's shares are computed once per process while the file is unchanged: a
    second model of the same file and shape reads nothing and gets the same (read-only)
    shares; a rewritten file is read again; another shape is its own entry."""
    import epsim.routing.skew as skew_module
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"kind": "expert_load", "forward_pass_id": 0,
                                "loads": [[1.0, 3.0, 0.0, 4.0]] * 2}) + "\n")
    reads = []
    read = skew_module.read_trace
    monkeypatch.setattr(skew_module, "read_trace", lambda p: reads.append(p) or read(p))
    first = SkewModel(TraceSkew(path=path.name), num_layers=2, num_experts=4, top_k=1,
                      base_dir=tmp_path)
    again = SkewModel(TraceSkew(path=path.name), num_layers=2, num_experts=4, top_k=1,
                      base_dir=tmp_path)
    assert len(reads) == 1
    np.testing.assert_array_equal(again.popularity(), first.popularity())
    np.testing.assert_allclose(first.popularity()[0], [1 / 8, 3 / 8, 0.0, 4 / 8])
    shares = skew_module.trace_shares(path, path.name, 2, 4, 1)
    assert not shares.flags.writeable
    SkewModel(TraceSkew(path=path.name), num_layers=4, num_experts=4, top_k=1, base_dir=tmp_path)
    assert len(reads) == 2                                            # another shape
    path.write_text(json.dumps({"kind": "expert_load", "forward_pass_id": 0,
                                "loads": [[2.0, 2.0, 2.0, 2.0, 0.0]] * 2}) + "\n")
    with pytest.raises(SpecError, match=r"workload.skew.path \('trace.jsonl'\) has 5 experts"):
        SkewModel(TraceSkew(path=path.name), num_layers=2, num_experts=4, top_k=1,
                  base_dir=tmp_path)
    assert len(reads) == 3                                            # the file changed


def test_sample_loads_moments_exact_and_normal_paths(rng):
    shares = zipf_shares(16, 0.7)[None, :]
    for num_tokens in (3, 4000):                                     # multinomial, then normal
        draws = np.stack([sample_loads(shares, num_tokens, 2, rng)[0] for _ in range(3000)])
        np.testing.assert_allclose(draws.sum(axis=1), num_tokens * 2)
        n = num_tokens * 2
        np.testing.assert_allclose(draws.mean(axis=0), n * shares[0], rtol=0.05, atol=0.05)
        q = shares[0]
        # the variance estimate of a count with mean ~0.2 is noisy: looser for the exact path
        np.testing.assert_allclose(draws.var(axis=0), n * q * (1 - q), rtol=0.25 if n < 100 else 0.08)
        cov01 = np.cov(draws[:, 0], draws[:, 1])[0, 1]             # multinomial: -n q0 q1
        assert cov01 == pytest.approx(-n * q[0] * q[1], rel=0.25)
    exact = sample_loads(shares, 3, 2, rng)
    assert (exact == np.round(exact)).all()


def test_alias_table_draws_the_multinomial():
    """The alias table's draws are multinomial: its implied probabilities are the shares (to
    rounding), every draw holds its slots, zero shares get none, and over many draws the counts
    have the multinomial's mean (chi-square per degree of freedom ~1, as numpy's own draws),
    variance and covariance."""
    rng = np.random.Generator(np.random.SFC64(5))
    shares = rng.gamma(0.3, size=(6, 64))
    shares[2, :7] = 0.0
    shares /= shares.sum(axis=1, keepdims=True)
    table = AliasTable(shares)
    cut, other = table._cut.reshape(6, 64), table._other.reshape(6, 64) % 64
    implied = cut / 64
    for layer in range(6):
        np.add.at(implied[layer], other[layer], (1.0 - cut[layer]) / 64)
    np.testing.assert_allclose(implied, shares, atol=1e-15)
    num_slots, num = 24, 8000                                     # 0.375 slots per expert
    assert num_slots < ALIAS_BELOW_SLOTS_PER_EXPERT * 64
    draws = np.concatenate([table.loads(8, num_slots, rng) for _ in range(num // 8)])
    assert (draws.sum(axis=2) == num_slots).all() and (draws == np.round(draws)).all()
    assert draws[:, 2, :7].sum() == 0
    mean, expected = draws.mean(axis=0), num_slots * shares
    big = expected * num >= 20
    chi2 = ((mean - expected)[big] ** 2 * num / expected[big]).sum() / big.sum()
    assert 0.8 < chi2 < 1.2
    var = draws.var(axis=0)[big]
    assert np.median(var / (num_slots * shares * (1 - shares))[big]) == pytest.approx(1.0, abs=0.05)
    i, j = np.argsort(shares[0])[-2:]
    cov = np.cov(draws[:, 0, i], draws[:, 0, j])[0, 1]
    assert cov == pytest.approx(-num_slots * shares[0, i] * shares[0, j], rel=0.2)
    many = table.loads(3, int(ALIAS_BELOW_SLOTS_PER_EXPERT * 64), rng)   # the multinomial's part
    assert many.shape == (3, 6, 64) and (many.sum(axis=2) == 4 * 64).all()


def test_exact_draws_follow_the_drift():
    """Exact draws are drawn over the starting popularity and moved where the drift took each
    expert: their mean is the drifted popularity's, not the start's."""
    spec = ZipfSkew(alpha=1.2, layer_variation=0.3, drift_rate_per_s=2.0)
    model = SkewModel(spec, 3, 32, 4, seed=2)
    rng = np.random.Generator(np.random.SFC64(1))
    now = model.popularity(5.0).copy()
    assert np.abs(now - model.mean_popularity()).max() > 0.05       # the drift moved it
    total = sum(model.loads_block(4, 8, rng, t_s=5.0).sum(axis=0) for _ in range(2000))
    np.testing.assert_allclose(total / total.sum(axis=1, keepdims=True), now, atol=0.01)


def test_sample_topk_inclusion_probabilities(rng):
    shares = zipf_shares(12, 0.8)
    shares = np.minimum(shares, 1 / 3)
    shares /= shares.sum()
    picks = sample_topk(shares, 30_000, 3, rng)
    freq = np.bincount(picks.ravel(), minlength=12) / 30_000
    np.testing.assert_allclose(freq, 3 * shares, atol=0.01)


@pytest.mark.parametrize("alpha, tokens, lazy", [(0.4, 3000, True), (1.2, 300, False), (0.4, 2, False)])
def test_load_rows_are_the_block_bit_for_bit(alpha, tokens, lazy):
    """Rows formed on demand (where no draw can clip) or from a block drawn at once (where one
    might, or the draw is multinomial) equal `loads_block`'s rows and leave the generator where
    the block leaves it, under drift that moves the popularity between draw and read."""
    spec = ZipfSkew(alpha=alpha, layer_variation=0.3, drift_rate_per_s=0.5)
    a, b = (SkewModel(spec, 6, 64, 8, seed=3) for _ in range(2))
    rng_a, rng_b = (np.random.Generator(np.random.SFC64(9)) for _ in range(2))
    block = a.loads_block(5, tokens, rng_a, t_s=1.0)
    rows = b.load_rows(5, tokens, rng_b, t_s=1.0)
    assert b._no_clip[tokens * 8] == lazy     # the bound holds at mild skew and many tokens only
    b.popularity(40.0)                                   # drift swaps the state in place
    for i in (3, 0, 4):
        np.testing.assert_array_equal(rows.row(i), block[i])
    np.testing.assert_array_equal(rng_a.random(4), rng_b.random(4))


def test_drift_swaps_at_once_equal_swapping_one_by_one():
    from epsim.routing.skew import _apply_swaps
    rng = np.random.default_rng(7)
    layers, experts = 6, 16
    for num_swaps in (0, 1, 5, 40, 300):             # disjoint, a few chained, many chained
        rows = rng.random((2, layers * experts))
        flat_a = rng.integers(0, layers * experts, num_swaps)
        flat_b = flat_a - flat_a % experts + rng.integers(0, experts, num_swaps)  # self-swaps too
        expected = rows.copy()
        for a, b in zip(flat_a, flat_b):
            expected[:, [a, b]] = expected[:, [b, a]]
        _apply_swaps(rows, flat_a, flat_b)
        assert np.array_equal(rows, expected)


def _slot_loads_by_select(table: AliasTable, num_draws: int, num_slots: int,
                          rng: np.random.Generator) -> np.ndarray:
    """`AliasTable.slot_loads` as it was written first (a select by `np.where`, the clip at
    every expert count): the yardstick its one-gather form must match bit for bit."""
    layers, experts = table.shape
    u = rng.random((num_draws, layers, num_slots))
    u *= experts
    column = u.astype(np.int64)
    np.minimum(column, experts - 1, out=column)
    u -= column
    column += (experts * np.arange(layers)).reshape(1, layers, 1)
    stay = u < np.take(table._cut, column)
    expert = np.where(stay, column, np.take(table._other, column))
    expert += (layers * experts * np.arange(num_draws)).reshape(num_draws, 1, 1)
    loads = np.bincount(expert.ravel(), minlength=num_draws * layers * experts).astype(np.float64)
    return loads.reshape((num_draws, layers, experts))


class _Uniforms:
    """A generator stand-in whose `random` gives chosen uniforms (the alias table's edges)."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def random(self, shape):
        return np.resize(self.values, shape)


@pytest.mark.parametrize("experts", [8, 60, 128, 256])
def test_alias_slot_loads_match_the_select_form(experts):
    """The alias table's one-gather draw gives the select form's counts bit for bit and takes
    the same uniforms, whatever the experts (a power of two or not), draws and slots, zero
    shares included; and at uniforms whose product with the experts rounds up to the experts
    (the clip) or sits on a cut."""
    rng = np.random.default_rng(experts)
    shares = rng.gamma(0.3, size=(5, experts))
    shares[1, : experts // 4] = 0.0
    shares /= shares.sum(axis=1, keepdims=True)
    table = alias_table(shares)
    for num_draws, num_slots in [(1, 1), (1, 37), (3, 2 * experts), (4, 3 * experts), (20, 5)]:
        ours, theirs = (np.random.Generator(np.random.SFC64([experts, num_slots])) for _ in "ab")
        got = table.slot_loads(num_draws, num_slots, ours)
        assert np.array_equal(got, _slot_loads_by_select(table, num_draws, num_slots, theirs))
        assert ours.random() == theirs.random()               # the same uniforms taken
    cuts = table._cut.reshape(5, experts)
    edges = np.concatenate([[0.0, np.nextafter(1.0, 0.0), 1.0 - 2.0**-40],
                            ((np.arange(experts) + cuts[0]) / experts)[cuts[0] < 1.0]])
    got = table.slot_loads(2, edges.size, _Uniforms(edges))
    assert np.array_equal(got, _slot_loads_by_select(table, 2, edges.size, _Uniforms(edges)))
    assert got.sum() == 2 * 5 * edges.size


def test_alias_table_is_kept_per_popularity():
    """`alias_table` builds one table per distinct shares and gives it again for equal shares
    (another array), read-only; other shares get another table."""
    shares = np.full((2, 16), 1 / 16)
    first = alias_table(shares)
    assert alias_table(shares.copy()) is first
    assert not first._cut.flags.writeable and not first.shares.flags.writeable
    other = shares.copy()
    other[0, :2] = [2 / 16, 0.0]
    assert alias_table(other) is not first
