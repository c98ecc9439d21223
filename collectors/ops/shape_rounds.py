"""How far the rounds of ``collect ops --from-traces`` agree: whether another round could move the prices.

Each round measures the traced op shapes again in a fresh process, and a shape is priced by the median over the
rounds (:mod:`simulator.measured_shapes`). Between processes the medians of one shape move (on the 32 MiB-LLC AMD
host ~20% cold, 6-8% in the training-loop state), so several rounds are taken; where the rounds already agree, more
of them only cost time. :func:`round_spread` is the median over shapes of each shape's range of round medians
(``(max - min) / median``); the quickstart stops adding rounds once it is within :data:`ROUND_TOLERANCE`.
"""
from __future__ import annotations

from pmdb.store import Store

# a median of 3 rounds lying within 10% of each other moves by well under 5% with more rounds: inside the 5-10%
# the predictions are judged at
ROUND_TOLERANCE = 0.10
MIN_ROUNDS = 3

_SPREAD = """
WITH rounds AS (
    SELECT m.platform, m.config_key, m.pass, m.cache_state, m.run_id, median(m.median_us) AS us
    FROM op_measurements m JOIN collection_runs r USING (run_id)
    WHERE r.kind = 'ops' AND r.status = 'completed' AND CAST(r.args->>'$.from_traces' AS BOOLEAN)
      AND m.skipped IS NULL AND m.median_us > 0 AND m.source = 'microbenchmark'
    GROUP BY ALL
), shapes AS (
    SELECT config_key, pass, cache_state, count(*) AS rounds, (max(us) - min(us)) / median(us) AS spread
    FROM rounds GROUP BY config_key, pass, cache_state
)
SELECT min(rounds) AS rounds, median(spread) AS spread, count(*) AS shapes FROM shapes
"""


def round_spread(store: Store) -> tuple[int, float | None, int]:
    """(fewest rounds any traced shape has, median over shapes of their range of round medians, shapes)."""
    rounds, spread, shapes = store.conn.execute(_SPREAD).fetchone()   # an aggregate: always one row
    if not shapes:
        return 0, None, 0
    return int(rounds), (None if spread is None else float(spread)), int(shapes)


def rounds_settled(store: Store, tolerance: float = ROUND_TOLERANCE, min_rounds: int = MIN_ROUNDS) -> str | None:
    """Why no further round is needed ('212 traced shapes measured in at least 3 rounds agree within 6.1% (median
    over shapes)'), or None."""
    rounds, spread, shapes = round_spread(store)
    if rounds < min_rounds or spread is None or spread > tolerance:
        return None
    return (f"{shapes} traced shapes measured in at least {rounds} rounds agree within {100 * spread:.1f}% "
            f"(median over shapes)")
