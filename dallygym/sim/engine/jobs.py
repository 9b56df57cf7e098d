"""The job table's parts: a trace's columns as the engine reads them (:class:`TraceArrays`), the
jobs in one state (:class:`JobSet`), and each job's GPUs (:class:`JobGpus`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import kernels

if TYPE_CHECKING:
    pass


class JobSet:
    """The jobs in one state, handed out as a sorted int64 array of job indices.

    An event adds or removes a few members while the set may hold thousands, and the trace
    far more jobs than that. So changes are noted and applied when the array is next asked
    for: new members are merged in, and members that left are found by reading their state
    -- a few numpy calls whose cost grows with the set, not with the trace (scanning the whole
    state array at every event made long runs quadratic). An array handed out is never
    changed afterwards (a change makes a new one).

    The compiled event loop keeps the set in a row of its own (:meth:`lend`): the members are
    then copied out of that row only when asked for, and the loop is given them again only if
    they changed since (:meth:`lent`).
    """

    __slots__ = ("_added", "_array", "_code", "_compiled", "_left", "_n", "_row", "_state")

    def __init__(self, state: np.ndarray, code: int, compiled: bool = False) -> None:
        self._state = state  # the engine's per-job states (read only here)
        self._code = code
        self._compiled = compiled  # merge with kernels.job_set
        self._array = np.flatnonzero(state == code)
        self._added: list[int] = []
        self._left = False
        self._row = None  # the compiled loop's row holding the members (lend), if it still does
        self._n = 0

    def add(self, j: int) -> None:
        """``j`` has just entered the state."""
        self._added.append(j)

    def remove(self, j: int) -> None:
        """``j`` has just left the state."""
        self._left = True

    def load(self, members: np.ndarray) -> None:
        """The members are now ``members`` (increasing; kept, not copied)."""
        self._array = members
        self._added = []
        self._left = False
        self._row = None

    def lend(self, row: np.ndarray, n: int) -> None:
        """The members are now the first ``n`` of ``row`` (increasing), which the compiled loop
        keeps and only it writes: copied out when first asked for."""
        self._array = None
        self._added = []
        self._left = False
        self._row = row
        self._n = n

    def lent(self) -> bool:
        """Whether the row of the last :meth:`lend` still holds exactly the members."""
        return self._row is not None and not self._added and not self._left

    def array(self) -> np.ndarray:
        """The members in increasing order."""
        arr = self._array
        if arr is None:
            arr = self._array = self._row[: self._n].copy()
        if self._compiled:
            if self._added or self._left:
                arr = self._array = kernels.job_set(
                    arr, np.array(self._added, dtype=np.int64), self._state, self._code, self._left
                )
                self._added = []
                self._left = False
                self._row = None
            return arr
        if self._added:
            arr = np.concatenate((arr, self._added))
            arr.sort(kind="stable")
        if self._left:
            arr = arr[self._state[arr] == self._code]
            if self._added and arr.size > 1:  # a job that left and came back is listed twice
                first = np.ones(arr.size, dtype=bool)
                np.not_equal(arr[1:], arr[:-1], out=first[1:])
                arr = arr[first]
        if self._added or self._left:
            self._array = arr
            self._added = []
            self._left = False
            self._row = None
        return arr

    def __getstate__(self) -> dict:
        """The members as a plain array (pending changes applied; no lent row: a copy of the
        compiled loop's row would no longer be that row)."""
        arr = self.array()
        return {"_state": self._state, "_code": self._code, "_compiled": self._compiled, "_array": arr}

    def __setstate__(self, state: dict) -> None:
        self._state = state["_state"]
        self._code = state["_code"]
        self._compiled = state["_compiled"]
        self.load(state["_array"])
        self._n = 0


def _in_arrival_order(trace: pd.DataFrame) -> bool:
    """Whether the rows of ``trace`` are already in (arrival_s, job_id) order (a stable sort on
    those keys would leave them as they are)."""
    if len(trace) < 2:
        return True
    arrival = trace["arrival_s"].to_numpy()
    step = np.diff(arrival)
    if not (step >= 0).all():  # (a NaN compares false: such a trace is sorted as before)
        return False
    ties = step == 0
    return not ties.any() or bool((np.diff(trace["job_id"].to_numpy())[ties] >= 0).all())


class TraceArrays:
    """A trace's columns as an :class:`Engine` reads them: in (arrival_s, job_id) order, copied
    out of the frame once and read-only, with the Python lists its per-offer loop reads.

    An Engine built from a frame makes one; a caller that runs the same trace many times (an
    environment's fixed trace, reset after reset) makes it once and passes it instead of the
    frame, and every engine shares it (none writes to it)."""

    __slots__ = (
        "arrival_s",
        "ideal_s",
        "iter_time_list",
        "iter_time_s",
        "job_id",
        "job_id_list",
        "model",
        "model_index",
        "model_index_list",
        "model_names",
        "n",
        "num_gpus",
        "num_gpus_list",
        "total_iterations",
        "total_iterations_list",
    )

    def __init__(self, trace: pd.DataFrame) -> None:
        frame = trace if _in_arrival_order(trace) else trace.sort_values(["arrival_s", "job_id"], kind="stable")
        n = len(frame)
        if n == 0:
            raise ValueError("the trace has no jobs")
        self.n = n
        # (Copies: the arrays never share the caller's frame.)
        self.job_id = frame["job_id"].to_numpy(dtype=np.int64, copy=True)
        self.arrival_s = frame["arrival_s"].to_numpy(dtype=np.float64, copy=True)
        self.num_gpus = frame["num_gpus"].to_numpy(dtype=np.int64, copy=True)
        self.model = frame["model"].to_numpy(dtype=object, copy=True)
        names, self.model_index = np.unique(self.model.astype(str), return_inverse=True)
        self.model_names: tuple[str, ...] = tuple(str(m) for m in names)
        self.total_iterations = frame["total_iterations"].to_numpy(dtype=np.float64, copy=True)
        self.iter_time_s = frame["iter_time_s"].to_numpy(dtype=np.float64, copy=True)
        self.ideal_s = self.total_iterations * self.iter_time_s
        for name in (
            "job_id",
            "arrival_s",
            "num_gpus",
            "model",
            "model_index",
            "total_iterations",
            "iter_time_s",
            "ideal_s",
        ):
            getattr(self, name).flags.writeable = False
        self.num_gpus_list: list[int] = self.num_gpus.tolist()
        self.job_id_list: list[int] = self.job_id.tolist()
        self.model_index_list: list[int] = self.model_index.tolist()
        self.iter_time_list: list[float] = self.iter_time_s.tolist()
        self.total_iterations_list: list[float] = self.total_iterations.tolist()

    def __repr__(self) -> str:
        return f"TraceArrays(n={self.n}, models={list(self.model_names)})"


class JobGpus:
    """Each job's GPUs, read from the engine's GPU store (``num_gpus[j]`` slots from
    ``offsets[j]``: its current GPUs while it holds a placement, its last ones after): item
    ``j`` is a new array of them, or None while ``flags[j] < 0`` -- the job's tier for the
    GPUs it holds now (-1 unless it holds a placement), its last tier for the GPUs it held
    last (-1 until its first placement). Read only; the store is the one record."""

    __slots__ = ("_flags", "_num_gpus", "_offsets", "_store")

    def __init__(self, store: np.ndarray, offsets: list[int], num_gpus: list[int], flags: np.ndarray) -> None:
        self._store, self._offsets, self._num_gpus, self._flags = store, offsets, num_gpus, flags

    def __len__(self) -> int:
        return self._flags.size

    def __getitem__(self, j: int) -> np.ndarray | None:
        if self._flags.item(j) < 0:  # (an index out of range raises IndexError here)
            return None
        lo = self._offsets[j]
        return self._store[lo : lo + self._num_gpus[j]].copy()

    def __iter__(self):
        return (self[j] for j in range(len(self)))
