"""The compare report: rows, summary, fixed-width table and CSV output."""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import os
import platform
import time
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import __version__
from .. import _json as strict_json
from .._repr import Compact, facts_html
from .columns import COLUMNS, Thresholds
from .dump import atomic_write_bytes
from .flavors import FLAVOR_HEADERS, FLAVOR_NOTES, check_flavor, flavor_rows

__all__ = ["CompareReport", "report_path", "sidecar_path", "format_number"]


def sidecar_path(path: str | os.PathLike) -> Path:
    """The JSON file that describes the CSV ``path``: the same name with
    ``.json`` for ``.csv`` (``report.csv`` -> ``report.json``), as every CSV
    numlab writes (docs/files.md)."""
    return Path(path).with_suffix(".json")


def report_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """The CSV file a report goes to: ``path`` itself when it ends in ``.csv``,
    else ``path/numlab_cmp_report_<UTC timestamp>.csv`` (as msit's ``-o``);
    parent directories are created.  Its JSON sidecar
    (:func:`sidecar_path`) goes next to it.

    Raises
    ------
    FileExistsError
        The file or its sidecar exists and ``force`` is False (checked before
        any compare runs when the CLI calls this first).
    """
    p = Path(path)
    if p.suffix.lower() != ".csv":
        if p.exists() and not p.is_dir():
            raise FileExistsError(f"output {str(p)!r} exists and is not a directory; give a .csv file "
                                  "or a directory for numlab_cmp_report_<time>.csv")
        p.mkdir(parents=True, exist_ok=True)
        p = p / f"numlab_cmp_report_{time.strftime('%Y%m%d%H%M%S', time.gmtime())}.csv"
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    for f in (p, sidecar_path(p)):
        if f.exists() and not force:
            raise FileExistsError(f"report {str(f)!r} already exists; pass force=True (CLI: --force) "
                                  "to overwrite it, or give another -o/--out")
    return p


#: rows shown in a notebook (``CompareReport._repr_html_``)
HTML_ROWS = 12


class CompareReport(Compact):
    """The result of :func:`compare_dumps`: rows (dicts keyed by
    :data:`COLUMNS`) in topological order, and the first divergence."""

    def __init__(self, rows: list[dict], golden: str, mine: str, thresholds: Thresholds,
                 notes: list[str] | None = None, flavor: str = "exact"):
        self.rows = rows
        self.golden = golden
        self.mine = mine
        self.thresholds = thresholds
        self.notes = list(notes or [])
        #: ``"exact"`` or the tool whose columns the CSV has (numlab.compare.flavors)
        self.flavor = check_flavor(flavor)
        self.first_divergence: dict | None = None
        #: ``"golden:node"``/``"my:node"`` -> why that dumped file cannot be
        #: used (missing, truncated, failed its SHA-256 check, unreadable);
        #: filled by :func:`compare_dumps` from both dumps
        self.problems: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def row(self, node: str) -> dict:
        """The row of ``node``; KeyError lists the nodes."""
        for r in self.rows:
            if r["node"] == node:
                return r
        raise KeyError(f"node {node!r} has no row; nodes: {[r['node'] for r in self.rows]}")

    @property
    def compared(self) -> list[dict]:
        """Rows with metrics."""
        return [r for r in self.rows if r.get("Accuracy Reached or Not") in ("Yes", "No")]

    @property
    def failing(self) -> list[dict]:
        return [r for r in self.rows if self.thresholds.fails(r)]

    @property
    def uncompared(self) -> list[dict]:
        """Rows matched on both sides that have no metrics: unreadable,
        corrupt or missing files, empty or unsupported data (the reason is in
        ``cmp_fail_reason``)."""
        return [r for r in self.rows if r["match"] == "matched" and self.thresholds.fails(r) is None]

    def ulp_flagged(self, max_ulp: float) -> list[dict]:
        """Rows that pass the thresholds but whose ``max_ulp_error`` exceeds
        ``max_ulp``: errors msprobe's absolute rule (``MaxAbsErr > 0.001``)
        cannot see, e.g. a planted error on small values."""
        return [r for r in self.rows if self.thresholds.fails(r) is False
                and _to_float(r.get("max_ulp_error")) > max_ulp]

    def column(self, name: str, rows: list[dict] | None = None) -> np.ndarray:
        """A numeric column as float64 (NaN where empty), over ``rows``
        (default: the compared rows)."""
        if name not in COLUMNS:
            raise ValueError(f"column={name!r} is not a report column; valid: {COLUMNS}")
        rows = self.compared if rows is None else rows
        return np.array([_to_float(r.get(name)) for r in rows], dtype=np.float64)

    # -- output ------------------------------------------------------------
    def _csv_table(self) -> tuple[list[str], list[dict]]:
        """(header, rows of cells) of the CSV."""
        if self.flavor != "exact":
            return (list(FLAVOR_HEADERS[self.flavor]),
                    [{k: _cell(v) for k, v in r.items()} for r in flavor_rows(self.rows, self.flavor)])
        return list(COLUMNS), [{k: _cell(r.get(k, "")) for k in COLUMNS} for r in self.rows]

    def to_csv_text(self) -> str:
        """The CSV, its header row first: for flavor ``exact``
        :data:`COLUMNS`, for a tool's flavour exactly the tool's header and
        cells (:func:`numlab.compare.flavors.flavor_rows`).  What the columns
        mean is in the JSON sidecar :meth:`to_csv` writes (:meth:`metadata`)."""
        header, rows = self._csv_table()
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue()

    def metadata(self, options: dict | None = None, *, csv_name: str | None = None) -> dict:
        """The run's description, the content of the CSV's JSON sidecar:
        ``file`` (the CSV's name), ``flavor`` and ``flavor_note`` (what the
        columns compute), ``columns`` (the header), ``row_count`` (data rows
        in the CSV), ``golden``, ``mine``, ``thresholds``, ``first_divergence``,
        ``problems``, ``notes``, ``command``, ``options`` (the command's
        options; ``{}`` from the API) and ``versions`` (numlab, numpy,
        ml_dtypes, python).  Non-finite numbers are the strings ``"nan"``,
        ``"inf"``, ``"-inf"`` (as in the CSV)."""
        header, rows = self._csv_table()
        doc = {"file": csv_name, "flavor": self.flavor, "flavor_note": FLAVOR_NOTES[self.flavor],
               "columns": header, "row_count": len(rows), "golden": self.golden, "mine": self.mine,
               "thresholds": dataclasses.asdict(self.thresholds), "first_divergence": self.first_divergence,
               "problems": dict(self.problems), "notes": list(self.notes), "command": "numlab compare",
               "options": dict(options or {}),
               "versions": {"numlab": __version__, "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
                            "python": platform.python_version()}}
        return strict_json.plain(doc, default=str)

    def to_csv(self, path: str | os.PathLike, *, force: bool = False, options: dict | None = None) -> Path:
        """Write the report as CSV (atomically), header row first, and its
        JSON sidecar (:func:`sidecar_path`, :meth:`metadata` with
        ``options``).  ``path`` ending in ``.csv`` is the file; otherwise a
        directory that gets ``numlab_cmp_report_<UTC timestamp>.csv`` (as
        msit's ``-o`` does).  An existing file is never overwritten unless
        ``force``."""
        p = report_path(path, force=force)
        atomic_write_bytes(p, self.to_csv_text().encode())
        meta = self.metadata(options, csv_name=p.name)
        atomic_write_bytes(sidecar_path(p), (json.dumps(meta, indent=1) + "\n").encode())
        return p

    def summary(self) -> str:
        n_cmp = len(self.compared)
        kinds: dict[str, int] = {}
        for r in self.rows:
            kinds[r["match"]] = kinds.get(r["match"], 0) + 1
        lines = [
            f"golden: {self.golden}",
            f"mine:   {self.mine}",
            f"{len(self.rows)} rows: " + ", ".join(f"{v} {k}" for k, v in kinds.items())
            + f"; {n_cmp} compared, {len(self.failing)} failing",
        ]
        if not self.compared:
            lines.append("NOTHING WAS COMPARED: no node has data on both sides that could be read "
                         "(see the rows' cmp_fail_reason).")
        if self.problems:
            lines.append(f"{len(self.problems)} dumped file(s) are missing, corrupt or fail their "
                         "SHA-256 check: " + "; ".join(f"{k}: {v}" for k, v in list(self.problems.items())[:4])
                         + (" ..." if len(self.problems) > 4 else ""))
        unc = self.uncompared
        if unc:
            lines.append(f"{len(unc)} matched node(s) could not be compared (unreadable, corrupt or "
                         f"empty data; see cmp_fail_reason): " + ", ".join(r["node"] for r in unc[:8])
                         + (" ..." if len(unc) > 8 else ""))
        fd = self.first_divergence
        if fd is None:
            lines.append("first divergence: none (no node crosses the thresholds with passing inputs)")
        else:
            lines.append(
                f"first divergence: {fd['node']} (op {fd['op'] or '?'}"
                + (f", block {fd['block']}" if fd["block"] else "")
                + f"): cosine {format_number(fd['cosine_similarity'], 8)}, max rel err "
                f"{format_number(fd['max_relative_error'])}, max ulp {format_number(fd['max_ulp_error'])} -- "
                + ("error introduced here, inputs pass (" + (fd['inputs'] or 'graph inputs') + ")"
                   if fd["error_origin"] == "introduced" else "first failing node (no graph edges known)")
            )
        lines.extend(self.notes)
        return "\n".join(lines)

    def table(self, max_rows: int | None = 60) -> str:
        """A readable fixed-width table of the main columns."""
        head = (f"{'#':>3} {'node':<18} {'op':<11} {'block':<9} {'cosine':>10} {'max_rel':>10} "
                f"{'max_abs':>10} {'max_ulp':>9} {'bits=':>6} {'acc':>4} {'origin':<10} reason")
        out = [head, "-" * len(head)]
        rows = self.rows if max_rows is None else self.rows[:max_rows]
        for r in rows:
            out.append(
                f"{r['index']:>3} {str(r['node'])[:18]:<18} {str(r['op'])[:11]:<11} "
                f"{str(r['block'])[:9]:<9} {format_number(r['cosine_similarity'], 8):>10} "
                f"{format_number(r['max_relative_error']):>10} {format_number(r['MaxAbsErr']):>10} "
                f"{format_number(r['max_ulp_error'], 3):>9} {format_number(r['bitwise_equal_ratio'], 2):>6} "
                f"{str(r['Accuracy Reached or Not'] or '-')[:4]:>4} {r['error_origin'] or '':<10} "
                f"{str(r['cmp_fail_reason'])[:70]}"
            )
        if max_rows is not None and len(self.rows) > max_rows:
            out.append(f"... {len(self.rows) - max_rows} more rows (see the CSV)")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.summary() + "\n" + self.table()

    def _repr_facts(self):
        kinds: dict[str, int] = {}
        for r in self.rows:
            kinds[r["match"]] = kinds.get(r["match"], 0) + 1
        failing = self.failing
        fd = self.first_divergence
        rows = [("golden", self.golden), ("mine", self.mine),
                ("rows", f"{len(self.rows)}: " + ", ".join(f"{v} {k}" for k, v in kinds.items())),
                ("compared", f"{len(self.compared)}, {len(failing)} failing"
                             + (": " + ", ".join(str(r["node"]) for r in failing[:6])
                                + (" ..." if len(failing) > 6 else "") if failing else "")),
                ("first divergence", "none" if fd is None else
                 f"{fd['node']} (op {fd['op'] or '?'}): cosine {format_number(fd['cosine_similarity'], 8)}, "
                 f"max rel err {format_number(fd['max_relative_error'])}, "
                 f"max ulp {format_number(fd['max_ulp_error'])}"),
                ("uncompared", len(self.uncompared) or None),
                ("problems", f"{len(self.problems)} dumped file(s)" if self.problems else None),
                ("flavor", self.flavor if self.flavor != "exact" else None),
                ("notes", f"{len(self.notes)}: {self.notes[0]}" if self.notes else None)]
        return "CompareReport", rows

    def _repr_html_(self) -> str:
        """The facts and the first rows of the main columns (the full table:
        :meth:`table` or the CSV)."""
        cols = [("node", "node", 0), ("op", "op", 0), ("cosine", "cosine_similarity", 8),
                ("max rel", "max_relative_error", 3), ("max ulp", "max_ulp_error", 3),
                ("acc", "Accuracy Reached or Not", 0), ("origin", "error_origin", 0)]
        shown = self.rows[:HTML_ROWS]
        head = "".join(f"<th>{html.escape(c)}</th>" for c, _, _ in cols)
        body = "".join("<tr>" + "".join(
            f"<td>{html.escape(format_number(r.get(k), d) if d else str(r.get(k) or '-')[:40])}</td>"
            for _, k, d in cols) + "</tr>" for r in shown)
        more = (f"<p>... {len(self.rows) - len(shown)} more rows (<code>.table()</code> or the CSV)</p>"
                if len(self.rows) > len(shown) else "")
        return facts_html(self._repr_facts(), f"<table><tr>{head}</tr>{body}</table>{more}")


def _to_float(v) -> float:
    if v is None or v == "":
        return np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def format_number(v, digits: int = 3) -> str:
    """A compare cell as text: ``-`` for a missing value, fixed point for
    |v| <= 1 at 6+ digits (cosines), else ``digits`` significant digits."""
    if v is None or v == "":
        return "-"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if digits >= 6 and np.isfinite(f) and abs(f) <= 1:
        return f"{f:.{digits}f}"
    return f"{f:.{digits}g}"



def _cell(v):
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return str(list(v))
    return v
