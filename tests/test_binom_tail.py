"""The binomial tail behind the anomaly significance test: exact, and finite for any group size.

References are computed exactly with integers (``math.comb``) and :class:`fractions.Fraction`,
independently of the log-space code under test.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from opscope.analysis.anomalies import _binom_tail


def exact_tail(k: int, n: int, p: Fraction) -> float:
    """P(X >= k), X ~ Binomial(n, p), summed term by term in rationals."""
    if k <= 0:
        return 1.0
    return float(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def exact_tail_large(k: int, n: int, a: int, b: int) -> float:
    """P(X >= k) for p = a/b as ``1 - P(X <= k-1)`` in integers: fast for small ``k``, any ``n``.

    term_i = C(n, i) a^i (b-a)^(n-i) is an integer; term_{i+1} = term_i (n-i) a / ((i+1)(b-a))
    exactly, so the lower sum costs k big-integer steps.
    """
    c = b - a
    term = c**n
    lower = 0
    for i in range(k):
        lower += term
        term = term * (n - i) * a // ((i + 1) * c)
    denom = b**n
    return (denom - lower) / denom  # int / int is correctly rounded (and needs no gcd)


@pytest.mark.parametrize("n", [1, 2, 5, 17, 60, 200])
@pytest.mark.parametrize("p", [Fraction(1, 1000), Fraction(1, 20), Fraction(1, 3), Fraction(9, 10)])
def test_small_n_matches_exact_rationals(n: int, p: Fraction) -> None:
    for k in range(n + 2):
        want = exact_tail(k, n, p)
        got = _binom_tail(k, n, float(p))
        assert got == pytest.approx(want, rel=1e-10, abs=1e-300), (k, n, p)


@pytest.mark.parametrize(
    ("k", "n", "a", "b"),
    [
        (1100, 10**6, 1, 1000),  # 3.2 sd above the mean: the anomaly test's regime
        (100, 10**5, 1, 1000),  # at the mean
        (90, 10**5, 1, 1000),  # below the mean: the lower side is summed
        (60, 10**5, 1, 10_000),  # 6x the expected count: a tiny tail
        (30, 1000, 1, 1000),  # far out in the tail of a 1,000-call group (the reported overflow)
        (1, 10**5, 1, 7),
    ],
)
def test_large_n_matches_exact_integers(k: int, n: int, a: int, b: int) -> None:
    want = exact_tail_large(k, n, a, b)
    got = _binom_tail(k, n, a / b)
    # lgamma of ~1e7 carries ~1e-9 relative error into the log; the result keeps ~1e-8
    assert got == pytest.approx(want, rel=1e-7, abs=1e-300)


def test_known_values() -> None:
    n = 10**6
    # P(X >= n) = p^n, P(X >= 1) = 1 - (1-p)^n, P(X >= n+1) = 0
    assert _binom_tail(n, n, 0.9999999) == pytest.approx(0.9999999**n, rel=1e-7)
    assert _binom_tail(1, n, 1e-7) == pytest.approx(-math.expm1(n * math.log1p(-1e-7)), rel=1e-9)
    assert _binom_tail(n + 1, n, 0.5) == 0.0
    # p = 1/2, m even: P(X >= m/2) = 1/2 + pmf(m/2)/2, pmf(m/2) = C(m, m/2) / 2^m
    m = 10**5
    pmf_mid = math.comb(m, m // 2) / 2**m
    assert _binom_tail(m // 2, m, 0.5) == pytest.approx(0.5 + pmf_mid / 2, rel=1e-9)
    # symmetry at p = 1/2: P(X >= k) + P(X >= n - k + 1) = 1
    for k in (499_000, 500_300, 501_500):
        assert _binom_tail(k, n, 0.5) + _binom_tail(n - k + 1, n, 0.5) == pytest.approx(1.0)


@pytest.mark.parametrize(("n", "p"), [(10**6, 1e-3), (10**6, 0.5), (1000, 0.37), (50, 0.02)])
def test_monotone_in_k_and_finite(n: int, p: float) -> None:
    mean = n * p
    sd = math.sqrt(n * p * (1 - p))
    lo, hi = max(0, int(mean - 12 * sd) - 2), min(n + 1, int(mean + 12 * sd) + 3)
    mode = int((n + 1) * p)
    ks = sorted({*range(lo, hi, max(1, (hi - lo) // 300)), *range(max(0, mode - 5), mode + 6)})
    vals = [_binom_tail(k, n, p) for k in ks]
    assert all(0.0 <= v <= 1.0 for v in vals)
    # crossing the mode switches between the two summed sides: still non-increasing
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(vals))
    assert vals[0] > 0.99 and vals[-1] < 1e-9


def test_edges() -> None:
    assert _binom_tail(0, 10, 0.3) == 1.0
    assert _binom_tail(-1, 10, 0.3) == 1.0
    assert _binom_tail(3, 10, 0.0) == 0.0
    assert _binom_tail(3, 10, 1.0) == 1.0
    assert _binom_tail(11, 10, 0.3) == 0.0
    assert _binom_tail(1, 0, 0.3) == 0.0
