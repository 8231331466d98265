"""``numlab course build``: the notebooks executed and exported as a static HTML course.

One HTML page per notebook with its outputs (widgets in their initial
state), an index page listing the notebooks, their titles and the extra
each needs, a glossary page, a sidebar and previous/next links on every
page, math rendered offline (:mod:`numlab.course`).  Exit 1, naming the
notebook and the cell, when any output is an error.  A notebook whose
optional extra is not installed is not run: its page says what to install
(exit 0).  An existing course is never overwritten and never nested in:
``--out`` holding a course is refused (exit 2, before running anything)
unless ``--force``, which replaces it.
"""

from __future__ import annotations

import sys

from ..course import CourseError, build
from .options import add_shared


def add_parser(sub) -> None:
    p = sub.add_parser(
        "course",
        help="build the course: the notebooks executed, as static HTML pages with an index",
        description="Course tools.  `numlab course build --out DIR` executes every notebook and writes "
        "one HTML page each (outputs included, widgets in their initial state) and index.html.",
    )
    csub = p.add_subparsers(dest="course_command", metavar="ACTION", required=True)
    b = csub.add_parser(
        "build",
        help="execute the notebooks and write the static HTML course to DIR",
        description="Execute the notebooks (each in its own kernel, --jobs at a time) and write "
        "DIR/index.html, one DIR/NN_name.html per notebook and the executed notebooks in "
        "DIR/notebooks/.  Exit 1, naming the notebook and the cell, on any error output.  A notebook "
        "needing an extra that is not installed (torch, dask, jax) is not run; its page says what to "
        "install.  A DIR that holds a course is refused (exit 2) unless --force, which replaces it; a "
        "course is never built inside another.  Needs the lab extra.",
    )
    add_shared(b, out="course", force="(replace the course in DIR; without it a DIR holding one is refused)")
    b.add_argument("--notebooks", default=None, metavar="DIR",
                   help="folder of NN_*.ipynb notebooks (default: the repository's notebooks/)")
    b.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="notebooks run at once, each in its own kernel (default: the CPU count)")
    b.add_argument("--timeout", type=int, default=600, metavar="S",
                   help="seconds a cell may run (default 600)")
    b.set_defaults(func=_cli)


def _cli(args) -> int:
    try:
        build(args.out, notebooks=args.notebooks, force=args.force, jobs=args.jobs, timeout=args.timeout)
    except CourseError as exc:
        print(f"numlab course build: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        print(f"numlab course build: {exc}", file=sys.stderr)
        return 2
    return 0
