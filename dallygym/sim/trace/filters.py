"""Cutting a job list down: time windows, job counts and jobs larger than the cluster.

The importers (:mod:`dallygym.sim.trace.importers`) and the loader
(:func:`dallygym.sim.trace.load_trace`) share these rules, so a window or an ``oversize`` mode
means the same on import and on load. Every function works on plain arrays plus a
:class:`~dallygym.sim.trace.schema.RowLocator`, and records what it removed or changed in a
report dict -- nothing is dropped or changed without a trace of it:

* :func:`window_mask` -- jobs whose arrival lies in ``[start, end)``;
* :func:`handle_oversize` -- jobs needing more GPUs than the cluster has: an error naming the
  source line (``"error"``), removed (``"drop"``) or cut to the cluster's size (``"clamp"``),
  each such row listed;
* :func:`first_jobs` -- the first ``max_jobs`` jobs in arrival order.
"""

from __future__ import annotations

import numpy as np

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.trace.schema import RowLocator, TraceError

#: What may happen to a job larger than the cluster.
OVERSIZE_MODES: tuple[str, ...] = ("error", "drop", "clamp")


def check_window(start_h: float | None, end_h: float | None) -> None:
    """Fail unless the window bounds (hours, either may be None) make a non-empty window."""
    for name, value in (("start_h", start_h), ("end_h", end_h)):
        if value is not None and not (isinstance(value, (int, float)) and np.isfinite(value)):
            raise TraceError(f"{name} must be a finite number of hours, got {value!r}")
    if start_h is not None and start_h < 0:
        raise TraceError(f"start_h must be >= 0 hours, got {start_h}")
    if start_h is not None and end_h is not None and end_h <= start_h:
        raise TraceError(f"the time window is empty: end_h {end_h} <= start_h {start_h}")


def window_mask(offsets_s: np.ndarray, start_s: float | None, end_s: float | None) -> np.ndarray:
    """Jobs whose arrival offset (seconds) lies in the half-open window ``[start_s, end_s)``."""
    keep = np.ones(len(offsets_s), dtype=bool)
    if start_s is not None:
        keep &= offsets_s >= start_s
    if end_s is not None:
        keep &= offsets_s < end_s
    return keep


def check_oversize_mode(oversize: str) -> None:
    if oversize not in OVERSIZE_MODES:
        raise TraceError(f"oversize must be one of {', '.join(OVERSIZE_MODES)}, got {oversize!r}")


def check_max_jobs(max_jobs: int | None) -> None:
    whole = isinstance(max_jobs, (int, np.integer)) and not isinstance(max_jobs, bool)
    if max_jobs is not None and (not whole or max_jobs < 1):
        raise TraceError(f"max_jobs must be a whole number >= 1, got {max_jobs!r}")


def handle_oversize(
    gpus: np.ndarray,
    cluster: ClusterSpec | None,
    oversize: str,
    where: RowLocator,
    column: str,
    labels: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Apply ``oversize`` to the jobs that need more GPUs than ``cluster`` has.

    Args:
        gpus: GPUs per job (int array).
        cluster: the target cluster; None means no check (everything is kept as is).
        oversize: ``"error"``, ``"drop"`` or ``"clamp"``.
        where: locator of the rows (messages and the report name the *source* line).
        column: the source file's name of the GPU column, for messages.
        labels: the job's id as the source names it, for the report (optional).

    Returns:
        ``(keep, gpus, changes)``: a boolean mask of the rows kept, the GPU counts (clamped
        rows cut to ``cluster.num_gpus``) and one dict per dropped or clamped row:
        ``{"line", "job", "num_gpus", "action"}`` (``line`` as :meth:`RowLocator.row` words it).

    Raises:
        TraceError: with ``"error"``, naming the first oversized row's file, line and column.
    """
    check_oversize_mode(oversize)
    keep = np.ones(len(gpus), dtype=bool)
    if cluster is None:
        return keep, gpus, []
    too_big = gpus > cluster.num_gpus
    if not too_big.any():
        return keep, gpus, []
    rows = np.flatnonzero(too_big)
    size = (
        f"the cluster's {cluster.num_gpus} (racks={cluster.racks}, "
        f"machines_per_rack={cluster.machines_per_rack}, "
        f"gpus_per_machine={cluster.gpus_per_machine})"
    )
    if oversize == "error":
        i = int(rows[0])
        more = len(rows) - 1
        tail = f" (and {more} more such row{'s' if more != 1 else ''})" if more else ""
        raise TraceError(
            f"{where.at(i, column)}: a job of {int(gpus[i])} GPUs, more than {size}{tail}; "
            f"oversize 'drop' or 'clamp' (--oversize) imports the others"
        )
    changes = []
    gpus = gpus.copy()
    for i in rows.tolist():
        change = {
            "line": where.row(i),
            "job": None if labels is None else _plain(labels[i]),
            "num_gpus": int(gpus[i]),
            "action": "dropped" if oversize == "drop" else f"clamped to {cluster.num_gpus}",
        }
        changes.append(change)
    if oversize == "drop":
        keep[rows] = False
    else:
        gpus[rows] = cluster.num_gpus
    return keep, gpus, changes


def first_jobs(count: int, max_jobs: int | None) -> np.ndarray:
    """Mask of the first ``max_jobs`` of ``count`` rows already in arrival order."""
    keep = np.ones(count, dtype=bool)
    if max_jobs is not None:
        keep[max_jobs:] = False
    return keep


def describe_change(source: str, change: dict) -> str:
    """One line for a dropped or clamped row: ``file, line N: job J of G GPUs: dropped ...``."""
    job = f"job {change['job']} " if change.get("job") is not None else "a job "
    return f"{source}, {change['line']}: {job}of {change['num_gpus']} GPUs {change['action']} (larger than the cluster)"


def filter_trace(
    frame,
    where: RowLocator,
    raw_ids,
    cluster: ClusterSpec | None = None,
    start_h: float | None = None,
    end_h: float | None = None,
    max_jobs: int | None = None,
    oversize: str = "error",
):
    """The loader's filters on a validated canonical trace (:func:`~dallygym.sim.trace.load_trace`).

    Args:
        frame: the canonical frame (sorted by arrival, then id), validated without a cluster.
        where: locator of the rows as read (file lines, or frame positions).
        raw_ids: the ``job_id`` column as read, to map sorted rows back to read rows.
        cluster: jobs larger than it are handled by ``oversize``; None: no check.
        start_h, end_h: keep jobs arriving in ``[start_h, end_h)`` hours after the earliest
            arrival; the kept jobs' arrivals are then shifted so the first arrives at 0 s.
        max_jobs: keep the first ``max_jobs`` jobs (arrival order) left after the others.
        oversize: ``"error"``, ``"drop"`` or ``"clamp"`` (``num_gpus`` cut to the cluster's
            GPUs; iterations and iteration time are kept).

    Returns:
        ``(frame, report)``: the filtered frame (not yet re-validated) and a dict
        ``{"rows_read", "rows_kept", "dropped": {...}, "oversize": {"mode", "rows"},
        "arrival_shift_s"}``.
    """
    import pandas as pd

    check_window(start_h, end_h)
    check_max_jobs(max_jobs)
    check_oversize_mode(oversize)
    ids = pd.to_numeric(pd.Series(raw_ids).reset_index(drop=True)).astype("int64")
    positions = pd.Index(ids).get_indexer(frame["job_id"].to_numpy())
    located = where.subset(positions)
    report: dict = {"rows_read": len(frame), "dropped": {}}
    arrival = frame["arrival_s"].to_numpy()
    keep = np.ones(len(frame), dtype=bool)
    windowed = start_h is not None or end_h is not None
    if windowed:
        offsets = arrival - arrival.min()
        keep = window_mask(
            offsets, None if start_h is None else start_h * 3600.0, None if end_h is None else end_h * 3600.0
        )
        report["dropped"]["outside_window"] = int((~keep).sum())
        report["window"] = {"start_h": start_h, "end_h": end_h, "hours_after": "the earliest arrival"}
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise TraceError(
            f"{where.source}: no job is left in the window [{start_h}, {end_h}) h ({len(frame)} jobs read)"
        )
    kept, gpus, changes = handle_oversize(
        frame["num_gpus"].to_numpy()[rows],
        cluster,
        oversize,
        located.subset(rows),
        "num_gpus",
        frame["job_id"].to_numpy()[rows],
    )
    report["oversize"] = {"mode": oversize, "rows": changes}
    if oversize == "drop":
        report["dropped"]["oversize"] = int((~kept).sum())
    rows, gpus = rows[kept], gpus[kept]
    if len(rows) == 0:
        raise TraceError(f"{where.source}: every job left is larger than the cluster")
    if max_jobs is not None:
        report["dropped"]["max_jobs"] = max(0, len(rows) - max_jobs)
        rows, gpus = rows[:max_jobs], gpus[:max_jobs]
    out = frame.iloc[rows].reset_index(drop=True)
    out["num_gpus"] = gpus.astype(np.int64)
    shift = float(out["arrival_s"].min()) if windowed else 0.0
    out["arrival_s"] = out["arrival_s"] - shift
    report["arrival_shift_s"] = shift
    report["rows_kept"] = len(out)
    return out, report


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


__all__ = [
    "OVERSIZE_MODES",
    "check_max_jobs",
    "check_oversize_mode",
    "check_window",
    "describe_change",
    "filter_trace",
    "first_jobs",
    "handle_oversize",
    "window_mask",
]
