"""Cluster topology, free-GPU bookkeeping and placement search (SPEC §1).

A cluster is ``racks x machines_per_rack x gpus_per_machine`` homogeneous GPUs. GPU ids run
rack-major: ``gpu = (rack * machines_per_rack + machine) * gpus_per_machine + slot``, and
machine ids likewise (``machine_id = rack * machines_per_rack + machine``).

The **tier** of a placement is ``MACHINE`` when all its GPUs are on one machine, ``RACK`` when
they are on one rack (over more than one machine) and ``NETWORK`` otherwise. The **shape** of a
placement -- per rack, the per-machine GPU counts, each sorted in decreasing order, racks sorted
likewise -- is all a latency model may depend on.

:class:`ClusterState` keeps the free GPUs as numpy counters per machine and per rack, so that
"can a demand of g GPUs fit on one machine / one rack / anywhere" costs a ``max`` over a small
array, and finds deterministic best-fit placements at each tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

import numpy as np

from . import kernels

#: Shape of a placement: per rack (sorted, largest first), the per-machine GPU counts (sorted,
#: largest first). Example: 8 GPUs as 4 + 4 on two machines of one rack is ``((4, 4),)``.
Shape = tuple[tuple[int, ...], ...]


class Tier(IntEnum):
    """Network tier of a placement; lower is more consolidated."""

    MACHINE = 0
    RACK = 1
    NETWORK = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class ClusterError(ValueError):
    """An impossible cluster specification, or a placement request it cannot serve."""


#: Most GPUs on one machine. Real servers hold 8 or 16 accelerators; 1,024 leaves room for
#: made-up shapes (one machine standing for a whole pod) while keeping the per-machine work of
#: a placement search (a sort over a machine's slots) small.
MAX_GPUS_PER_MACHINE = 1024
#: Most machines in a cluster. The largest cluster the project benchmarks is 64 racks x 8
#: machines (512 machines); 4,096 is eight times that. The engine keeps several arrays per
#: machine and scans them on every scheduling pass, so this bounds the cost of a pass.
MAX_MACHINES = 4096
#: Most GPUs in a cluster. The largest benchmarked cluster has 4,096 GPUs; a cluster state
#: keeps two int64 arrays per GPU (owner and mark), so 2**20 GPUs cost 16 MiB, and a pass that
#: scans every GPU stays well under a second. Beyond this a typo (say, ``gpus_per_machine=10**9``)
#: would spend minutes allocating before failing with MemoryError.
MAX_GPUS = 1_048_576


def _check_count(name: str, value: object, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ClusterError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise ClusterError(f"{name} must be at least 1, got {value}")
    if value > limit:
        raise ClusterError(f"{name} must be at most {limit:,}, got {value:,}")
    return int(value)


@dataclass(frozen=True)
class ClusterSpec:
    """Size of a homogeneous hierarchical GPU cluster.

    The paper's clusters have ``racks`` in {2, 4, 8, 16}, 8 machines per rack and 8 GPUs per
    machine (SPEC §1).

    Sizes are whole numbers of at least 1, and bounded so that a mistyped size fails at once
    with :class:`ClusterError` rather than after minutes of allocation: at most
    :data:`MAX_GPUS_PER_MACHINE` (1,024) GPUs per machine, :data:`MAX_MACHINES` (4,096)
    machines in all (``racks x machines_per_rack``) and :data:`MAX_GPUS` (1,048,576) GPUs in
    all. The largest cluster the project benchmarks (64 racks x 8 machines x 8 GPUs: 512
    machines, 4,096 GPUs) is far inside these bounds.
    """

    racks: int
    machines_per_rack: int = 8
    gpus_per_machine: int = 8

    def __post_init__(self) -> None:
        limits = {"racks": MAX_MACHINES, "machines_per_rack": MAX_MACHINES, "gpus_per_machine": MAX_GPUS_PER_MACHINE}
        for name, limit in limits.items():
            object.__setattr__(self, name, _check_count(name, getattr(self, name), limit))
        # Each count alone is in range; their products may still be too large.
        machines = self.racks * self.machines_per_rack
        if machines > MAX_MACHINES:
            raise ClusterError(
                f"racks x machines_per_rack must be at most {MAX_MACHINES:,} machines, got "
                f"{self.racks:,} x {self.machines_per_rack:,} = {machines:,}"
            )
        gpus = machines * self.gpus_per_machine
        if gpus > MAX_GPUS:
            raise ClusterError(
                f"the cluster must have at most {MAX_GPUS:,} GPUs, got {self.racks:,} racks x "
                f"{self.machines_per_rack:,} machines x {self.gpus_per_machine:,} GPUs = {gpus:,}"
            )

    @property
    def num_machines(self) -> int:
        return self.racks * self.machines_per_rack

    @property
    def gpus_per_rack(self) -> int:
        return self.machines_per_rack * self.gpus_per_machine

    @property
    def num_gpus(self) -> int:
        return self.racks * self.gpus_per_rack

    def best_possible_tier(self, num_gpus: int) -> Tier:
        """The most consolidated tier a job of ``num_gpus`` GPUs can ever have here."""
        if num_gpus > self.num_gpus:
            raise ClusterError(f"a job of {num_gpus} GPUs is larger than the cluster ({self.num_gpus} GPUs)")
        if num_gpus <= self.gpus_per_machine:
            return Tier.MACHINE
        if num_gpus <= self.gpus_per_rack:
            return Tier.RACK
        return Tier.NETWORK

    def gpu_location(self, gpu: int) -> tuple[int, int, int]:
        """``(rack, machine within rack, slot)`` of a GPU id."""
        if not 0 <= gpu < self.num_gpus:
            raise ClusterError(f"GPU id {gpu} out of range 0..{self.num_gpus - 1}")
        machine, slot = divmod(int(gpu), self.gpus_per_machine)
        rack, local = divmod(machine, self.machines_per_rack)
        return rack, local, slot

    @cached_property
    def machine_of_gpu(self) -> np.ndarray:
        """Machine id of every GPU id (int64 array of length ``num_gpus``)."""
        return np.arange(self.num_gpus, dtype=np.int64) // self.gpus_per_machine

    @cached_property
    def rack_of_machine(self) -> np.ndarray:
        """Rack id of every machine id."""
        return np.arange(self.num_machines, dtype=np.int64) // self.machines_per_rack

    @cached_property
    def rack_of_gpu(self) -> np.ndarray:
        """Rack id of every GPU id."""
        return np.arange(self.num_gpus, dtype=np.int64) // self.gpus_per_rack

    def shape_of(self, gpus: np.ndarray) -> Shape:
        """Canonical shape of a placement given as an array of GPU ids."""
        ids = np.asarray(gpus, dtype=np.int64).reshape(-1)
        # Per rack, the counts of the machines used (a placement touches a few machines,
        # whatever the size of the cluster).
        racks, counts, bad = kernels.machine_counts(ids, self.gpus_per_machine, self.machines_per_rack, self.num_gpus)
        if bad >= 0:
            raise ClusterError(f"GPU id {ids.item(bad)} out of range 0..{self.num_gpus - 1}")
        per_rack: dict[int, list[int]] = {}
        for rack, count in zip(racks.tolist(), counts.tolist()):
            per_rack.setdefault(rack, []).append(count)
        return canonical_shape(per_rack.values())


def canonical_shape(per_rack_counts) -> Shape:
    """Sort per-machine counts within each rack and the racks themselves, largest first."""
    racks = [tuple(sorted((int(c) for c in counts if c > 0), reverse=True)) for counts in per_rack_counts]
    return tuple(sorted((r for r in racks if r), reverse=True))


def tier_of_shape(shape: Shape) -> Tier:
    """Tier of a placement shape: one machine, one rack, or the network."""
    if len(shape) > 1:
        return Tier.NETWORK
    if len(shape) == 1 and len(shape[0]) > 1:
        return Tier.RACK
    return Tier.MACHINE


_IDLE = kernels.IDLE  # mark of a free GPU that nobody held at the last round boundary (one value for both paths)
_HIDDEN = -2  # owner of a marked free GPU while an upgrade offer may not take it (hide_marked)
_BIG = int(np.iinfo(np.int64).max)
_largest = np.maximum.reduce  # ndarray.max() without its Python-level wrapper (hot paths)


class ClusterState:
    """Which GPU is held by which job, with free counters per machine and per rack.

    ``owner[gpu]`` is the job index holding the GPU, or -1. ``free_per_machine`` and
    ``free_per_rack`` count free GPUs; ``free_total`` is their sum.

    At a round boundary the engine frees the GPUs of every job whose lease expired but
    *marks* them with the job's visiting rank (:meth:`mark_reclaimable`). A placement then
    prefers unmarked (idle) GPUs, and among marked ones those of the job visited last (the
    lowest priority), so a higher-priority job displaces as few and as low-priority jobs as it
    can. A job preempted at its turn gives up what it still had: those GPUs lose their mark
    (:meth:`unmark`), as taking them displaces nobody. ``idle_per_machine`` counts the free,
    unmarked GPUs.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.owner = np.full(spec.num_gpus, -1, dtype=np.int64)
        self.mark = np.full(spec.num_gpus, _IDLE, dtype=np.int64)
        self.free_per_machine = np.full(spec.num_machines, spec.gpus_per_machine, dtype=np.int64)
        self.idle_per_machine = self.free_per_machine.copy()
        self.free_per_rack = np.full(spec.racks, spec.gpus_per_rack, dtype=np.int64)
        # The five arrays are views of one buffer (kernels.cluster_views), so that a compiled
        # kernel takes the cluster as one argument.
        self.buffer = np.concatenate(
            (self.owner, self.mark, self.free_per_machine, self.idle_per_machine, self.free_per_rack)
        )
        self._bind()
        self.free_total = spec.num_gpus
        #: Bumped on every change of the free GPUs, so derived answers can be cached.
        self.version = 0
        #: True while some free GPU carries a round-boundary mark (see mark_reclaimable).
        self.marks_active = False

    #: The arrays that are views of ``buffer`` (made by :meth:`_bind`, never stored).
    _VIEWS = ("owner", "mark", "free_per_machine", "idle_per_machine", "free_per_rack")

    def _bind(self) -> None:
        """Make ``owner``, ``mark``, ``free_per_machine``, ``idle_per_machine`` and
        ``free_per_rack`` the views of ``buffer`` they are."""
        g, m = self.spec.num_gpus, self.spec.num_machines
        self.owner, self.mark, self.free_per_machine, self.idle_per_machine, self.free_per_rack = (
            self.buffer[:g],
            self.buffer[g : 2 * g],
            self.buffer[2 * g : 2 * g + m],
            self.buffer[2 * g + m : 2 * g + 2 * m],
            self.buffer[2 * g + 2 * m :],
        )

    # --- copies: copy.deepcopy and pickle ----------------------------------------------

    def __getstate__(self) -> dict:
        """The state without the views of ``buffer`` (a copy of a view would be an array of
        its own, no longer the buffer's): :meth:`__setstate__` makes them again."""
        state = self.__dict__.copy()
        for name in self._VIEWS:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bind()

    # --- bookkeeping -------------------------------------------------------------------

    @property
    def used_total(self) -> int:
        return self.spec.num_gpus - self.free_total

    def _single_machine(self, gpus: np.ndarray) -> int:
        """The machine id if all ``gpus`` are on one machine, else -1 (the common case is
        cheap to detect and to book without numpy's unbuffered ``ufunc.at``)."""
        g = self.spec.gpus_per_machine
        if len(gpus) > g:
            return -1
        ids = gpus.tolist()  # at most one machine's worth: a Python loop beats two reductions
        first = ids[0] // g
        for gpu in ids:
            if gpu // g != first:
                return -1
        return first

    def _check_machine(self, gpus: np.ndarray, machine: int | None) -> None:
        """A caller's claim about where ``gpus`` are (see :meth:`allocate`) is true."""
        if machine is not None and machine != self._single_machine(gpus):
            raise ClusterError(f"GPUs {gpus.tolist()} are not all on machine {machine}")

    #: Re-check in :meth:`allocate` that the GPUs are free. Every caller in the engine has
    #: established it already (placements are searched among free GPUs, renewals and policy
    #: placements are checked first), so this is off on the hot path; the tests turn it on.
    check_allocations = False

    #: Use the compiled kernels (:mod:`dallygym.sim.kernels`) where there is one. False: the
    #: Python methods, the reference the tests hold the kernels to (result for result).
    compiled = True

    def allocate(self, job: int, gpus: np.ndarray, machine: int | None = None) -> None:
        """Give free GPUs to a job. ``machine``: if the caller knows, the machine holding all
        of them, or -1 when they span machines; None: found here."""
        if self.check_allocations:
            owner = self.owner[gpus]
            if (owner != -1).any():
                raise ClusterError(f"GPUs {gpus[owner != -1].tolist()} are already held")
            self._check_machine(gpus, machine)
        n = len(gpus)
        if n == 1:  # the most common job: scalar indexing costs far less than fancy indexing
            gpu = gpus.item(0)
            self.owner[gpu] = job
            machine = gpu // self.spec.gpus_per_machine
            self.free_per_machine[machine] -= 1
            self.free_per_rack[machine // self.spec.machines_per_rack] -= 1
            if self.mark.item(gpu) == _IDLE:
                self.idle_per_machine[machine] -= 1
            else:
                self.mark[gpu] = _IDLE
            self.free_total -= 1
            self.version += 1
            return
        if self.compiled:
            kernels.allocate(
                self.owner,
                self.mark,
                self.free_per_machine,
                self.idle_per_machine,
                self.free_per_rack,
                gpus,
                job,
                self.spec.machines_per_rack,
                self.spec.gpus_per_machine,
            )
            self.free_total -= n
            self.version += 1
            return
        self.owner[gpus] = job
        if machine is None:
            machine = self._single_machine(gpus)
        if machine >= 0:
            self.free_per_machine[machine] -= n
            self.free_per_rack[machine // self.spec.machines_per_rack] -= n
            if self.marks_active:
                self.idle_per_machine[machine] -= np.count_nonzero(self.mark[gpus] == _IDLE)
                self.mark[gpus] = _IDLE
            else:
                self.idle_per_machine[machine] -= n
        else:
            spec = self.spec
            machines = spec.machine_of_gpu[gpus]
            self.free_per_machine -= np.bincount(machines, minlength=spec.num_machines)
            idle = self.mark[gpus] == _IDLE
            self.idle_per_machine -= np.bincount(machines[idle], minlength=spec.num_machines)
            self.mark[gpus] = _IDLE
            self.free_per_rack -= np.bincount(spec.rack_of_gpu[gpus], minlength=spec.racks)
        self.free_total -= n
        self.version += 1

    def release(self, gpus: np.ndarray, machine: int | None = None) -> None:
        """Free a job's GPUs (unmarked); ``machine`` as for :meth:`allocate`."""
        if self.check_allocations:
            self._check_machine(gpus, machine)
        n = len(gpus)
        if self.compiled:
            kernels.release(
                self.owner,
                self.free_per_machine,
                self.idle_per_machine,
                self.free_per_rack,
                gpus,
                self.spec.machines_per_rack,
                self.spec.gpus_per_machine,
            )
            self.free_total += n
            self.version += 1
            return
        self.owner[gpus] = -1
        if machine is None:
            machine = self._single_machine(gpus)
        if machine >= 0:
            self.free_per_machine[machine] += n
            self.idle_per_machine[machine] += n
            self.free_per_rack[machine // self.spec.machines_per_rack] += n
        else:
            spec = self.spec
            per_machine = np.bincount(spec.machine_of_gpu[gpus], minlength=spec.num_machines)
            self.free_per_machine += per_machine
            self.idle_per_machine += per_machine
            self.free_per_rack += np.bincount(spec.rack_of_gpu[gpus], minlength=spec.racks)
        self.free_total += n
        self.version += 1

    def mark_reclaimable(self, gpus: np.ndarray, ranks: np.ndarray | int) -> None:
        """Free GPUs whose holder's lease expired; ``ranks`` is each holder's visiting order
        in the current pass (higher = visited later = lower priority)."""
        if len(gpus) == 0:
            return
        self.release(gpus)
        self.mark[gpus] = ranks
        self.idle_per_machine -= np.bincount(self.spec.machine_of_gpu[gpus], minlength=self.spec.num_machines)
        self.marks_active = True

    def renew_marked(self, gpus: np.ndarray, owners: np.ndarray) -> None:
        """Give marked free GPUs back to the jobs whose lease marked them (``owners[i]`` holds
        ``gpus[i]``): several renewals in place at once, the same as an :meth:`allocate` of
        each job's GPUs. Marked GPUs are not idle, so the idle counts stay."""
        if gpus.size == 0:
            return
        self.owner[gpus] = owners
        self.mark[gpus] = _IDLE
        self._shift_free(gpus, -1)

    def unmark(self, gpus: np.ndarray) -> None:
        """Those of ``gpus`` that are free and marked count as idle again: their holder was
        preempted at its turn, so taking them displaces nobody."""
        if not self.marks_active:
            return
        if self.compiled:
            kernels.unmark(self.owner, self.mark, self.idle_per_machine, gpus, self.spec.gpus_per_machine)
            return
        stale = gpus[(self.owner[gpus] == -1) & (self.mark[gpus] != _IDLE)]
        if stale.size:
            self.mark[stale] = _IDLE
            self.idle_per_machine += np.bincount(self.spec.machine_of_gpu[stale], minlength=self.spec.num_machines)

    def clear_marks(self) -> None:
        """End of a round-boundary pass: every free GPU counts as idle again."""
        if self.marks_active:
            self.mark[:] = _IDLE
            self.idle_per_machine[:] = self.free_per_machine
            self.marks_active = False

    def all_free(self, gpus: np.ndarray) -> bool:
        # Owners are job indices >= 0, free is -1. (GPUs hidden by hide_marked, -2, pass this
        # test; the engine never asks it about them -- see Engine._check_placement.)
        if len(gpus) == 1:
            return self.owner.item(gpus.item(0)) < 0
        return bool(_largest(self.owner[gpus]) < 0)

    def hide_marked(self) -> np.ndarray:
        """Take the free GPUs that carry a round-boundary mark out of the free counts, so that
        offers and placements see idle GPUs only (a renewal upgrade displaces nobody); return
        them for :meth:`unhide`. Their marks are kept."""
        if not self.marks_active:
            return np.empty(0, dtype=np.int64)
        gpus = np.flatnonzero((self.owner == -1) & (self.mark != _IDLE))
        if gpus.size:
            self.owner[gpus] = _HIDDEN
            self._shift_free(gpus, -1)
        return gpus

    def _shift_free(self, gpus: np.ndarray, sign: int) -> None:
        """Add ``sign`` per GPU in ``gpus`` to the free counters (idle counts untouched)."""
        spec = self.spec
        per_machine = np.bincount(spec.machine_of_gpu[gpus], minlength=spec.num_machines)
        self.free_per_machine += sign * per_machine
        self.free_per_rack += sign * per_machine.reshape(spec.racks, spec.machines_per_rack).sum(axis=1)
        self.free_total += sign * int(gpus.size)
        self.version += 1

    def unhide(self, gpus: np.ndarray) -> None:
        """Undo :meth:`hide_marked`: the GPUs are free again, with their marks."""
        if gpus.size:
            self.owner[gpus] = -1
            self._shift_free(gpus, +1)

    # --- offers ----------------------------------------------------------------------

    def best_available_tier(self, num_gpus: int) -> Tier | None:
        """The most consolidated tier at which ``num_gpus`` GPUs are free now, or None."""
        if num_gpus > self.free_total:
            return None
        if num_gpus <= self.spec.gpus_per_machine and self.free_per_machine.max() >= num_gpus:
            return Tier.MACHINE
        if num_gpus <= self.spec.gpus_per_rack and self.free_per_rack.max() >= num_gpus:
            return Tier.RACK
        return Tier.NETWORK

    # --- placement search --------------------------------------------------------------

    def place(self, num_gpus: int, tier: Tier) -> np.ndarray:
        """Deterministic placement of ``num_gpus`` free GPUs at exactly ``tier``.

        MACHINE: best fit -- the machine with the fewest free GPUs that still fits (after
        preferring machines that need no reclaimed GPUs), ties by lowest id.
        RACK: the best-fit rack likewise; inside it, the fewest machines: the fullest-free
        machines whole, then the remainder on the machine with the fewest free GPUs that fits
        (ties: the machine with more idle GPUs, then the lowest id).
        NETWORK: the same rule one level up (fewest racks, remainder on the best-fit rack),
        each rack's share placed by the RACK rule.

        A RACK placement always spans at least two machines and a NETWORK placement at least
        two racks, so the tier of the result is the tier asked for.
        """
        spec = self.spec
        if self.compiled and num_gpus >= 1 and 0 <= tier <= 2:
            gpus = kernels.place(
                self.owner,
                self.mark,
                self.free_per_machine,
                self.idle_per_machine,
                self.free_per_rack,
                spec.racks,
                spec.machines_per_rack,
                spec.gpus_per_machine,
                num_gpus,
                int(tier),
                self.marks_active,
            )
            if gpus.size:
                return gpus
            # No such placement: the reference below says why.
        if tier == Tier.MACHINE:
            machine = self._pick_machine(num_gpus)
            if machine < 0:
                raise ClusterError(f"no machine has {num_gpus} free GPUs")
            return self.gpus_on_machine(machine, num_gpus)
        if tier == Tier.RACK:
            if num_gpus < 2:
                raise ClusterError("a rack placement needs at least 2 GPUs")
            idle_per_rack = self._idle_per_rack()
            # A rack placement spans at least two machines, so only racks with free GPUs on
            # two machines qualify (even when one machine could hold the whole job).
            spread = (self.free_per_machine.reshape(spec.racks, spec.machines_per_rack) > 0).sum(axis=1) >= 2
            rack = self._pick_unit(self.free_per_rack, idle_per_rack, num_gpus, np.arange(spec.racks), spread)
            if rack < 0:
                raise ClusterError(f"no rack has {num_gpus} free GPUs")
            return self._spread_in_rack(rack, num_gpus, min_machines=2)
        if tier == Tier.NETWORK:
            if num_gpus > self.free_total:
                raise ClusterError(f"only {self.free_total} GPUs are free, {num_gpus} asked")
            if num_gpus < 2 or self.spec.racks < 2:
                raise ClusterError("a network placement needs 2 GPUs on 2 racks")
            shares = _fewest_units(self.free_per_rack, num_gpus, min_units=2, idle=self._idle_per_rack())
            if shares is None:
                raise ClusterError(f"{num_gpus} free GPUs cannot be spread over 2 racks")
            parts = [self._spread_in_rack(rack, share, min_machines=1) for rack, share in shares]
            return np.concatenate(parts)
        raise ClusterError(f"unknown tier {tier!r}")

    def _idle_per_rack(self) -> np.ndarray:
        return self.idle_per_machine.reshape(self.spec.racks, self.spec.machines_per_rack).sum(axis=1)

    def _pick_machine(self, need: int) -> int:
        """Best-fit machine for ``need`` GPUs, displacing the lowest-priority jobs possible.

        Key: the priority of the highest-priority lease-expired job whose GPUs we would take
        (none is best; otherwise the later it is visited the better), then the number of
        such GPUs, then the fewest free GPUs (best fit), then the lowest id.
        """
        free = self.free_per_machine
        if not self.marks_active:
            # Plain best fit: the fewest free GPUs that still fit, ties to the lowest id.
            masked = np.where(free >= need, free, _BIG)
            best = int(masked.argmin())
            return best if free[best] >= need else -1
        fits = np.flatnonzero(free >= need)
        if fits.size == 0:
            return -1
        idle = self.idle_per_machine[fits]
        spare = fits[idle >= need]
        if spare.size:
            # Machines that need no reclaimed GPU come first (they displace nobody): among
            # them, plain best fit.
            return int(spare[free[spare].argmin()])  # argmin: the first, i.e. lowest id, of ties
        reclaim = need - idle  # > 0 on every candidate now
        g = self.spec.gpus_per_machine
        marks = self.mark.reshape(-1, g)[fits]
        # Marked GPUs are taken highest rank (lowest priority) first; the victim with the
        # highest priority among those taken is the reclaim-th largest mark of the machine.
        desc = -np.sort(-marks, axis=1)
        top_victim = desc[np.arange(fits.size), reclaim - 1]
        order = np.lexsort((fits, free[fits], reclaim, -top_victim))
        return int(fits[order[0]])

    @staticmethod
    def _pick_unit(free: np.ndarray, idle: np.ndarray, need: int, ids: np.ndarray, eligible: np.ndarray) -> int:
        """Best-fit eligible unit: fewest reclaimed GPUs needed, then fewest free, then lowest id."""
        fits = (free >= need) & eligible
        if not fits.any():
            return -1
        cand = ids[fits]
        reclaim = np.maximum(0, need - idle[fits])
        order = np.lexsort((cand, free[fits], reclaim))
        return int(cand[order[0]])

    def gpus_on_machine(self, machine: int, count: int) -> np.ndarray:
        """``count`` free GPUs of one machine: idle ones first, then the lowest-priority marks
        (for policies choosing their own placements, too)."""
        g = self.spec.gpus_per_machine
        base = machine * g
        if not self.marks_active:
            return np.flatnonzero(self.owner[base : base + g] == -1)[:count] + base  # lowest free slots
        # Idle (unmarked) slots first, then the highest mark (visited last), ties by slot.
        # A machine has a handful of slots: sorting Python tuples beats numpy's per-call cost.
        owners = self.owner[base : base + g].tolist()
        marks = self.mark[base : base + g].tolist()
        free = sorted((m != _IDLE, -m, slot) for slot, (o, m) in enumerate(zip(owners, marks)) if o == -1)
        return np.array([slot for _, _, slot in free[:count]], dtype=np.int64) + base

    def _spread_in_rack(self, rack: int, count: int, min_machines: int) -> np.ndarray:
        m = self.spec.machines_per_rack
        first = rack * m
        free = self.free_per_machine[first : first + m]
        idle = self.idle_per_machine[first : first + m]
        shares = _fewest_units(free, count, min_units=min_machines, idle=idle)
        if shares is None:
            raise ClusterError(f"rack {rack} cannot hold {count} GPUs over {min_machines} machines")
        return np.concatenate([self.gpus_on_machine(first + i, c) for i, c in shares])


def _fewest_units(
    free: np.ndarray, need: int, min_units: int, idle: np.ndarray | None = None
) -> list[tuple[int, int]] | None:
    """Split ``need`` over the fewest units (machines or racks) with free capacity ``free``.

    The units with the most free capacity are used whole, largest first; the remainder goes to
    the unit with the fewest free GPUs that can hold it (best fit). Ties go to the unit with the
    most idle GPUs (``idle``: free and unmarked, at a round boundary; default ``free``), so an
    equally good split displaces as few lease-expired jobs as it can, then to the lowest id.
    When ``min_units`` is 2 and one unit could hold everything, the job is split as
    (largest share that leaves the rest on a second unit) -- the most consolidated shape that
    still spans two units. Returns ``[(unit index, count), ...]`` or None if impossible.
    """
    if free.sum() < need:
        return None
    idle = free if idle is None else idle
    order = np.lexsort((np.arange(len(free)), -idle, -free))  # most free first, then most idle, then id
    shares: list[tuple[int, int]] = []
    left = need
    for pos, unit in enumerate(order):
        cap = int(free[unit])
        if cap == 0:
            break
        rest = order[pos + 1 :]
        need_more_units = min_units - len(shares) - 1
        if need_more_units > 0:
            # Leave at least one GPU for each further unit we must still span.
            if len(rest) < need_more_units or free[rest].astype(bool).sum() < need_more_units:
                return None
            take = min(cap, left - need_more_units)
        elif cap >= left:
            take = left
        else:
            take = cap
        if take >= left and need_more_units <= 0:
            # Remainder fits on one unit: choose the best-fit unit among this one and the rest.
            cand = order[pos:]
            fits = cand[free[cand] >= left]
            best = fits[np.lexsort((fits, -idle[fits], free[fits]))[0]]
            shares.append((int(best), left))
            return shares
        shares.append((int(unit), take))
        left -= take
    return None
