"""The exclusive category sweep of each step's row and the order statistics of the launch figures are written for
speed (a step's points built at once, repeated values counted rather than sorted): each gives the figures of the
plain statement to the last bit."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.profile.timeline import sweep


def plain_sweep(events: list[tuple[float, float, int]], a: float, b: float, n_cats: int,
                comm: int) -> tuple[list[float], float, float]:
    """The exclusive sweep stated plainly: between each two successive distinct instants, in time order, the
    lowest category running then takes the time; communication's share is split by whether anything else runs."""
    clipped = [(max(s, a), min(e, b), c) for s, e, c in events]
    clipped = [(s, e, c) for s, e, c in clipped if e > s]
    instants = sorted({t for s, e, _ in clipped for t in (s, e)})
    out = [0.0] * n_cats
    overlapped = exposed = 0.0
    for p, t in zip(instants, instants[1:]):
        running = {c for s, e, c in clipped if s <= p and e >= t}
        if not running:
            continue
        k = min(running)
        out[k] += t - p
        if comm in running:
            if k == comm:
                exposed += t - p
            else:
                overlapped += t - p
    return out, overlapped, exposed


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_exclusive_sweep_gives_the_plain_figures_to_the_last_bit(seed):
    # events all inside the window and longer than nothing (a step's: their points are built at once), and
    # events clipped or empty (the loop that clips them)
    rng = random.Random(seed)
    events = []
    for _ in range(rng.randrange(30)):
        s = rng.choice([0.0, 10.0, 0.1 + 0.2, rng.uniform(0, 100)])
        events.append((s, s + rng.choice([0.0, 5.0, 0.3, rng.uniform(0, 40)]), rng.randrange(4)))
    for a, b in ((-1e9, 1e9), (rng.uniform(0, 40), rng.uniform(40, 200)), (min((s for s, _, _ in events), default=0.0),
                                                                          max((e for _, e, _ in events), default=0.0))):
        assert sweep(events, a, b, 4, 2) == plain_sweep(events, a, b, 4, 2)  # exactly: not approx
        positive = [ev for ev in events if ev[1] > ev[0]]
        assert sweep(positive, a, b, 4, 2) == plain_sweep(positive, a, b, 4, 2)


@settings(max_examples=300, deadline=None)
@given(pool=st.lists(st.one_of(st.floats(-1e3, 1e3), st.sampled_from([0.0, -0.0, 2, 2.0, float("nan"), 1e-7])),
                     min_size=1, max_size=12),
       n=st.integers(0, 400), seed=st.integers(0, 10**9))
def test_quantiles_of_counted_values_are_those_of_the_sorted_values(pool, n, seed):
    # the launch figures' medians and quantiles read the values in order counted where they repeat: the same
    # values as sorted() gives, of the same type and sign, and statistics.median's arithmetic
    import statistics

    from perfstack.profile.analyze import _in_order, _median, _quantile

    rng = random.Random(seed)
    xs = [rng.choice(pool) for _ in range(n)]
    got, want = _in_order(xs), sorted(xs)
    assert len(got) == len(want)
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert repr(_quantile(got, q)) == repr(_quantile(want, q))
    if xs:
        assert repr(_median(got)) == repr(statistics.median(xs))
    few = [float(rng.randrange(1, 50)) / 8 for _ in range(n)]  # few distinct floats: counted
    assert list(_in_order(few)) == sorted(few)
    if few:
        assert repr(_median(_in_order(few))) == repr(statistics.median(few))
