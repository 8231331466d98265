"""Node matching of two dumps: fused blocks matched at their last member,
decomposed composites, missing nodes, and where an error is introduced
(``error_origin``, the first divergence).  Row metrics come from
:func:`numlab.compare.stream.compare_arrays`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..formats import Format, get_format
from .columns import COLUMNS, Thresholds
from .dump import Dump, DumpEntry, DumpError, describe_graph, format_name, natural_key
from .flavors import check_flavor, flavor_cells
from .layouts import load_any
from .stream import DEFAULT_CHUNK, compare_arrays
from .table import CompareReport, _to_float

__all__ = ["compare_dumps", "as_dump"]


# --------------------------------------------------------------------------
# in-memory dumps
# --------------------------------------------------------------------------
class _MemoryDump(Dump):
    """A dump held in memory (a RunResult or a dict of arrays)."""

    def __init__(self, label: str, arrays: Mapping[str, np.ndarray], manifest: dict | None):
        entries = {k: DumpEntry(k, None, dict((manifest or {}).get("nodes", {}).get(k, {})))
                   for k in arrays}
        super().__init__(Path(label), manifest, entries)
        self._arrays = dict(arrays)

    def array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        if name not in self._arrays:
            raise KeyError(f"node {name!r} is not in {self.path}")
        return np.asarray(self._arrays[name])


def as_dump(obj, label: str = "<memory>") -> Dump:
    """A :class:`Dump` from a path (loaded with ``strict=False``, so bad files
    become rows), a Dump, a RunResult-like object (``.values``) or a mapping
    name -> array."""
    if isinstance(obj, Dump):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return load_any(obj, strict=False)
    values = getattr(obj, "values", None)
    if isinstance(values, Mapping):
        node_meta, run_meta = describe_graph(getattr(obj, "graph", None), getattr(obj, "plan", None))
        fmt = format_name(getattr(obj, "fmt", None))
        mode = getattr(obj, "mode", None)
        nodes = {k: v for k, v in node_meta.items() if k in values}
        graph = {k: v for k, v in node_meta.items() if k not in values}
        manifest = dict(run_meta, mode=mode, dtype=fmt, nodes=nodes, graph=graph)
        return _MemoryDump(f"<{mode or 'run'} {label}>" if mode else label, values, manifest)
    if isinstance(obj, Mapping):
        return _MemoryDump(label, obj, None)
    raise TypeError(
        f"cannot compare {type(obj).__name__}; pass a dump path, a Dump, a RunResult or a dict of arrays"
    )


def _block_maps(*dumps: Dump) -> tuple[dict[str, dict], dict[str, str]]:
    blocks: dict[str, dict] = {}
    member_of: dict[str, str] = {}
    for d in dumps:
        for bname, b in d.blocks.items():
            members = list(b.get("members") or []) if isinstance(b, Mapping) else []
            if len(members) < 2 or bname in blocks:  # only fused blocks; mine's win
                continue
            blocks[bname] = {"members": members, "kind": b.get("kind"),
                             "outputs": list(b.get("outputs") or members[-1:])}
            for mem in members:
                member_of.setdefault(mem, bname)
    return blocks, member_of


def compare_dumps(
    golden,
    mine,
    *,
    fmt: Format | str | None = None,
    thresholds: Thresholds | None = None,
    chunk_elems: int = DEFAULT_CHUNK,
    verify: bool = True,
    flavor: str = "exact",
) -> CompareReport:
    """Compare two dumps node by node (msit ``llm compare -gp GOLDEN -mp MINE``).

    Parameters
    ----------
    golden, mine : path, Dump, RunResult or mapping
        Dumps of any layout (numlab, msprobe, msit; :func:`load_any`), single
        ``.npy`` files, loaded dumps, run results or dicts name -> array.
    fmt : Format or str, optional
        Storage format for the ULP columns (default: mine's manifest dtype,
        else each array's own format).
    thresholds : Thresholds, optional
        Failure rule for ``Accuracy Reached or Not`` and the first divergence.
    chunk_elems : int
        Elements per streaming chunk.  ``verify``: check SHA-256 (bad files
        become rows).
    flavor : str
        ``"exact"`` or a tool (:data:`numlab.compare.flavors.FLAVORS`) whose
        cells the CSV gets too; pass/fail stays numlab's exact rule.

    Returns
    -------
    CompareReport
        ``rows`` in topological order (when a manifest gives it), with
        ``error_origin`` and ``first_divergence`` set.  Never raises for bad
        data; problems are rows with a ``cmp_fail_reason``.
    """
    th, fmt = _checked_args(thresholds, chunk_elems, flavor, fmt)
    gd, md = (load_any(x, verify=verify, strict=False) if isinstance(x, (str, os.PathLike))
              else as_dump(x, label) for x, label in ((golden, "golden"), (mine, "mine")))
    if _single_file(gd) and _single_file(md) and gd.names != md.names:
        # two single .npy files (msit -gp/-mp FILE): compared with each other
        # whatever their names, under mine's name
        (gname,), (mname,) = gd.names, md.names
        gd.entries = {mname: DumpEntry(mname, gd.entries[gname].path, {})}
    if fmt is None:
        fmt = md.storage_format
    blocks, member_of = _block_maps(md, gd)
    decomposed: dict[str, str] = {}
    for d in (gd, md):
        dec = (d.manifest or {}).get("decomposed") or {}
        if isinstance(dec, Mapping):
            decomposed.update({str(k): str(v) for k, v in dec.items()})

    lists = [d.order for d in (md, gd) if d.manifest and d.manifest.get("order")]
    graph_nodes = {k for lst in lists for k in lst}

    def keyed(d: Dump) -> dict[str, str]:
        # a dump named after a fused block (not after a graph node of the same
        # name, e.g. a node "b1" next to block "b1") stands for its last member
        out = {}
        for name in d.entries:
            key = blocks[name]["members"][-1] if name in blocks and name not in graph_nodes else name
            out.setdefault(key, name)
        return out

    gk, mk = keyed(gd), keyed(md)
    order = _merge_orders(lists)
    seen = set(order)
    order.extend(sorted((set(gk) | set(mk)) - seen, key=natural_key))

    def info(name: str) -> dict:
        i = gd.node_info(name) or md.node_info(name)
        return i

    rows: list[dict] = []
    notes = [*gd.notes, *md.notes]
    for side, d in (("golden", gd), ("my", md)):
        if len(d) == 0:
            rows.append(_blank_row(
                node="", match=f"empty_{side}",
                cmp_fail_reason=f"{side} path {str(d.path)!r} contains no dumped arrays (.npy files).",
                **{f"{side}_path": str(d.path)},
            ))
    sides = _Sides(gd, md, blocks, member_of, decomposed, fmt, th, chunk_elems)
    sides.flavor = flavor
    for key in order:
        row = sides.row(key, gk.get(key), mk.get(key), info(key))
        if row is not None:
            rows.append(row)
    for i, r in enumerate(rows):
        r["index"] = i
    report = CompareReport(rows, str(gd.path), str(md.path), th, notes, flavor=flavor)
    _collect_problems(report, gd, md)
    _mark_origins(report, gd, md, blocks, member_of, set(decomposed.values()))
    return report


def _checked_args(thresholds, chunk_elems, flavor, fmt):
    """(thresholds, format) of compare_dumps' arguments, or the error naming
    the bad one (a bad format fails here, not as one failed row per node)."""
    th = thresholds or Thresholds()
    if not isinstance(th, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds or None, got {type(th).__name__}")
    if isinstance(chunk_elems, bool) or not isinstance(chunk_elems, (int, np.integer)) or chunk_elems < 1:
        raise ValueError(f"chunk_elems={chunk_elems!r} is not valid; it must be an int >= 1")
    check_flavor(flavor)
    return th, (get_format(fmt) if fmt is not None else None)


def _collect_problems(report: CompareReport, gd: Dump, md: Dump) -> None:
    """``report.problems``: every missing/corrupt file of both dumps, and an
    unreadable manifest (the folder was then read without it)."""
    report.problems = {f"{side}:{n}": r for side, d in (("golden", gd), ("my", md))
                       for n, r in d.problems.items()}
    for side, d in (("golden", gd), ("my", md)):
        for note in d.notes:
            report.problems[f"{side}:manifest.json"] = note


class _Sides:
    """The two dumps with their block and decomposition maps: builds the row
    of one node key (:meth:`row`)."""

    def __init__(self, gd: Dump, md: Dump, blocks: dict, member_of: dict, decomposed: dict,
                 fmt, th: Thresholds, chunk: int):
        self.gd, self.md, self.blocks, self.member_of = gd, md, blocks, member_of
        self.decomposed, self.fmt, self.th, self.chunk = decomposed, fmt, th, chunk

    def row(self, key: str, gname: str | None, mname: str | None, meta: dict) -> dict | None:
        """The row of node ``key`` (golden file ``gname``, mine ``mname``,
        either may be None); None for a node with no data and nothing to say."""
        block = self.member_of.get(key, "")
        base = {
            "node": key, "op": meta.get("op", ""), "category": meta.get("category") or "",
            "block": block or "",
        }
        if gname is None and mname is None:
            if key in self.decomposed and self.decomposed[key] != key and gname is None:
                comp = self.decomposed[key]
                return (_blank_row(
                    **base, match="decomposed",
                    cmp_fail_reason=f"internal node of composite {comp} (decomposed by the fused "
                                    f"compiler); fused into block {block or '-'}; compared at {comp}.",
                ))
            elif block and key not in _block_outputs(self.blocks, block):
                outs = ", ".join(_block_outputs(self.blocks, block))
                return (_blank_row(
                    **base, match="inside_block",
                    cmp_fail_reason=f"fused into block {block}; no dump of its own, the block output "
                                    f"is compared at node {outs}.",
                ))
            return None
        if gname is not None and mname is not None:
            row = _compare_pair(self.gd, gname, self.md, mname, self.fmt, self.th, self.chunk,
                                getattr(self, "flavor", "exact"))
            row.update(base, match="matched")
            if mname != key:
                row["cmp_fail_reason"] = (f"my {mname} (block output) matched to its last member {key}. "
                                          + row.get("cmp_fail_reason", "")).strip()
        elif gname is not None:
            b_mine = self.member_of.get(key)
            if b_mine and key not in _block_outputs(self.blocks, b_mine):
                outs = ", ".join(_block_outputs(self.blocks, b_mine))
                row = _blank_row(**base, match="inside_block",
                                 cmp_fail_reason=f"fused into block {b_mine}; no dump of its own in my "
                                                 f"data, the block output is compared at node {outs}.")
            else:
                row = _blank_row(**base, match="missing_mine",
                                 cmp_fail_reason="No my data matched (node missing from my dump).")
            row["golden_path"] = _path_of(self.gd, gname)
            _add_problem(row, self.gd, gname, "golden")
        elif key in self.decomposed and self.decomposed[key] != key:
            comp = self.decomposed[key]
            row = _blank_row(**base, match="decomposed",
                             cmp_fail_reason=f"internal node of composite {comp} (decomposed by the "
                                             f"fused compiler, not run by the golden side); compared "
                                             f"at {comp}.")
            row["my_path"] = _path_of(self.md, mname)
        else:
            row = _blank_row(**base, match="missing_golden",
                             cmp_fail_reason="No bench data matched (node missing from golden dump).")
            row["my_path"] = _path_of(self.md, mname)
            _add_problem(row, self.md, mname, "my")
        return row


def _single_file(d: Dump) -> bool:
    return d.manifest is None and d.path.is_file() and len(d.entries) == 1


def _merge_orders(lists: list[list[str]]) -> list[str]:
    """Merge topological orders: the longest first, then every name missing
    from it inserted right after its predecessor in its own list."""
    if not lists:
        return []
    lists = sorted(lists, key=len, reverse=True)
    out = list(dict.fromkeys(lists[0]))
    pos = {k: i for i, k in enumerate(out)}
    for lst in lists[1:]:
        prev = None
        for k in lst:
            if k not in pos:
                at = 0 if prev is None else out.index(prev) + 1
                out.insert(at, k)
                pos = {kk: i for i, kk in enumerate(out)}
            prev = k
    return out


def _block_outputs(blocks: dict, bname: str) -> list[str]:
    b = blocks[bname]
    return list(b.get("outputs") or b["members"][-1:])


def _path_of(d: Dump, name: str) -> str:
    p = d.entries[name].path
    return str(p) if p is not None else f"{d.path}:{name}"


def _add_problem(row: dict, d: Dump, name: str, side: str) -> None:
    prob = d.entries[name].problem
    if prob:
        row["cmp_fail_reason"] = (row["cmp_fail_reason"] + f" {side} data: {prob}").strip()


def _blank_row(**kw) -> dict:
    row = dict.fromkeys(COLUMNS, "")
    row.update(kw)
    return row


def _compare_pair(gd: Dump, gname: str, md: Dump, mname: str, fmt, th, chunk, flavor="exact") -> dict:
    row = _blank_row(golden_path=_path_of(gd, gname), my_path=_path_of(md, mname))
    arrays = {}
    reasons = []
    for side, d, name in (("golden", gd, gname), ("my", md, mname)):
        try:
            arrays[side] = d.array(name)
        except DumpError as exc:
            reasons.append(f"{side} data: {exc.problems.get(name, str(exc))}")
        except Exception as exc:  # anything else a damaged file can raise
            reasons.append(f"{side} data unreadable: {type(exc).__name__}: {exc}")
    if reasons:
        for side in ("golden", "my"):
            if side in arrays:
                row[f"{side}_dtype"] = format_name(arrays[side].dtype)
                row[f"{side}_shape"] = list(arrays[side].shape)
        row["cmp_fail_reason"] = " ".join(reasons)
        return row
    row_fmt = fmt
    if row_fmt is None:
        fmt_name = md.entries[mname].meta.get("dtype")
        try:
            row_fmt = get_format(fmt_name) if fmt_name else None
        except (TypeError, ValueError):
            row_fmt = None
    try:
        row.update(compare_arrays(arrays["golden"], arrays["my"], fmt=row_fmt, thresholds=th,
                                  chunk_elems=chunk))
    except Exception as exc:  # e.g. an I/O error while reading a truncated memory map
        row["cmp_fail_reason"] = f"compare failed: {type(exc).__name__}: {exc}"
    if flavor != "exact":
        row["_flavor"] = flavor_cells(arrays["golden"], arrays["my"], flavor)
    return row


def _mark_origins(report: CompareReport, gd: Dump, md: Dump, blocks, member_of,
                  composites: set | frozenset = frozenset()) -> None:
    """Fill ``error_origin`` / ``inputs`` and ``report.first_divergence``."""
    th = report.thresholds
    by_node = {r["node"]: r for r in report.rows if r["node"]}

    def node_inputs(name: str) -> list[str]:
        i = gd.node_info(name) or md.node_info(name)
        return list(i.get("inputs") or [])

    def direct_inputs(key: str) -> list[str]:
        if key in composites:
            # a composite the fused side decomposed: its own inputs, as the
            # side that ran it whole records them
            for d in (gd, md):
                ins = d.node_info(key).get("inputs")
                if ins and not any(composites_of(i) == key for i in ins):
                    return list(ins)
        r = by_node.get(key)
        b = r.get("block") if r else None
        if b and b in blocks and key in blocks[b]["members"]:
            # a fused block output: the block's external inputs read by the
            # members up to this one
            mem_list = blocks[b]["members"]
            upto = mem_list[: mem_list.index(key) + 1]
            members = set(mem_list)
            out = []
            for mem in upto:
                for i in node_inputs(mem):
                    if i not in members and i not in out:
                        out.append(i)
            return out
        return node_inputs(key)

    dec_map = _decomposed_map(gd, md)

    def composites_of(name: str) -> str | None:
        return dec_map.get(name) if dec_map.get(name) != name else None

    memo: dict[str, list[str]] = {}

    def effective(name: str, depth: int = 0) -> list[str]:
        """Nearest ancestors (or itself) that have a compared row."""
        if name in memo:
            return memo[name]
        r = by_node.get(name)
        if r is not None and th.fails(r) is not None:
            memo[name] = [name]
            return memo[name]
        memo[name] = []  # cycle guard
        if depth > 10000:  # pragma: no cover
            return []
        out: list[str] = []
        for i in node_inputs(name):
            for e in effective(i, depth + 1):
                if e not in out:
                    out.append(e)
        memo[name] = out
        return out

    if not _has_graph(gd, md):
        _mark_first_failing(report)
        return

    first = None
    for r in report.rows:
        key = r["node"]
        if not key:
            continue
        ins = direct_inputs(key)
        r["inputs"] = " ".join(ins)
        f = th.fails(r)
        if not f:
            continue
        eff: list[str] = []
        for i in ins:
            for e in effective(i):
                if e not in eff:
                    eff.append(e)
        if any(th.fails(by_node[e]) for e in eff):
            r["error_origin"] = "carried"
        else:
            _mark_introduced(r, ins, eff, by_node, th)
            if first is None:
                first = r
    report.first_divergence = first


def _decomposed_map(gd: Dump, md: Dump) -> dict[str, str]:
    """Decomposed node -> the composite it came from, from both manifests."""
    dec_map: dict[str, str] = {}
    for d in (gd, md):
        dm = (d.manifest or {}).get("decomposed") or {}
        if isinstance(dm, Mapping):
            dec_map.update({str(k): str(v) for k, v in dm.items()})
    return dec_map


def _has_graph(gd: Dump, md: Dump) -> bool:
    """Whether either dump records graph edges (a manifest order or node inputs)."""
    return any(
        (d.manifest or {}).get("order") or any((d.node_info(n) or {}).get("inputs") for n in d.entries)
        for d in (gd, md)
    )


def _mark_first_failing(report: CompareReport) -> None:
    """Plain folders: no edges, so introduced-vs-carried cannot be told
    apart; the first failing row in name order is the first divergence."""
    first = next((r for r in report.rows if r["node"] and report.thresholds.fails(r)), None)
    if first is not None:
        first["error_origin"] = "first_failing"
        report.notes.append(
            "no graph information (no manifest with node inputs): the first failing node in "
            "name order is reported; whether its error is introduced or carried needs a manifest."
        )
    report.first_divergence = first


def _mark_introduced(r: dict, ins: list[str], eff: list[str], by_node: dict, th: Thresholds) -> None:
    """Mark row ``r`` (failing, every effective input ``eff`` passing) as
    where its error is introduced, with the caveats: an input that could not
    be compared, or passing inputs that are not bit-identical (the node may
    only amplify their error)."""
    r["error_origin"] = "introduced"
    unknown = [i for i in ins if by_node.get(i, {}).get("match") == "matched"
               and th.fails(by_node[i]) is None]
    if unknown:  # an input that could not be compared may be where it started
        r["cmp_fail_reason"] = (r["cmp_fail_reason"] + f" Input(s) {', '.join(unknown)} could "
                                "not be compared: the error may be introduced there.").strip()
    differ = [(_to_float(by_node[e].get("bitwise_equal_ratio")), e) for e in eff
              if _to_float(by_node[e].get("bitwise_equal_ratio")) < 1.0]
    if differ:  # passing inputs that still differ: the node may only amplify their error
        share, worst = min(differ)
        r["cmp_fail_reason"] = (
            r["cmp_fail_reason"] + f" Its inputs pass but are not bit-identical (bitwise-equal "
            f"share {share:.3g} at {worst}): the error may be theirs, amplified here; running the "
            "node on golden inputs (numlab bisect, stage 'ranges') tells."
        ).strip()
