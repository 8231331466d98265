"""The block graph the fusion planner keeps acyclic (rule 2 of
:mod:`numlab.fusion`): the quotient graph of a node-to-block assignment, and
:class:`_BlockGraph`, which maintains it incrementally as nodes join blocks
and blocks merge (a dynamic topological order, Pearce and Kelly 2006, with a
two-way search bounded to the blocks between a move's two ends).
"""

from __future__ import annotations


def _quotient_graph(nodes, assign: dict) -> tuple[dict, dict]:
    """The quotient graph of ``assign`` (node -> block id) over ``nodes``:
    (block -> set of successor blocks, block -> in-degree)."""
    succ: dict = {b: set() for b in assign.values()}
    indeg: dict = dict.fromkeys(succ, 0)
    for n in nodes:
        bn = assign[n.name]
        for p in n.inputs:
            bp = assign.get(p)
            if bp is not None and bp != bn and bn not in succ[bp]:
                succ[bp].add(bn)
                indeg[bn] += 1
    return succ, indeg


class _BlockGraph:
    """The block graph of the nodes assigned so far, kept acyclic as nodes join
    blocks and blocks merge (module docstring, rule 2).

    Blocks are union-find sets of block ids (:meth:`find` gives a block's
    current id); ``succ``/``pred`` hold the edges between current ids and
    ``pos`` a topological order of them, maintained as Pearce and Kelly's
    dynamic topological order is.  A move is checked only on the blocks whose
    position lies between the two blocks a new edge (or a merge) would
    connect, by a search forward from one end and one backward from the
    other advanced an edge at a time in turn (:meth:`_path`); a move whose
    new edges agree with the order needs no search at all.  The answer is
    exactly whether the block graph after the move is acyclic.  ``steps``
    counts the edges the searches examine."""

    def __init__(self):
        self.parent: dict = {}
        self.succ: dict = {}
        self.pred: dict = {}
        self.pos: dict = {}
        self.steps = 0
        self._next = 0

    def find(self, b):
        """The current id of the block that holds block id ``b``."""
        root = b
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[b] != root:
            self.parent[b], b = root, self.parent[b]
        return root

    def new_block(self, b, producers) -> None:
        """Add block ``b`` (one node, reading the blocks ``producers``), last in the order."""
        self.parent[b] = b
        self.succ[b], self.pred[b] = set(), set()
        self.pos[b] = self._next
        self._next += 1
        self._link(producers, b)

    def _link(self, producers, b) -> None:
        for q in producers:
            self.succ[q].add(b)
            self.pred[b].add(q)

    def _path(self, sources: set, targets: set, lo: int, hi: int) -> bool:
        """Whether a path leads from a block of ``sources`` to a block of
        ``targets`` through blocks whose positions lie in ``[lo, hi]`` (blocks
        outside are ignored, ends included).  The search forward from the
        sources and the one backward from the targets take one edge each in
        turn, so the cost is at most twice that of the cheaper one."""
        ends = (targets, sources)  # what each side is looking for
        edges = (self.succ, self.pred)
        seen: tuple = (set(), set())
        stacks = ([iter(sources)], [iter(targets)])
        side = 0
        while stacks[0] and stacks[1]:
            self.steps += 1
            stack = stacks[side]
            x = next(stack[-1], None)
            if x is None:
                stack.pop()
            elif x not in seen[side] and lo <= self.pos[x] <= hi:
                if x in ends[side] or x in seen[1 - side]:
                    return True
                seen[side].add(x)
                stack.append(iter(edges[side][x]))
            side = 1 - side
        return False

    def _reach(self, starts, edges: dict, lo: int, hi: int) -> set:
        """The blocks reachable from ``starts`` (included) along ``edges``
        (``succ`` or ``pred``) through blocks whose position is in ``[lo, hi]``."""
        seen: set = set()
        stack = list(starts)
        while stack:
            b = stack.pop()
            if b in seen or not lo <= self.pos[b] <= hi:
                continue
            seen.add(b)
            self.steps += len(edges[b])
            stack.extend(edges[b])
        return seen

    def _place(self, blocks: list, slots: list) -> None:
        """Give ``blocks`` (in this order) the first positions of ``slots`` (sorted;
        a merge passes one slot more than blocks: the merged pair held two)."""
        for b, s in zip(blocks, slots, strict=False):
            self.pos[b] = s

    def _by_pos(self, blocks) -> list:
        return sorted(blocks, key=self.pos.__getitem__)

    def join(self, b, producers) -> bool:
        """Whether a new node reading the blocks ``producers`` (``b`` not among
        them) may join block ``b`` with the block graph staying acyclic: no
        producer block is reachable from ``b``.  If so the node's edges are
        added; else nothing changes.

        Only the producers placed after ``b`` can be reachable from it.  When
        the node joins, the blocks between that reach them (``before``) are
        moved ahead of those that ``b`` reaches (``after``, ``b`` included),
        in the positions the two sets held."""
        late = {q for q in producers if self.pos[q] > self.pos[b]}
        if late:
            lo, hi = self.pos[b], max(self.pos[q] for q in late)
            if self._path({b}, late, lo, hi):
                return False
            after = self._reach([b], self.succ, lo, hi)
            before = self._reach(late, self.pred, lo, hi)
            blocks = self._by_pos(before) + self._by_pos(after)
            self._place(blocks, sorted(self.pos[x] for x in blocks))
        self._link(producers, b)
        return True

    def merge(self, t, c):
        """Merge blocks ``t`` and ``c`` when no path of two or more edges joins
        them (the merged block graph is then acyclic); returns the merged
        block's id, or None (nothing changes).

        With ``lo`` placed before ``hi``, such a path runs from a successor
        of ``lo`` to a predecessor of ``hi`` through the blocks placed between
        them.  The merged block takes a position after the blocks between
        that reach ``hi`` and before those that ``lo`` reaches."""
        lo, hi = self._by_pos((t, c))
        a, z = self.pos[lo], self.pos[hi]
        if self._path(self.succ[lo], self.pred[hi], a + 1, z - 1):
            return None
        after = self._reach(self.succ[lo], self.succ, a + 1, z - 1)
        before = self._reach(self.pred[hi], self.pred, a + 1, z - 1)
        slots = sorted([a, z] + [self.pos[x] for x in before | after])
        root = self._union(lo, hi)
        self._place(self._by_pos(before) + [root] + self._by_pos(after), slots)
        return root

    def _union(self, a, b):
        """Contract blocks ``a`` and ``b`` (the smaller edge sets move)."""
        if len(self.succ[a]) + len(self.pred[a]) < len(self.succ[b]) + len(self.pred[b]):
            a, b = b, a
        self.parent[b] = a
        for s in self.succ.pop(b):
            self.pred[s].discard(b)
            if s != a:
                self.pred[s].add(a)
                self.succ[a].add(s)
        for p in self.pred.pop(b):
            self.succ[p].discard(b)
            if p != a:
                self.succ[p].add(a)
                self.pred[a].add(p)
        del self.pos[b]
        return a
