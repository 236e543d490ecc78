"""The engine's own sampler (numpy), and the log-probability it reports for a token.

Temperature 0 is argmax; otherwise a softmax of ``logits / temperature``, restricted to the top-p
nucleus (tokens ranked by logit, ties by id), then one uniform draw from the request's ``numpy``
generator.  Reported log-probabilities are those of the model's *raw* distribution (before
temperature and top-p).
"""

from __future__ import annotations

import numpy as np

__all__ = ["log_softmax_at", "sample", "top_log_probs"]


def log_softmax_at(logits: np.ndarray, token: int) -> float:
    x = logits.astype(np.float64)
    m = float(x.max())
    return float(x[token] - m - np.log(np.exp(x - m).sum()))


def top_log_probs(logits: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` most likely tokens under the raw distribution, ``(id, log-prob)``, most likely first
    (ties: lower id first)."""
    x = logits.astype(np.float64)
    m = float(x.max())
    lse = float(np.log(np.exp(x - m).sum()))  # as log_softmax_at computes it: the same numbers
    k = min(k, x.size)
    ids = np.argpartition(-x, k - 1)[:k]
    ids = ids[np.lexsort((ids, -x[ids]))]
    return [(int(i), float(x[i] - m - lse)) for i in ids]


_NUCLEUS_CANDIDATES = 256


def sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token: argmax at temperature 0, else temperature + top-p (nucleus) sampling.

    Tokens are ranked by logit (ties: lower id first); the nucleus is the
    shortest prefix of that ranking whose probability mass reaches ``top_p``;
    one ``rng.random()`` draw picks a token by inverse CDF.  The nucleus is
    searched among the top ``_NUCLEUS_CANDIDATES`` logits first (a full sort
    costs ~6 ms on these CPUs) with a full sort as exact fallback.
    """
    if temperature <= 0.0:
        return int(np.argmax(logits))
    x = logits.astype(np.float64)
    x /= temperature
    probs = np.exp(x - x.max())
    total = float(probs.sum())
    if top_p >= 1.0:
        cdf = np.cumsum(probs)
        idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return min(idx, cdf.size - 1)

    def ranked(ids: np.ndarray) -> np.ndarray:
        return ids[np.lexsort((ids, -x[ids]))]

    order: np.ndarray | None = None
    k = min(_NUCLEUS_CANDIDATES, x.size)
    if k < x.size:
        cand = ranked(np.argpartition(-x, k - 1)[:k])
        cum = np.cumsum(probs[cand]) / total
        keep = int(np.searchsorted(cum, top_p)) + 1
        # Exact only if the nucleus ends strictly above the k-th logit.
        if keep < k and x[cand[keep - 1]] > x[cand[-1]]:
            order = cand
    if order is None:
        order = ranked(np.arange(x.size))
        cum = np.cumsum(probs[order]) / total
        keep = min(int(np.searchsorted(cum, top_p)) + 1, order.size)
    cdf = cum[:keep]
    idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return int(order[min(idx, keep - 1)])
