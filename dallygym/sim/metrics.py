"""Per-job and per-run metrics of a finished run (SPEC §6) -- the one metrics path.

Definitions (seconds throughout):

* JCT = end − arrival, where end is the completion time moved forward by at most a few float64
  steps where rounding left it short of arrival + ideal compute time
  (:func:`completion_times`), so that JCT >= ideal compute time holds exactly.
* queueing delay = JCT − run time: all time spent waiting, including after preemptions; never
  negative (float rounding just below zero is 0, see :func:`queue_times`).
* run time = time holding GPUs (including any restart overhead).
* communication latency = run time − restart overhead − ideal compute time, where ideal compute
  time = total_iterations × iter_time_s: the time lost to exposed communication.
* makespan = last end − first arrival.
* completion p99 = the time, from the same origin (the first arrival), by which at least 99 %
  of the jobs are done: the ``ceil(0.99 n)``-th smallest end time minus the first arrival (an
  order statistic, numpy's ``inverted_cdf``, not interpolated: interpolating towards the last
  job would let the one job that sets the makespan leak into it). With 100 jobs it is the 99th
  end, i.e. the makespan without the last job.
* makespan job = the id of the job whose end sets the makespan (the latest end; on a tie, the
  lowest job id).
* makespan job share = that job's run time (time holding GPUs) / makespan, in [0, 1]: how much
  of the makespan its own run spans. Near 1, one job's run is the makespan whatever the other
  jobs do -- the makespan then measures how that job was placed, not the schedule; compare
  ``completion_p99_s`` across policies instead. 0 when the makespan is 0.
* utilization = time-average of allocated GPUs / total GPUs over the makespan.
* Other percentiles use numpy's default (linear interpolation between order statistics).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .cluster import Tier
from .engine import DONE, Engine

#: Summary keys, in the order tables print them.
SUMMARY_KEYS: tuple[str, ...] = (
    "makespan_s",
    "completion_p99_s",
    "makespan_job",
    "makespan_job_share",
    "jct_mean_s",
    "jct_median_s",
    "jct_p95_s",
    "jct_p99_s",
    "queue_mean_s",
    "queue_p95_s",
    "queue_p99_s",
    "comm_mean_s",
    "utilization",
    "jobs",
    "placements_machine",
    "placements_rack",
    "placements_network",
    "preemptions",
    "migrations",
    "upgrades",
)


#: The figures ``dallygym simulate --out`` adds to a run's directory when matplotlib is installed
#: (:func:`dallygym.experiments.plots.run_figures`); a directory holding them may be replaced.
PLOT_FILES: frozenset[str] = frozenset(
    f"{stem}.{ext}" for stem in ("occupancy", "utilisation_queue", "jct_cdf", "tiers_comm") for ext in ("png", "svg")
)


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run.

    Attributes:
        jobs: one row per job (see :func:`job_frame` for the columns).
        timeline: one row per event time: ``time_s, gpus_used, utilization, running,
            waiting, remaining`` (state just after that instant's scheduling pass).
        summary: the flat per-run summary, keys :data:`SUMMARY_KEYS`.
        placements: one row per GPU of each job's last placement (:func:`placement_frame`),
            for the occupancy chart of :mod:`dallygym.experiments.plots`; None when not recorded. Not
            written by :meth:`to_csv`.
    """

    jobs: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict
    placements: pd.DataFrame | None = field(default=None, compare=False, repr=False)

    def to_csv(self, directory: str | Path, extra: Callable[[Path], object] | None = None) -> None:
        """``extra``: called with the staging directory after the tables are written, to add
        more files (the figures of :mod:`dallygym.experiments.plots`, named as in :data:`PLOT_FILES`) that
        the same swap then puts in place."""
        self._write(directory, "csv", extra)

    def to_parquet(self, directory: str | Path) -> None:
        """Needs a parquet engine (pyarrow or fastparquet) installed."""
        self._write(directory, "parquet")

    def _write(self, directory: str | Path, fmt: str, extra: Callable[[Path], object] | None = None) -> None:
        """Write the three tables into ``directory`` all at once or not at all.

        They are written into a fresh staging directory beside it, which then takes its place
        in one step (:func:`_replace_directory`). A failure or a kill at any point leaves the
        previous output or the new one, whole: never a mix of two runs' files, and (where the
        system can exchange two directories, as Linux can) never no output where there was
        one. A staging directory left by a killed run is removed by the next run writing
        beside it (:func:`remove_stale_staging`). ``directory`` may be new or hold only this
        kind of output (files named ``jobs``, ``timeline``, ``summary``, ``settings.json``, or
        the figures :data:`PLOT_FILES`); any other file in it is reason to refuse, since replacing the
        directory would delete it.
        A failed write raises :class:`OutputError` naming the file.
        """
        out = Path(directory)
        names = {f"{name}.{ext}" for name in ("jobs", "timeline", "summary") for ext in ("csv", "parquet")}
        names |= PLOT_FILES | {"settings.json"}
        if out.exists():
            if not out.is_dir():
                raise ValueError(f"--out {out}: exists and is not a directory")
            others = sorted(p.name for p in out.iterdir() if p.name not in names)
            if others:
                shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
                raise ValueError(
                    f"--out {out}: holds other files ({shown}); the output replaces the whole "
                    f"directory, so give a new one or one holding only a previous run's output"
                )
        target = out.resolve()
        parent = target.parent
        with naming(parent):
            parent.mkdir(parents=True, exist_ok=True)
            remove_stale_staging(parent)
            staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(target.name), dir=parent))
        try:
            summary = pd.DataFrame([self.summary])
            for name, frame in (("jobs", self.jobs), ("timeline", self.timeline), ("summary", summary)):
                path = staging / f"{name}.{fmt}"
                with naming(out / path.name):
                    if fmt == "csv":
                        frame.to_csv(path, index=False)
                    else:
                        frame.to_parquet(path, index=False)
            if extra is not None:
                with naming(out):
                    extra(staging)
            with naming(out):
                _replace_directory(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


class OutputError(OSError):
    """Writing a result file failed (a full disk, a read-only directory): the message names
    the file, which the system's own message ("No space left on device") does not."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Re-raise an ``OSError`` inside the block as :class:`OutputError` naming ``path``."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise OutputError(exc.errno, reason, str(path)) from exc


# Staging directories are named ``.<name>.new-<host>-<pid>-<random>``: the pid of the run that
# made it, so a later run can tell a live run's staging from a killed one's, and the host,
# since a pid means nothing on another machine sharing the file system.
_STAGING = re.compile(r"^\..*\.new-(?P<host>[A-Za-z0-9_.]+)-(?P<pid>[0-9]+)-[a-z0-9_]+$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _staging_prefix(name: str) -> str:
    return f".{name}.new-{_host()}-{os.getpid()}-"


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # alive under another user (or not a pid this system can have: keep it)
    return True


def remove_stale_staging(parent: str | Path) -> list[Path]:
    """Remove the staging directories in ``parent`` left by runs killed on this machine
    (their pid no longer exists); return them. Those of live runs, and of other machines,
    are left alone."""
    removed = []
    host = _host()
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _STAGING.match(entry.name)
        if match is None or match["host"] != host or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and not _pid_exists(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


#: renameat2 flag: swap the two names in one step (linux/fs.h).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
#: errno values by which renameat2 says it cannot exchange here (an old kernel or C library,
#: a file system without the flag): fall back to two renames.
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}


def _exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically (Linux renameat2 with RENAME_EXCHANGE).
    False where that is unavailable; an ``OSError`` for any other failure."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28 and later
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(b))


def _replace_directory(new: Path, target: Path) -> None:
    """Put directory ``new`` at ``target`` (same file system), replacing any directory there.

    With no ``target`` yet, one rename does it atomically. Otherwise the two are exchanged in
    one step (Linux ``renameat2(RENAME_EXCHANGE)``), so ``target`` holds the old output or the
    new one at every instant, and the old one, now at ``new``'s name, is deleted (if this
    process is killed first, the next run removes it as a stale staging directory). Where the
    exchange is unavailable (other systems, old kernels, some file systems) it falls back to
    two renames -- the old output aside, the new one in -- which a kill between them would
    leave with no ``target`` (the old output stays beside it, in ``.<name>.old-*``).
    """
    if not target.exists():
        os.replace(new, target)
        return
    if _exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)  # the previous output, now under the staging name
        return
    # Not a staging name: after a kill between the renames this holds the only copy of the
    # previous output, which no later run should delete unasked.
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.replace(target, aside / target.name)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(aside / target.name, target)  # put the previous output back
        shutil.rmtree(aside, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _job_columns(engine: Engine) -> dict[str, np.ndarray]:
    """Per-job metrics of a finished engine run, as arrays."""
    if not np.all(engine.state == DONE):
        raise ValueError("metrics need a finished run: some jobs have not completed")
    end = completion_times(engine)
    jct = end - engine.arrival_s
    comm = engine.run_s - engine.overhead_s - engine.ideal_s
    return {
        "job_id": engine.job_id,
        "model": engine.model.astype(str),
        "num_gpus": engine.num_gpus,
        "arrival_s": engine.arrival_s,
        "first_start_s": engine.first_start_s,
        "end_s": end,
        "jct_s": jct,
        "queue_s": queue_times(engine, end),
        "run_s": engine.run_s,
        "ideal_s": engine.ideal_s,
        # Float round-off of (run − ideal) can leave a job at speed 1 with −1e-9 s.
        "comm_s": np.where(np.abs(comm) < 1e-6 * np.maximum(1.0, engine.ideal_s), 0.0, comm),
        "overhead_s": engine.overhead_s,
        "preemptions": engine.preemptions,
        "migrations": engine.migrations,
        "upgrades": engine.upgrades,
        "machine_s": engine.tier_s[:, Tier.MACHINE],
        "rack_s": engine.tier_s[:, Tier.RACK],
        "network_s": engine.tier_s[:, Tier.NETWORK],
    }


#: How many float64 steps a completion time may be moved forward (see completion_times).
_MAX_ULPS = 16


def completion_times(engine: Engine) -> np.ndarray:
    """Each job's end time, seconds: the engine's completion event, made consistent with
    the jobs' ideal run times exactly.

    The engine finishes a job at ``start + remaining iterations / rate`` with ``rate =
    speed / iter_time_s``; rounding can put that a few float64 steps before ``arrival +
    total_iterations x iter_time_s`` (1 GPU, 3 x 0.1 s: 0.3 against 0.30000000000000004).
    Such an end is moved forward to the first float64 time at which ``end − arrival >=
    ideal`` holds exactly, so JCT >= ideal run time without any tolerance. A shortfall larger
    than a few steps is not rounding, and is left for the invariant checks to report.
    """
    end = engine.end_s.copy()
    arrival = engine.arrival_s
    ideal = engine.ideal_s
    for _ in range(_MAX_ULPS):
        short = end - arrival < ideal
        if not short.any():
            break
        end[short] = np.nextafter(end[short], np.inf)
    return end


#: Largest shortfall of ``JCT − run time`` below zero taken for rounding, relative to the
#: clock (seconds per second of the end time). The run time is a sum over the events a job
#: ran through, each term rounded; even a million such terms stay far below this.
_QUEUE_ROUNDING = 1e-9


def queue_times(engine: Engine, end: np.ndarray | None = None) -> np.ndarray:
    """Each job's queueing delay, seconds: ``JCT − run time``, never negative.

    The run time is accumulated event by event and the JCT is a difference of clock times, so
    a job that never waited can come out a few float64 steps below zero (−1e-13 s). Such
    rounding is set to exactly 0. A shortfall beyond rounding (more than a nanosecond per
    second of clock) would mean a job ran longer than it was in the system: that is a bug,
    raised as ``ValueError`` naming the job, never hidden. ``end``: the completion times
    (:func:`completion_times`), if the caller has them already.
    """
    end = completion_times(engine) if end is None else end
    queue = (end - engine.arrival_s) - engine.run_s
    negative = queue < 0
    if negative.any():
        tolerance = _QUEUE_ROUNDING * np.maximum(1.0, np.abs(end))
        real = negative & (queue < -tolerance)
        if real.any():
            j = int(np.flatnonzero(real)[0])
            raise ValueError(
                f"job {engine.job_id[j]} ran {engine.run_s[j]!r} s but was in the system only "
                f"{end[j] - engine.arrival_s[j]!r} s (queueing delay {queue[j]!r} s)"
            )
        queue[negative] = 0.0
    return queue


def job_frame(engine: Engine) -> pd.DataFrame:
    """Per-job metrics of a finished engine run."""
    return pd.DataFrame(_job_columns(engine))


def timeline_frame(engine: Engine) -> pd.DataFrame:
    frame = pd.DataFrame(engine.timeline, columns=["time_s", "gpus_used", "running", "waiting", "remaining"])
    frame.insert(2, "utilization", frame["gpus_used"] / engine.spec.num_gpus)
    return frame


def summarize(engine: Engine, jobs: dict[str, np.ndarray] | None = None) -> dict:
    """The flat per-run summary of a finished run (keys :data:`SUMMARY_KEYS`), straight from
    the engine's arrays: the environment asks for it at the end of every episode, where
    building the frames would cost more than the summary. ``jobs``: the per-job columns, if
    the caller has them already."""
    jobs = _job_columns(engine) if jobs is None else jobs
    jct = jobs["jct_s"]
    queue = jobs["queue_s"]
    first = float(jobs["arrival_s"].min())
    last = float(jobs["end_s"].max())
    makespan = last - first
    if makespan > 0:
        # Integrated exactly at every event (the timeline may be thinned), not with np.dot:
        # BLAS splits a long dot product over its threads, so its last bits depended on the
        # machine's core count (and differed between a sweep's backends).
        utilization = engine.busy_gpu_s(last) / (engine.spec.num_gpus * makespan)
    else:
        utilization = 0.0
    placements = engine.placements_by_tier
    # (Each pair of percentiles in one call: the same interpolation per q, at half the cost.)
    jct_p95, jct_p99 = np.percentile(jct, (95, 99)).tolist()
    queue_p95, queue_p99 = np.percentile(queue, (95, 99)).tolist()
    end = jobs["end_s"]
    completion_p99 = float(np.percentile(end, 99, method="inverted_cdf")) - first
    ids = np.asarray(jobs["job_id"])
    last_job = int(ids[end == last].min())  # the latest end; on a tie, the lowest id
    last_run = float(np.asarray(jobs["run_s"])[ids == last_job][0])
    return {
        "makespan_s": float(makespan),
        "completion_p99_s": completion_p99,
        "makespan_job": last_job,
        "makespan_job_share": last_run / makespan if makespan > 0 else 0.0,
        "jct_mean_s": float(jct.mean()),
        "jct_median_s": float(np.median(jct)),
        "jct_p95_s": jct_p95,
        "jct_p99_s": jct_p99,
        "queue_mean_s": float(queue.mean()),
        "queue_p95_s": queue_p95,
        "queue_p99_s": queue_p99,
        "comm_mean_s": float(jobs["comm_s"].mean()),
        "utilization": utilization,
        "jobs": int(engine.n),
        "placements_machine": int(placements[Tier.MACHINE]),
        "placements_rack": int(placements[Tier.RACK]),
        "placements_network": int(placements[Tier.NETWORK]),
        "preemptions": int(jobs["preemptions"].sum()),
        "migrations": int(jobs["migrations"].sum()),
        "upgrades": int(jobs["upgrades"].sum()),
    }


def placement_frame(engine: Engine, end: np.ndarray | None = None) -> pd.DataFrame:
    """Each job's last placement, one row per GPU: ``job_id, gpu, tier`` (0 machine, 1 rack,
    2 network), ``start_s, end_s`` and ``segments`` (1 + preemptions + migrations + upgrades).

    The engine keeps only the GPUs a job held last. For a job placed once (``segments == 1``)
    that is its whole GPU history, from ``start_s`` (its first start) to ``end_s``. For a job
    placed more than once the GPUs of its earlier placements and the start of its last one
    are not recorded: ``start_s`` is then ``end_s`` minus its whole time holding GPUs, the
    earliest its last placement can have started; ``segments > 1`` marks such rows.
    """
    end = completion_times(engine) if end is None else end
    num = engine.num_gpus.astype(np.int64)
    offsets = np.asarray(engine._gpu_off_list, dtype=np.int64)
    job = np.repeat(np.arange(engine.n), num)
    within = np.arange(int(num.sum()), dtype=np.int64) - np.repeat(np.cumsum(num) - num, num)
    gpus = np.asarray(engine._gpu_store)[np.repeat(offsets, num) + within]
    segments = 1 + engine.preemptions + engine.migrations + engine.upgrades
    return pd.DataFrame(
        {
            "job_id": np.asarray(engine.job_id)[job],
            "gpu": gpus.astype(np.int64),
            "tier": np.asarray(engine._last_tier)[job].astype(np.int64),
            "start_s": np.where(segments == 1, engine.first_start_s, end - engine.run_s)[job],
            "end_s": end[job],
            "segments": np.asarray(segments)[job].astype(np.int64),
        }
    )


def collect(engine: Engine) -> RunResult:
    """Metrics of a finished engine run."""
    jobs = _job_columns(engine)
    return RunResult(
        jobs=pd.DataFrame(jobs),
        timeline=timeline_frame(engine),
        summary=summarize(engine, jobs),
        placements=placement_frame(engine, jobs["end_s"]),
    )
