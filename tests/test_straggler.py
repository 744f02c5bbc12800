"""Straggler detection from per-rank step times (median and MAD)."""
from __future__ import annotations

import numpy as np
import pytest

from warmup_kit.failures.models.straggler import find_stragglers, robust_z


def noisy(ranks=8, steps=30, base=0.010, sd=0.0005, seed=0):
    rng = np.random.default_rng(seed)
    return base + sd * rng.standard_normal((ranks, steps)).clip(-3, 3)


def test_a_slow_rank_is_named_and_its_cost_measured():
    t = noisy()
    t[5] *= 1.5                                   # 50% slower every step
    s = find_stragglers(t)
    assert s.ranks == (5,)
    assert s.excess[5] == pytest.approx(0.5, abs=0.05)
    # what every rank waited: the straggler's time over the slowest other
    want = (t.max(axis=0) - np.delete(t, 5, axis=0).max(axis=0)).sum()
    assert s.cost_s == pytest.approx(want)
    assert s.cost_rank_s == pytest.approx(8 * want)
    assert 0.2 < s.cost_fraction < 0.4
    assert "rank 5" in s.describe()


def test_healthy_ranks_are_not_flagged():
    for seed in range(20):
        s = find_stragglers(noisy(seed=seed))
        assert s.ranks == (), (seed, s.describe())
        assert "no straggler" in s.describe()


def test_identical_ranks_and_a_one_percent_slower_one():
    """MAD = 0: the z-scores are huge, but 1% is below min_excess."""
    t = np.full((4, 10), 0.01)
    t[2] *= 1.01
    assert find_stragglers(t).ranks == ()
    t[2] = 0.02
    assert find_stragglers(t).ranks == (2,)


def test_two_stragglers_slowest_first():
    t = noisy(ranks=16)
    t[3] *= 1.3
    t[11] *= 2.0
    assert find_stragglers(t).ranks == (11, 3)


def test_one_slow_step_is_noise_not_a_straggler():
    t = noisy()
    t[1, 7] *= 5                                  # one hiccup
    s = find_stragglers(t)
    assert s.ranks == ()
    assert s.flagged[1] < 0.5          # slow in a step or a few only


def test_a_straggler_hidden_by_the_mean_is_found_by_the_median():
    """With 4 ranks, one 3x slower: mean + 2 sd cannot flag it (it inflates
    both), median + MAD does."""
    t = noisy(ranks=4)
    t[0] *= 3
    mean, sd = t.mean(axis=0), t.std(axis=0)
    assert not np.any(t[0] > mean + 2 * sd)
    assert find_stragglers(t).ranks == (0,)


def test_robust_z_of_equal_values_is_finite():
    z = robust_z(np.ones(3))
    assert np.all(np.isfinite(z)) and np.all(z == 0)


def test_noisy_healthy_ranks_do_not_hide_a_straggler():
    """Healthy ranks with hiccups of 2-3x in a fifth of the steps (shared
    cores): per-rank medians over the steps still single out the slow
    one."""
    rng = np.random.default_rng(3)
    t = noisy(ranks=4, steps=20)
    t *= np.where(rng.random(t.shape) < 0.2, rng.uniform(2, 3, t.shape), 1)
    t[2] = 0.04 * (1 + 0.2 * rng.random(20))
    assert find_stragglers(t).ranks == (2,)


@pytest.mark.parametrize("bad", [np.ones((2, 5)), np.ones(5), np.ones((3, 0)),
                                 np.full((3, 2), np.nan), -np.ones((3, 2))])
def test_bad_input_is_refused(bad):
    with pytest.raises(ValueError):
        find_stragglers(bad)
