"""Multi-core kernels, seeded schedules, races and how to find them.

A fused operator on an accelerator runs on several *core groups* at once (on
Ascend: AIV vector cores and AIC cube cores).  They talk through global memory
(GM).  If a consumer core reads a GM region before the producer core's write of
it has landed, it reads whatever the region held before: zeros, garbage, or the
values a *previous* case of a batch left there.  The result is right most of
the time and wrong now and then, only on the outputs that depend on the region.

This module models exactly that, small enough to reason about and fast enough
to batch-run thousands of cases:

* :class:`Kernel` -- a list of :class:`Stage` (a computation on one core group;
  each core reads and writes its own *rows* of named GM buffers, optionally
  with atomic adds) and barriers: :class:`SyncAll` (every core of every group
  waits for all the others) and :class:`Flag` (cross-core set/wait: a core of
  the consumer stage waits for all, or for its paired, cores of the producer
  stage).
* :func:`schedule` -- a seeded scheduler: each (stage, core) draws a duration
  from the stage's :class:`Latency`; a core starts a stage when it has finished
  its previous stage and every barrier in front of it has been released.
* :func:`simulate` -- event-driven execution: a stage reads its inputs when it
  starts, computes with numpy on whole slices, and each write (or each of
  ``chunks`` parts of it) becomes visible when it completes.  A read sees, row
  by row, the last write visible at the time of the read.  Every read that saw
  an older version than program order promises is recorded as a
  :class:`StaleRead`; every write that a program-order-earlier write overwrote
  last as a lost write.  Same seed -> same schedule -> same bits.
* :func:`detect_races` -- a static detector: from stages and barriers alone,
  every pair of accesses by different cores to overlapping rows, at least one
  a write, that no happens-before path orders (RAW, WAR, WAW), with a barrier
  that would order them.
* :func:`batch_run` -- run many cases back to back on the same memory (as a
  test harness does, with the caching allocator handing back the same blocks),
  judge each output against an fp64 reference with a stated tolerance.
* :func:`bisect` -- the method used on hardware: cut the kernel after stage k and
  batch-run until the results become nondeterministic, then make the first
  such stage copy each of its inputs out (a probe) to see which one it reads
  inconsistently, and overwrite the writer's output with a known pattern to
  see *what* it read (the previous case's value = a stale read).
* :data:`SCENARIOS` -- ready-made kernels; ``fused_linear_online_max_sum``
  is a fused linear layer with an online max/sum (a missing SyncAll between ``TargetProcess`` on
  the vector cores and the cube-core matmul stage that reads ``maskedTarget``);
  ``split_softmax`` is a vector-vector race on partial sums; ``atomic_rowsum``
  is race-free but accumulates with atomic adds, so its bits follow the
  schedule (``fix=True``: the deterministic two-phase reduction).

The package is split along these seams: :mod:`.model` (kernels, stages,
barriers), :mod:`.sim` (schedules, simulation), :mod:`.detect` (static
detection), :mod:`.batch` (batches and tolerances), :mod:`.bisection` and
:mod:`.scenarios`; this module re-exports their public names.  Figures of a
run (the timeline) are drawn by :func:`numlab.plots.draw_timeline`.

Layering: numpy only; nothing here imports the executors.  Time is in arbitrary units.
"""

from __future__ import annotations

from .batch import BatchResult, CaseResult, Tolerance, batch_run
from .bisection import BisectReport, BisectStep, bisect
from .detect import Finding, atomic_accumulations, detect_races
from .model import GROUPS_ORDER, Access, Buffer, Flag, Kernel, Latency, Stage, StageContext, SyncAll
from .scenarios import SCENARIOS, Scenario, failure_rate_curve, get_scenario
from .sim import LostWrite, Schedule, SimResult, StaleRead, schedule, simulate

__all__ = [
    "GROUPS_ORDER",
    "Latency",
    "Access",
    "Stage",
    "SyncAll",
    "Flag",
    "Buffer",
    "Kernel",
    "StageContext",
    "Schedule",
    "StaleRead",
    "LostWrite",
    "SimResult",
    "simulate",
    "schedule",
    "Finding",
    "detect_races",
    "atomic_accumulations",
    "Tolerance",
    "CaseResult",
    "BatchResult",
    "batch_run",
    "BisectStep",
    "BisectReport",
    "bisect",
    "Scenario",
    "SCENARIOS",
    "get_scenario",
    "failure_rate_curve",
]

