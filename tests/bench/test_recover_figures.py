"""bench/remediation_recover.py's figures over the draws: quantiles by rank, where a draw not
recovered within its fault ranks above every time (it is never counted as the fault's length,
which would let "p90 ≤ the fault's length" pass whatever happened)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import remediation_recover as rr  # a script's module: bench/ on the path, as when it runs

times = st.lists(st.one_of(st.none(), st.floats(0.0, 90.0)), min_size=1, max_size=40)


def test_a_draw_not_recovered_is_above_every_time() -> None:
    eight = [10.2, 10.4, 18.4, 18.6, 23.9, 25.2, 32.4, None]
    assert rr.rank_quantile(eight, 0.5) == (18.6 + 23.9) / 2
    assert rr.rank_quantile(eight, 0.9) is None  # the eighth of eight: the one not recovered
    assert rr.rank_quantile([*eight[:7], 40.0, 50.0, 60.0], 0.9) == 50.0
    assert rr.rank_quantile([None, 1.0], 0.5) is None
    assert rr.rank_quantile([5.0], 0.9) == 5.0


@given(times, st.sampled_from([0.5, 0.9]))
def test_a_quantile_is_one_of_the_draws_or_between_the_middle_two(values, q) -> None:
    got = rr.rank_quantile(values, q)
    done = sorted(v for v in values if v is not None)
    missed = len(values) - len(done)
    # At least a share q of the draws at or below it: None exactly when that needs a missed one.
    need = math.ceil(q * len(values))
    if got is None:
        assert missed > 0 and len(done) < need + (1 if q == 0.5 and len(values) % 2 == 0 else 0)
    else:
        assert done[0] <= got <= done[-1]
        assert sum(1 for v in done if v <= got) >= min(need, len(done))
