"""The speed factors a latency model has given, shared by the runs of that model."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from .. import kernels

if TYPE_CHECKING:
    pass


class SpeedTables:
    """The speed factors asked of one latency model so far, shared by the runs that use the
    same model object (an environment's episodes): a latency model is a pure function of
    (model, shape) (see :class:`~dallygym.sim.latency.LatencyModel`), and a run that starts knowing
    them makes its placements compiled from its first pass. Models have ids here (``ids``,
    by name), the same in every run.

    ``cache[(id, shape)]`` is every factor; the compiled passes read one-machine placements
    from ``machine[id, g]`` (NaN: not asked yet) and the others from the shape table: entry e
    is model ``rows[e, 0]`` on the shape whose kernels.shape_code is
    ``seq[rows[e, 1]:][:rows[e, 2]]``, factor ``speed[e]``, the shape itself ``shapes[e]``,
    found through the hash index ``slots`` (kernels.index_shapes). Entries only grow, and
    stay where they are: a run may keep an entry's number.
    """

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.cache: dict[tuple[int, tuple], float] = {}
        self.machine = np.full((4, 9), np.nan)
        self.shapes: list = []
        self.rows = np.zeros((16, 3), dtype=np.int64)
        self.seq = np.zeros(64, dtype=np.int64)
        self.speed = np.zeros(16)
        self.seq_used = 0
        self.slots = np.zeros(32, dtype=np.int64)

    def model_ids(self, names, gpus_per_machine: int) -> list[int]:
        """The ids of models ``names`` (new ones added), with room in ``machine`` for
        placements of up to ``gpus_per_machine`` GPUs."""
        for name in names:
            self.ids.setdefault(name, len(self.ids))
        rows, cols = self.machine.shape
        new_rows = rows if len(self.ids) <= rows else max(len(self.ids), 2 * rows)
        new_cols = max(cols, gpus_per_machine + 1)
        if (new_rows, new_cols) != (rows, cols):
            grown = np.full((new_rows, new_cols), np.nan)
            grown[:rows, :cols] = self.machine
            self.machine = grown
        return [self.ids[name] for name in names]

    def add(self, model: int, shape: tuple, s: float) -> None:
        """Enter the factor ``s`` of model id ``model`` on ``shape`` (a new one)."""
        self.cache[(model, shape)] = s
        if len(shape) == 1 and len(shape[0]) == 1:  # one machine
            self.machine[model, shape[0][0]] = s
            return
        code = [c for rack in shape for c in (*rack, 0)]  # as kernels.shape_code
        e = len(self.shapes)
        if e == len(self.rows):
            self.rows = np.concatenate((self.rows, np.zeros_like(self.rows)))
            self.speed = np.concatenate((self.speed, np.zeros_like(self.speed)))
        lo, end = self.seq_used, self.seq_used + len(code)
        if end > len(self.seq):
            self.seq = np.concatenate((self.seq, np.zeros(max(len(self.seq), len(code)), dtype=np.int64)))
        self.seq[lo:end] = code
        self.rows[e] = (model, lo, len(code))
        self.speed[e] = s
        self.seq_used = end
        self.shapes.append(shape)
        if 2 * (e + 1) > len(self.slots):  # at most half full: index them all again, twice as wide
            self.slots = np.zeros(2 * len(self.slots), dtype=np.int64)
            kernels.index_shapes(self.slots, self.rows, self.seq, 0, e + 1)
        else:
            kernels.index_shapes(self.slots, self.rows, self.seq, e, e + 1)


#: The speed tables of each latency model object (:class:`SpeedTables`).
_SPEED_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def speed_tables(latency) -> SpeedTables:
    """``latency``'s shared :class:`SpeedTables` (a new one for a model that cannot be weakly
    referenced: each run its own)."""
    try:
        tables = _SPEED_TABLES.get(latency)
        if tables is None:
            tables = _SPEED_TABLES[latency] = SpeedTables()
        return tables
    except TypeError:
        return SpeedTables()
