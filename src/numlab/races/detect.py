"""Static race detection from stages and barriers alone (no simulation).

Happens-before is the transitive closure of program order on each core, the
SyncAll barriers and the cross-core flags; a race is a pair of accesses to
overlapping rows of one buffer, by different cores, at least one a write,
that it does not order (RAW, WAR, WAW).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Flag, Kernel, Stage, SyncAll


@dataclass(frozen=True)
class Finding:
    """A data race found statically.

    ``kind`` in {"RAW", "WAR", "WAW"} read in list order: ``first`` is the
    access listed first (stage, "read"/"write"), ``second`` the later one.
    ``core_pairs`` counts the unordered (core, core) pairs; ``example`` is one
    ((group, core), (group, core), (row_lo, row_hi)) overlap.  ``fix`` names a
    barrier that orders every such pair (checked by re-running the detector).
    """

    kind: str
    buffer: str
    first: tuple
    second: tuple
    core_pairs: int
    example: tuple
    fix: str

    def __str__(self) -> str:
        (ga, ca), (gb, cb), (lo, hi) = self.example
        return (f"{self.kind} on {self.buffer}: {self.first[0]} ({self.first[1]}) vs "
                f"{self.second[0]} ({self.second[1]}), {self.core_pairs} unordered core pair(s), "
                f"e.g. {ga}[{ca}] and {gb}[{cb}] on rows [{lo}, {hi}); fix: {self.fix}")


def _happens_before(kernel: Kernel):
    """Nodes (stage, core) and the transitive happens-before matrix."""
    nodes = []  # (stage idx, stage name, group, core)
    stages = kernel.stages
    for i, s in enumerate(stages):
        for c in range(int(kernel.cores[s.group])):
            nodes.append((i, s.name, s.group, c))
    # barrier nodes appended after stage nodes
    nid = {(n[1], n[3]): k for k, n in enumerate(nodes)}
    nb = len(kernel.barriers)
    N = len(nodes) + nb
    edge = np.zeros((N, N), dtype=bool)
    last_on_core: dict = {}
    seen_nodes: list[int] = []
    bi = len(nodes)
    for it in kernel.items:
        if isinstance(it, Stage):
            for c in range(int(kernel.cores[it.group])):
                k = nid[(it.name, c)]
                prev = last_on_core.get((it.group, c))
                if prev is not None:
                    edge[prev, k] = True
                last_on_core[(it.group, c)] = k
                seen_nodes.append(k)
        elif isinstance(it, SyncAll):
            edge[seen_nodes, bi] = True
            # every later stage node gets an edge from the barrier (filled below)
            bi += 1
        else:
            bi += 1
    # barrier -> later nodes
    bi = len(nodes)
    order = {it.name: i for i, it in enumerate(kernel.items)}
    for it in kernel.items:
        if isinstance(it, SyncAll):
            p = order[it.name]
            later = [k for k, n in enumerate(nodes) if order[n[1]] > p]
            edge[bi, later] = True
            bi += 1
        elif isinstance(it, Flag):
            nid2 = {(n[1], n[3]): k for k, n in enumerate(nodes)}
            for j, waits in kernel.flag_pairs(it).items():
                for i in waits:
                    edge[nid2[(it.producer, i)], nid2[(it.consumer, j)]] = True
            bi += 1
    reach = edge.copy()
    for k in range(N):  # Warshall, vectorised over rows and columns
        reach |= reach[:, k:k + 1] & reach[k:k + 1, :]
    return nodes, reach[: len(nodes), : len(nodes)]


def _races_raw(kernel: Kernel):
    nodes, reach = _happens_before(kernel)
    nid = {(n[1], n[3]): k for k, n in enumerate(nodes)}
    nrows = {b: v.shape[0] for b, v in kernel.buffers.items()}
    acc = {}  # buffer -> lists
    for s in kernel.stages:
        n = int(kernel.cores[s.group])
        for is_w, lst in ((False, s.reads), (True, s.writes)):
            for a in lst:
                for c in range(n):
                    lo, hi = a.region(c, n, nrows[a.buffer])
                    if hi > lo:
                        at = is_w and a.buffer in s.atomic
                        acc.setdefault(a.buffer, []).append((nid[(s.name, c)], is_w, lo, hi, at))
    groups = {}
    for buf, lst in acc.items():
        arr = np.array(lst, dtype=np.int64)
        node, w, lo, hi, at = arr.T
        w = w.astype(bool)
        at = at.astype(bool)
        ga = np.array([nodes[k][2] for k in node])
        ca = np.array([nodes[k][3] for k in node])
        si = np.array([nodes[k][0] for k in node])
        diffcore = (ga[:, None] != ga[None, :]) | (ca[:, None] != ca[None, :])
        overlap = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
        anyw = w[:, None] | w[None, :]
        unordered = ~reach[node[:, None], node[None, :]] & ~reach[node[None, :], node[:, None]]
        # keep each unordered pair once, first = earlier-listed stage
        first = (si[:, None] < si[None, :]) | ((si[:, None] == si[None, :]) & (np.arange(len(node))[:, None] < np.arange(len(node))[None, :]))
        # two atomic adds commute as far as races go (their order only changes rounding)
        m = diffcore & overlap & anyw & unordered & first & ~(at[:, None] & at[None, :])
        for i, j in zip(*np.nonzero(m), strict=True):
            kind = "WAW" if w[i] and w[j] else ("RAW" if w[i] else "WAR")
            key = (kind, buf, nodes[node[i]][1], "write" if w[i] else "read",
                   nodes[node[j]][1], "write" if w[j] else "read")
            ex = ((ga[i], int(ca[i])), (ga[j], int(ca[j])),
                  (int(max(lo[i], lo[j])), int(min(hi[i], hi[j]))))
            g = groups.setdefault(key, [0, ex])
            g[0] += 1
    return groups


def atomic_accumulations(kernel: Kernel) -> list[tuple]:
    """Buffers whose rows receive more than one atomic add in one run:
    ``(buffer, stages, max adds per row)``.  Race-free, but the sum is formed
    in the order the adds land, so its bits depend on the schedule unless
    the additions happen to be exact."""
    nrows = {b: v.shape[0] for b, v in kernel.buffers.items()}
    count: dict = {}
    who: dict = {}
    for s in kernel.stages:
        n = int(kernel.cores[s.group])
        for a in s.writes:
            if a.buffer not in s.atomic:
                continue
            cnt = count.setdefault(a.buffer, np.zeros(nrows[a.buffer], dtype=np.int64))
            for c in range(n):
                lo, hi = a.region(c, n, nrows[a.buffer])
                cnt[lo:hi] += 1
            who.setdefault(a.buffer, []).append(s.name)
    return [(b, tuple(who[b]), int(c.max())) for b, c in count.items() if c.size and c.max() > 1]


def detect_races(kernel: Kernel, *, suggest: bool = True) -> list[Finding]:
    """Every data race of ``kernel``, from its stages and barriers alone.

    A race is a pair of accesses to overlapping rows of one buffer, by two
    different cores, at least one a write, such that neither happens before
    the other.  Happens-before is the transitive closure of: program order on
    each core; every stage before a SyncAll -> the SyncAll -> every stage after
    it (all cores); every core of a flag's producer stage -> the flag -> every
    core of its consumer stage.  Accesses of one core never race with each
    other (program order), so a pair is always cross-core.

    Returns findings grouped by (kind, buffer, stage pair), listed in kernel
    order.  With ``suggest``, each finding names a barrier that orders every
    pair of the group -- ``SyncAll before '<second stage>'`` or
    ``Flag('<first>' -> '<second>')`` -- checked by re-running the analysis on
    the kernel with that barrier added; two accesses of the same stage cannot
    be ordered by any barrier and get the advice to split the rows.
    """
    groups = _races_raw(kernel)
    out = []
    for (kind, buf, sa, ma, sb, mb), (count, ex) in groups.items():
        fix = ""
        if suggest:
            if sa == sb:
                fix = f"none: two cores of '{sa}' touch the same rows; give each core its own rows"
            else:
                cands = [(f"SyncAll after '{sa}'", SyncAll(name=f"SyncAll<{sa}>"), None, sa),
                         (f"Flag('{sa}' -> '{sb}')", Flag(sa, sb), None, None),
                         (f"SyncAll before '{sb}'", SyncAll(name=f"SyncAll<<{sb}>"), sb, None)]
                for label, item, before, after in cands:
                    k2 = kernel.with_item(item, before=before, after=after)
                    if not any(key[:2] == (kind, buf) and key[2] == sa and key[4] == sb for key in _races_raw(k2)):
                        fix = label
                        break
                if not fix:
                    fix = f"SyncAll before '{sb}' does not suffice; reorder the stages"
        out.append(Finding(kind=kind, buffer=buf, first=(sa, ma), second=(sb, mb), core_pairs=count,
                           example=ex, fix=fix))
    order = {s.name: i for i, s in enumerate(kernel.stages)}
    out.sort(key=lambda f: (order[f.second[0]], order[f.first[0]], f.buffer, f.kind))
    return out
