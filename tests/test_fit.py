"""warmup_kit.measure.fit: when beta and gamma cannot be told apart.

Ring, binary and double trees and Rabenseifner reduce exactly half of the
bytes through their busiest port (G = B/2) for every N, so measurements of
those schedules alone determine beta + gamma/2 and no split of it (book,
Chapter 4, "the crossover, measured")."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from warmup_kit.measure import crossover
from warmup_kit.measure import fit as F

HALF = ("ring", "tree", "double_tree", "rabenseifner")
SIZES = [1 << k for k in range(10, 23)]
DATA = Path(__file__).resolve().parents[1] / "book" / "data" / "crossover.json"


def synthetic(alpha, beta, gamma, n, algorithms, noise=0.0, seed=1):
    rng = np.random.default_rng(seed)
    truth = F.Fit(alpha, beta, gamma)
    return [{"algorithm": a, "ranks": n, "size": v, "type": "double",
             "time_us": F.predict(a, v, n, truth)
             * (1 + noise * rng.standard_normal()) * 1e6}
            for a in algorithms for v in SIZES]


@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_reduced_share_is_half_for_these_schedules(n):
    X = np.array([F.features(a, v, n) for a in HALF for v in SIZES])
    assert F.reduced_share(X) == pytest.approx(0.5)
    X = np.array([F.features(a, v, n) for a in HALF + ("recursive_doubling",)
                  for v in SIZES])
    assert F.reduced_share(X) is None


@pytest.mark.parametrize("noise", [0.0, 0.05])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_inseparable_rows_fit_beta_plus_half_gamma(n, noise):
    alpha, beta, gamma = 20e-6, 0.25e-9, 0.4e-9
    f = F.fit(synthetic(alpha, beta, gamma, n, HALF, noise))
    assert f.gamma_in_beta == pytest.approx(0.5)
    assert f.gamma_s_per_byte == 0.0
    assert f.beta_s_per_byte == pytest.approx(beta + gamma / 2,
                                              rel=0.05 if noise else 1e-6)
    assert f.alpha_s == pytest.approx(alpha, rel=0.15 if noise else 1e-6)


def test_separable_rows_still_split():
    rows = synthetic(20e-6, 0.25e-9, 0.4e-9, 4,
                     HALF + ("recursive_doubling",))
    f = F.fit(rows)
    assert f.gamma_in_beta is None
    assert (f.beta_s_per_byte, f.gamma_s_per_byte) == \
        pytest.approx((0.25e-9, 0.4e-9), rel=1e-6)


def test_held_gamma_is_a_split():
    f = F.fit(synthetic(10e-6, 0.3e-9, 0.6e-9, 4, HALF),
              gamma_s_per_byte=0.6e-9)
    assert f.gamma_in_beta is None
    assert (f.alpha_s, f.beta_s_per_byte) == pytest.approx((10e-6, 0.3e-9))


@pytest.mark.parametrize("n", [2, 4])
def test_stored_measurement_gives_a_credible_per_byte_cost(n):
    """On the stored 2-core sweep, beta + gamma/2 is a few GB/s (a shared-
    memory copy at each end), never the 151 GB/s of an arbitrary split."""
    rows = [r for r in crossover.load(DATA)["rows"] if r["ranks"] == n]
    f = F.fit(rows, algorithms=HALF)
    assert f.gamma_in_beta == pytest.approx(0.5)
    assert 0.5 < f.bandwidth_gbps < 20
    assert f.rms_rel_error < 0.35


def test_cli_fits_only_the_named_schedules(capsys):
    F.main([str(DATA), "--algorithms", ",".join(HALF)])
    out = capsys.readouterr().out
    assert out.count("beta above is beta + 0.5 gamma") == 2
    assert "52 points" in out and "65 points" not in out


def test_doubts_name_a_parameter_at_its_bound_and_a_bad_fit():
    good = F.Fit(alpha_s=5e-6, beta_s_per_byte=1e-10, gamma_s_per_byte=3e-10,
                 rms_rel_error=0.05)
    assert F.doubts(good) == []
    pinned = F.Fit(alpha_s=5e-6, beta_s_per_byte=1e-10, gamma_s_per_byte=0.0,
                   rms_rel_error=0.05)
    (only,) = F.doubts(pinned)
    assert only.startswith("gamma sits at its bound") and \
        "not identifiable" in only
    # gamma folded into beta on purpose is not a doubt
    folded = F.Fit(alpha_s=5e-6, beta_s_per_byte=2e-10, gamma_s_per_byte=0.0,
                   rms_rel_error=0.05, gamma_in_beta=0.5)
    assert F.doubts(folded) == []
    poor = F.Fit(alpha_s=5e-6, beta_s_per_byte=1e-10, gamma_s_per_byte=3e-10,
                 rms_rel_error=0.47)
    (only,) = F.doubts(poor)
    assert "47%" in only and "not identifiable" in only
