"""Shared helpers for distribution tests: fixed significance level 1e-6 (kept apart from the
exact known-answer tests, which need no statistics)."""

from __future__ import annotations

from collections import Counter

from scipy.stats import chisquare

ALPHA = 1e-6


def chi_square_pvalue(outputs, labels, probabilities) -> float:
    """p-value of observed outputs against exact probabilities, pooling cells expected < 5."""
    n = len(outputs)
    counts = Counter(outputs)
    observed, expected = [], []
    pooled_obs = pooled_exp = 0.0
    for label, p in zip(labels, probabilities):
        e = float(p) * n
        if e < 5:
            pooled_obs += counts.get(label, 0)
            pooled_exp += e
        else:
            observed.append(counts.get(label, 0))
            expected.append(e)
    if pooled_exp > 0:
        observed.append(pooled_obs)
        expected.append(pooled_exp)
    scale = sum(observed) / sum(expected)
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)
