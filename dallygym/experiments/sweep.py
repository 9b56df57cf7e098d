"""Sweeps: many independent runs, on this machine's processes or on a Ray cluster.

A sweep is a list of *cells*; each cell is one task whose result depends on its keys alone
(every random draw comes from the seed in the keys), so the same cells give the same results,
bit for bit, whichever backend runs them and in whatever order they finish.

Two layers:

* :class:`Backend` runs a module-level function over a list of items and yields each result as
  it arrives. :class:`LocalBackend` uses processes on this machine (or the calling process for
  one worker); :class:`RayBackend` starts a local Ray instance or joins a running cluster. Ray is
  imported only by :class:`RayBackend`, so the core and the local backend work without it.
  :func:`run_ordered` collects the results in the items' order (the benchmark scripts use it).
* :func:`sweep` runs simulation cells (:class:`Cell`: policy x trace x cluster x seed x engine
  options) and streams one row per finished cell into ``OUT/results.csv``: the cell's keys and
  the summary keys of ``dallygym simulate``. A re-run skips the cells already in that file. A
  cell that fails (say, a trace with a job larger than its cluster) is reported with its keys in
  ``OUT/errors.csv`` and on stderr, and the other cells still run.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from ..sim.metrics import SUMMARY_KEYS, naming

#: Backends by name, as ``--backend`` takes them.
BACKENDS = ("local", "ray")


class BackendError(ValueError):
    """A backend that cannot be set up as asked (bad option, Ray missing)."""


@dataclass(frozen=True)
class Failure:
    """What a failed task raised: ``error`` is one line (type and message), ``detail`` the traceback."""

    error: str
    detail: str


def _failure(exc: BaseException, detail: str = "") -> Failure:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Failure(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, detail)


def _worker_init(sweep_pid: int | None = None) -> None:
    """Set up a worker process: it dies with the sweep, and runs one torch thread if the
    parent had imported torch.

    A worker outlives a parent killed with SIGKILL (which runs no clean-up), holding its memory
    for as long as its task runs, or for good if it waits on a pipe nobody writes to any more.
    So a worker asks the kernel to kill it when its parent dies (:func:`_die_with_parent`), and
    also watches for it itself.

    A parent that has run torch operations (loading a learned agent does) leaves its OpenMP
    thread pool in a state that a forked child cannot use: the child's first multi-threaded
    operation waits forever on threads that were not copied. With one thread torch never enters
    the pool, and with one worker per core one thread each is the right share anyway. Torch is
    not imported here when the parent had not imported it.
    """
    _die_with_parent(sweep_pid)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


#: How often a worker checks that the sweep is still alive, seconds (a daemon thread that
#: sleeps in between: no measurable cost).
_PARENT_POLL_S = 1.0


def _die_with_parent(sweep_pid: int | None) -> None:
    """End this process as soon as its parent, or the sweep process ``sweep_pid``, is gone.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill it when its parent
    ends, however that ends. The signal comes when the parent *thread* that started the worker
    ends; a pool starts its workers from the thread that runs the sweep, which outlives them.
    Where prctl is missing, and to cover a parent that died before the call, a daemon thread
    checks every :data:`_PARENT_POLL_S` seconds that the parent is still the one it started
    with (a process whose parent dies is handed to another) and that the sweep process
    exists (with a fork server, the parent is the server, not the sweep).
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl here: the watching thread still ends the worker

    def orphaned() -> bool:
        if os.getppid() != parent:
            return True
        if sweep_pid is not None and sweep_pid != parent:
            try:
                os.kill(sweep_pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass  # exists, under another user
        return False

    def watch() -> None:
        while not orphaned():
            time.sleep(_PARENT_POLL_S)
        os._exit(1)  # no clean-up: what the worker held is of no use to anyone now

    if orphaned():
        os._exit(1)
    threading.Thread(target=watch, name="dallygym-parent-watch", daemon=True).start()


#: prctl option: the signal this process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _guarded(fn: Callable[[Any], Any], item: Any) -> tuple[bool, Any]:
    """``(True, fn(item))``, or ``(False, Failure)`` if it raised: one failing task never takes
    the pool, the Ray job or the other tasks down with it."""
    try:
        return True, fn(item)
    except Exception as exc:  # noqa: BLE001 - any failure of a cell is reported, not raised
        return False, _failure(exc, traceback.format_exc())


class Backend:
    """Runs ``fn(item)`` for every item; :meth:`imap_unordered` yields ``(index, ok, value)``
    as each task finishes, where ``value`` is the result or a :class:`Failure`.

    ``fn`` must be a module-level function (processes and Ray workers import it by name) and
    its items and results picklable. Use a backend as a context manager: closing it stops its
    processes, or the Ray instance it started.
    """

    name = "backend"

    def imap_unordered(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, bool, Any]]:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def close(self) -> None:
        """Release what the backend holds (nothing by default)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalBackend(Backend):
    """``workers`` processes on this machine; with one worker, the calling process itself.

    ``workers=None`` uses every core (``os.cpu_count()``). The worker processes end with the
    process that started them, even one killed with SIGKILL (see :func:`_worker_init`).
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        workers = (os.cpu_count() or 1) if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise BackendError(f"workers must be a positive integer, got {workers!r}")
        self.workers = workers

    def describe(self) -> str:
        return "1 local process" if self.workers == 1 else f"{self.workers} local processes"

    def imap_unordered(self, fn, items):
        items = list(items)
        if self.workers == 1 or len(items) <= 1:
            for i, item in enumerate(items):
                yield (i, *_guarded(fn, item))
            return
        from concurrent.futures import ProcessPoolExecutor, as_completed

        pool = ProcessPoolExecutor(
            max_workers=min(self.workers, len(items)), initializer=_worker_init, initargs=(os.getpid(),)
        )
        try:
            futures, unsent, broken = {}, [], None
            for i, item in enumerate(items):
                if broken is None:
                    try:
                        futures[pool.submit(_guarded, fn, item)] = i
                        continue
                    except Exception as exc:  # noqa: BLE001 - a worker died while tasks were queued
                        broken = exc
                unsent.append(i)
            for i in unsent:
                yield (i, False, _failure(broken))
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as exc:  # noqa: BLE001 - the worker process died (killed, out of memory)
                    outcome = (False, _failure(exc))
                yield (futures[future], *outcome)
        finally:
            # On an early exit (an interrupt, a caller that stops reading) drop the queued tasks.
            pool.shutdown(wait=True, cancel_futures=True)


class RayBackend(Backend):
    """Tasks on Ray, one CPU each.

    ``address=None`` starts a local Ray instance with ``workers`` CPUs (every core if None)
    and stops it on :meth:`close`; ``address="auto"`` or ``"HOST:PORT"`` joins a running cluster
    (``ray start --head`` on one machine, ``ray start --address HOST:PORT`` on the others),
    where ``workers``, if given, caps the tasks in flight. If Ray is already initialised in this
    process it is used as it is and left running. Every node needs this version of dallygym
    installed; a trace given as a path must be readable at that path on every node.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise BackendError(f"workers must be a positive integer, got {workers!r}")
        try:
            import ray
        except ImportError:
            raise BackendError("the ray backend needs Ray: pip install 'dallygym[ray]'") from None
        self._ray = ray
        self.address = address
        self.workers = workers
        self._owned = False
        if not ray.is_initialized():
            # No usage report leaves this machine unless the user's environment asks for it.
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            if address is None:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            self._owned = True
        self._task = ray.remote(num_cpus=1)(_guarded)

    def cpus(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def describe(self) -> str:
        where = "a local Ray instance" if self.address is None else f"the Ray cluster at {self.address}"
        return f"{where} ({self.cpus()} CPUs)"

    def imap_unordered(self, fn, items):
        ray = self._ray
        items = list(items)
        # Keep the cluster busy without queueing every task at once (a long sweep stays
        # interruptible and its results stream back).
        limit = self.workers if (self.address is not None and self.workers) else 2 * self.cpus()
        fn_ref = ray.put(fn)
        pending: dict[Any, int] = {}
        queue = iter(enumerate(items))
        try:
            while True:
                while len(pending) < limit:
                    nxt = next(queue, None)
                    if nxt is None:
                        break
                    pending[self._task.remote(fn_ref, nxt[1])] = nxt[0]
                if not pending:
                    return
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    index = pending.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - a worker or node lost beyond Ray's retries
                        outcome = (False, _failure(exc))
                    yield (index, *outcome)
        finally:
            for ref in pending:
                ray.cancel(ref)

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
        self._owned = False


def make_backend(name: str = "local", workers: int | None = None, address: str | None = None) -> Backend:
    """A backend by its ``--backend`` name; a clear :class:`BackendError` for bad options."""
    if name == "local":
        if address is not None:
            raise BackendError("--address applies to --backend ray only")
        return LocalBackend(workers)
    if name == "ray":
        return RayBackend(address, workers)
    raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def as_backend(workers: int | Backend) -> Backend:
    """``workers`` itself if it is a backend, else that many local processes."""
    return workers if isinstance(workers, Backend) else LocalBackend(workers)


class CellFailed(RuntimeError):
    """A task of :func:`run_ordered` failed; the message names its item and its error."""


def run_ordered(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int | Backend = 1,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(item) for item in items]`` on a backend (or ``workers`` local processes): the
    results in the items' order whatever order they finish in. ``on_result(index, result)`` is
    called as each arrives. The first failure raises :class:`CellFailed`."""
    items = list(items)
    backend = as_backend(workers)
    results: list[Any] = [None] * len(items)
    for index, ok, value in backend.imap_unordered(fn, items):
        if not ok:
            raise CellFailed(f"{items[index]!r}: {value.error}\n{value.detail}")
        results[index] = value
        if on_result is not None:
            on_result(index, value)
    return results


# ----------------------------------------------------------------------------------------------
# Simulation cells
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One simulation of a sweep: its keys are every input of the run."""

    policy: str
    trace: str
    racks: int
    machines_per_rack: int = 8
    gpus_per_machine: int = 8
    seed: int = 0
    lease_s: float = 3600.0
    restart_overhead_s: float = 0.0
    renewal: str = "upgrade"
    latency: str = "dally-paper"
    profile: str = "default"  # readings of the papers' open points (dallygym.sim.profiles)
    contention: str = "none"  # dallygym.sim.contention
    oversubscription: float = 1.0

    def keys(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.keys().items())


#: The key columns of ``results.csv``, before the summary keys.
CELL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Cell))
_KEY_TYPES = {f.name: {"int": int, "float": float, "str": str}[f.type] for f in fields(Cell)}
#: Columns of ``results.csv``: the cell's keys, then the summary keys of ``dallygym simulate``.
RESULT_COLUMNS: tuple[str, ...] = CELL_KEYS + SUMMARY_KEYS
#: Columns of ``errors.csv``.
ERROR_COLUMNS: tuple[str, ...] = CELL_KEYS + ("error",)


def _key_tuple(values: dict) -> tuple:
    return tuple(_KEY_TYPES[k](values[k]) for k in CELL_KEYS)


def grid(
    policies: Sequence[str],
    traces: Sequence[str],
    racks: Sequence[int],
    seeds: Sequence[int] = (0,),
    lease_s: Sequence[float] = (3600.0,),
    renewal: Sequence[str] | None = ("upgrade",),
    restart_overhead_s: Sequence[float] = (0.0,),
    machines_per_rack: int = 8,
    gpus_per_machine: int = 8,
    latency: str = "dally-paper",
    profile: str = "default",
    contention: str = "none",
    oversubscription: Sequence[float] = (1.0,),
) -> list[Cell]:
    """Every combination, checked before anything runs (``ValueError`` naming the bad value).

    Order: policy, trace, racks, seed, lease, renewal, restart overhead, oversubscription (the
    last varies fastest); repeated values are dropped. ``contention`` (one for the whole grid)
    and each ``oversubscription`` are keys of every cell (:mod:`dallygym.sim.contention`). A
    trace that is not a shipped name is a CSV path, made absolute (workers may run in another
    directory) and checked to load. ``profile``
    (one for the whole grid, a :data:`dallygym.sim.profiles.PROFILES` name) is a key of every cell:
    each policy name runs under its readings. ``renewal=None`` takes the profile's renewal
    mode; given modes are used as they are (explicit options win over the profile).
    """
    from ..sim.cluster import ClusterSpec
    from ..sim.engine import EngineConfig
    from ..sim.latency import get_latency_model
    from ..sim.policies import make_policy

    def unique(values, what):
        values = list(dict.fromkeys(values))
        if not values:
            raise ValueError(f"no {what} given")
        return values

    policies, traces, racks = unique(policies, "policies"), unique(traces, "traces"), unique(racks, "racks")
    seeds, lease_s = unique(seeds, "seeds"), unique((float(x) for x in lease_s), "leases")
    from ..sim.profiles import check_profile, profile_renewal

    if not isinstance(profile, str):
        raise ValueError(f"a sweep takes a profile name, got {profile!r}")
    check_profile(profile)
    renewal = unique([profile_renewal(profile)] if renewal is None else renewal, "renewal modes")
    restart_overhead_s = unique((float(x) for x in restart_overhead_s), "restart overheads")
    oversubscription = unique((float(x) for x in oversubscription), "oversubscriptions")
    for name in policies:
        if not isinstance(name, str):
            raise ValueError(f"a sweep takes policy names, got {name!r}")
        make_policy(name)
    get_latency_model(latency)
    for r in racks:
        ClusterSpec(r, machines_per_rack, gpus_per_machine)
    for s, lease, mode, restart, x in itertools.product(seeds, lease_s, renewal, restart_overhead_s, oversubscription):
        EngineConfig(
            lease_s=lease, restart_overhead_s=restart, seed=s, renewal=mode, contention=contention, oversubscription=x
        )
    resolved = _resolved_traces(traces)
    return [
        Cell(
            p,
            t,
            int(r),
            int(machines_per_rack),
            int(gpus_per_machine),
            int(s),
            lease,
            restart,
            mode,
            latency,
            profile,
            contention,
            x,
        )
        for p, t, r, s, lease, mode, restart, x in itertools.product(
            policies, resolved, racks, seeds, lease_s, renewal, restart_overhead_s, oversubscription
        )
    ]


def _resolved_traces(traces: Sequence[str]) -> list[str]:
    """Shipped trace names as they are, other names as absolute CSV paths (workers may run in
    another directory), each checked to load (its fit to each cluster is the cell's business)."""
    from ..sim.trace import load_trace, shipped_traces

    shipped = set(shipped_traces())
    resolved = []
    for trace in traces:
        if trace not in shipped:
            trace = str(Path(trace).resolve())
        load_trace(trace)
        resolved.append(trace)
    return resolved


def run_cell(cell: Cell) -> dict:
    """One row of ``results.csv``: the cell's keys and its run's summary."""
    from ..sim.cluster import ClusterSpec
    from ..sim.engine import EngineConfig
    from ..sim.simulate import simulate

    spec = ClusterSpec(cell.racks, cell.machines_per_rack, cell.gpus_per_machine)
    config = EngineConfig(
        lease_s=cell.lease_s,
        restart_overhead_s=cell.restart_overhead_s,
        seed=cell.seed,
        renewal=cell.renewal,
        contention=cell.contention,
        oversubscription=cell.oversubscription,
    )
    policy = cell.policy
    if cell.profile != "default":  # the policy's readings; the renewal is the cell's own
        from ..sim.profiles import make_profile_policy

        policy = make_profile_policy(cell.policy, cell.profile)
    summary = simulate(cell.trace, spec, policy=policy, latency=cell.latency, config=config).summary
    return {**cell.keys(), **{k: summary[k] for k in SUMMARY_KEYS}}


class _Progress:
    """A progress bar on stderr (tqdm, when installed), else one line per finished task."""

    def __init__(self, total: int, enabled: bool, desc: str = "sweep") -> None:
        self.total, self.done, self.start = total, 0, time.perf_counter()
        self.enabled = enabled
        self.bar = None
        if enabled and total:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, desc=desc, unit="run", file=sys.stderr, leave=True)

    def step(self, label: str, ok: bool) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled:
            elapsed = time.perf_counter() - self.start
            print(
                f"[{self.done}/{self.total}] {'done' if ok else 'FAILED'}: {label} ({elapsed:.0f} s elapsed)",
                file=sys.stderr,
                flush=True,
            )

    def note(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class SweepResult:
    """What :func:`sweep` did: ``results`` (every row of ``results.csv``), ``errors`` (the
    failed cells of this run, keys and error), and counts."""

    results: pd.DataFrame
    errors: pd.DataFrame
    ran: int
    skipped: int

    @property
    def failed(self) -> int:
        return len(self.errors)


def read_results(path: str | Path) -> pd.DataFrame:
    """The rows of a sweep's ``results.csv``, every number exactly as computed.

    Numbers are parsed by Python (``int`` for whole-number columns, ``float`` for the others,
    an empty field as NaN): the written text is each float's shortest round-trip form, so this
    gives back the very same bits, whatever pandas' own float parser does. A torn last line (a
    run killed while writing it) is dropped from the file.
    """
    path = Path(path)
    text = path.read_bytes()
    if text and not text.endswith(b"\n"):
        text = text[: text.rfind(b"\n") + 1]
        with naming(path):
            path.write_bytes(text)
    if not text.strip():
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    if tuple(raw.columns) != RESULT_COLUMNS:
        raise ValueError(
            f"{path}: its columns are not those of this version's sweep results; give another --out or remove it"
        )
    columns = {}
    for name in RESULT_COLUMNS:
        values = raw[name].tolist()
        if name in _KEY_TYPES:
            columns[name] = [_KEY_TYPES[name](v) for v in values]
        elif all(v.lstrip("-").isdigit() for v in values):
            columns[name] = [int(v) for v in values]
        else:
            columns[name] = [float(v) if v else math.nan for v in values]
    return pd.DataFrame(pd.DataFrame(columns).to_dict("records"), columns=list(RESULT_COLUMNS))


def _csv_rows(rows: list[dict], header: bool) -> str:
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS)).to_csv(index=False, header=header, lineterminator="\n")


def _append(path: Path, text: str) -> None:
    """Append in one write: a row is in the file whole or not at all (but for a disk that
    fills up in the middle of it: :func:`read_results` drops a torn last line)."""
    data = text.encode("utf-8")
    with naming(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while data:
                # A short write happens only as the disk fills; the next call then fails.
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)


def _replace(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through a temporary file beside it, then rename it into place; an
    ``OSError`` names ``path`` (:class:`~dallygym.sim.metrics.OutputError`)."""
    tmp = path.with_name(path.name + ".tmp")
    with naming(path):
        try:
            write(tmp)
            os.replace(tmp, path)
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise


def sweep(
    cells: Iterable[Cell],
    out: str | Path,
    backend: Backend | None = None,
    progress: bool = True,
    run: Callable[[Cell], dict] = run_cell,
) -> SweepResult:
    """Run the cells not yet in ``out/results.csv`` on ``backend`` (default: one local process).

    Each finished cell is appended to ``results.csv`` at once (a sweep killed half-way keeps
    what it finished, and a re-run skips those cells). At the end the file is rewritten in a
    fixed order -- this sweep's cells in their order, then any other rows the file had -- so it
    is byte for byte the same whatever backend ran it and however often it was resumed; with
    pyarrow installed, ``results.parquet`` holds the same table. Failed cells are not in
    ``results.csv`` (a re-run tries them again): ``errors.csv`` lists them with their keys and
    error, each also printed on stderr as it fails.
    """
    cells = list(dict.fromkeys(cells))
    backend = backend or LocalBackend(1)
    out = Path(out)
    with naming(out):
        out.mkdir(parents=True, exist_ok=True)
    results_path, errors_path = out / "results.csv", out / "errors.csv"

    previous = read_results(results_path) if results_path.exists() else pd.DataFrame(columns=list(RESULT_COLUMNS))
    rows: dict[tuple, dict] = {}
    for record in previous.to_dict("records"):
        rows[_key_tuple(record)] = record
    todo = [c for c in cells if _key_tuple(c.keys()) not in rows]
    skipped = len(cells) - len(todo)
    if not results_path.exists() or previous.empty:
        _replace(results_path, lambda p: p.write_text(_csv_rows([], header=True)))

    bar = _Progress(len(todo), progress)
    if skipped:
        bar.note(f"dallygym sweep: {skipped} of {len(cells)} cells already in {results_path}, skipped")
    errors = []
    try:
        for index, ok, value in backend.imap_unordered(run, todo):
            cell = todo[index]
            if ok:
                rows[_key_tuple(value)] = value
                _append(results_path, _csv_rows([value], header=False))
            else:
                errors.append({**cell.keys(), "error": value.error})
                bar.note(f"dallygym: cell failed: {cell.label()}: {value.error}")
            bar.step(cell.label(), ok)
    finally:
        bar.close()

    order = [_key_tuple(c.keys()) for c in cells]
    in_sweep = set(order)
    ordered = [rows[k] for k in order if k in rows] + [r for k, r in rows.items() if k not in in_sweep]
    final = pd.DataFrame(ordered, columns=list(RESULT_COLUMNS))
    _replace(results_path, lambda p: p.write_text(_csv_rows(ordered, header=True)))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        _replace(out / "results.parquet", lambda p: final.to_parquet(p, index=False))
    error_frame = pd.DataFrame(errors, columns=list(ERROR_COLUMNS))
    if errors:
        position = {k: i for i, k in enumerate(order)}
        error_frame = error_frame.iloc[sorted(range(len(errors)), key=lambda i: position[_key_tuple(errors[i])])]
        _replace(errors_path, lambda p: error_frame.to_csv(p, index=False, lineterminator="\n"))
    elif errors_path.exists():
        with naming(errors_path):
            errors_path.unlink()  # it described an earlier run's failures
    return SweepResult(final, error_frame.reset_index(drop=True), ran=len(todo), skipped=skipped)
