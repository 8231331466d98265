"""Test-only reference for the fusion tests: a block's live buffers by brute force
(numlab.fusion.live_buffers is checked against it).  Nothing here imports numlab."""

from __future__ import annotations


def live_bruteforce(g, members, outputs) -> int:
    """Intervals: a value is live from the step it is produced (inputs: from 0)
    to its last use inside the block (outputs: to the end); count at each step
    the intervals that contain it, plus one for the value being computed when
    it is not already counted."""
    pos = {m: i for i, m in enumerate(members)}
    end = len(members) - 1
    intervals = {}
    for i, m in enumerate(members):
        for v in g.node(m).inputs:
            start = pos[v] + 1 if v in pos else 0
            lo, hi = intervals.get(v, (start, -1))
            intervals[v] = (lo, max(hi, i))
    for v in outputs:
        lo, hi = intervals.get(v, (pos[v] + 1, -1))
        intervals[v] = (lo, end)
    best = 0
    for i in range(len(members)):
        best = max(best, 1 + sum(lo <= i <= hi for lo, hi in intervals.values()))
    return best
