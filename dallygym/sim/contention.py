"""Network contention between jobs: the links jobs share, and each job's share of them.

A latency model prices a placement alone (:mod:`dallygym.sim.latency`). Here jobs that cross
the same link slow each other. The links that can be shared are:

- **a machine's link** to its rack (one per machine, the rack tier's bandwidth, 200 GB/s in
  the reference): used by every job spread over more than one machine, on each of its
  machines;
- **a rack's uplink** to the spine (one per rack): used by every job spread over more than one
  rack, on each of its racks. Its capacity is the rack's machines' link bandwidth divided by
  the **oversubscription** ``X``: 8 machines x 200 GB/s / ``X`` (1,600 GB/s at 1:1, 400 GB/s
  at 4:1).

Model ``"fair-share"``: while a job communicates it asks each of its links for the rate it would
get alone (:meth:`~dallygym.sim.latency.DallyPaperLatency.link_rates`). All jobs on a link are
taken to communicate at the same time (steady-state shares: no packet-level effects, no
interleaving of the jobs' communication phases, so a worst case for jobs whose phases would
interleave). Each job gets a **share** ``f`` in (0, 1] of its alone rate on every one of its
links, the max-min fair allocation found by progressive filling (:func:`fair_shares`): all
shares rise together; when a link is full, the shares of the jobs on it stop rising; at 1 a job
has all it asks. A job's bandwidth term is then divided by ``f``
(:meth:`~dallygym.sim.latency.DallyPaperLatency.shared_speed_factor`); hop latencies and
traffic inside a machine are unchanged.

Properties (tested): a job alone on its links gets ``f = 1`` and runs exactly as without
contention whenever its alone rate fits the link (always for machine links; for uplinks when
the capacity is at least one job's rate, e.g. 8 machines per rack at ``X`` <= 8 for the
reference's 200 GB/s); no link carries more than its capacity; every job whose share is below 1
has a full link on which no job has more; the smallest share never rises when a job is added or
a capacity falls (``X`` grows), and on one shared link no share does. A single job's share can
rise when another job is added elsewhere: max-min fairness gives it what a slowed competitor no
longer takes. ``"none"`` (the default) is the simulator without contention.

Model ``"interleaved"``, the other reading of "while the job communicates": the jobs' communication
phases interleave as well as they can, so a job asks each link, on average, its alone rate times
its **duty**, the share of its iteration (alone) that it spends sending bytes
(:meth:`~dallygym.sim.latency.DallyPaperLatency.link_duty`); the same progressive filling shares
the links out on those average demands. Jobs whose duties add up to no more than a link's
capacity do not slow each other; ``"fair-share"`` is the worst case of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import kernels
from .cluster import ClusterSpec

#: The contention models: ``"none"`` (each placement priced alone), ``"fair-share"`` (jobs on a
#: link communicate at once: each asks its alone rate) and ``"interleaved"`` (their communication
#: phases interleave: each asks its alone rate times the share of its iteration it spends sending).
CONTENTION_MODES = ("none", "fair-share", "interleaved")


@dataclass(frozen=True)
class Contention:
    """A contention model and its parameter.

    Attributes:
        mode: one of :data:`CONTENTION_MODES`.
        oversubscription: ``X`` > 0: a rack's uplink carries its machines' link bandwidth / ``X``.
    """

    mode: str = "none"
    oversubscription: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in CONTENTION_MODES:
            raise ValueError(f"unknown contention {self.mode!r}; choose one of {', '.join(CONTENTION_MODES)}")
        x = self.oversubscription
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and x > 0):
            raise ValueError(f"oversubscription must be a positive number, got {x!r}")

    @property
    def on(self) -> bool:
        return self.mode != "none"


class Links:
    """The shared links of a cluster: machine ``m``'s link is link ``m``, rack ``r``'s uplink is
    link ``num_machines + r``; ``capacity`` in bytes per second."""

    def __init__(self, spec: ClusterSpec, machine_link_bytes_per_s: float, contention: Contention) -> None:
        if not machine_link_bytes_per_s > 0:
            raise ValueError(f"a machine's link bandwidth must be positive, got {machine_link_bytes_per_s!r}")
        self.spec = spec
        self.contention = contention
        machines = spec.num_machines
        self.capacity = np.empty(machines + spec.racks)
        self.capacity[:machines] = machine_link_bytes_per_s
        self.capacity[machines:] = spec.machines_per_rack * machine_link_bytes_per_s / contention.oversubscription
        self._machine_of_gpu = spec.machine_of_gpu
        self._rack_of_machine = spec.rack_of_machine

    def of(self, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links a job on ``gpus`` uses: ``(machine links, rack uplinks)``, each sorted (empty
        on one machine, and the uplinks empty in one rack)."""
        machines = np.unique(self._machine_of_gpu[np.asarray(gpus, dtype=np.int64)])
        if machines.size < 2:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        racks = np.unique(self._rack_of_machine[machines])
        uplinks = racks + self.spec.num_machines if racks.size > 1 else np.empty(0, dtype=np.int64)
        return machines, uplinks

    def asked(self, gpus: np.ndarray, machine_rate: float, uplink_rate: float) -> tuple[np.ndarray, np.ndarray]:
        """A job on ``gpus`` asking ``machine_rate`` of each of its machine links and
        ``uplink_rate`` of each of its rack uplinks: ``(links, rates)``, as :func:`fair_shares`
        takes them (both empty on one machine)."""
        machine_links, uplinks = self.of(gpus)
        return (
            np.concatenate([machine_links, uplinks]),
            np.concatenate([np.full(machine_links.size, machine_rate), np.full(uplinks.size, uplink_rate)]),
        )

    def use(self, users, shares=None) -> np.ndarray:
        """Bytes per second each link is asked by ``users`` (``(links, rates)`` pairs), each
        scaled by its entry of ``shares`` if given."""
        total = np.zeros(self.capacity.size)
        for k, (links, rates) in enumerate(users):
            np.add.at(total, links, rates if shares is None else rates * shares[k])
        return total


def fair_shares(links: list[np.ndarray], rates: list[np.ndarray], capacity: np.ndarray) -> np.ndarray:
    """Max-min fair shares by progressive filling.

    Job ``j`` asks ``rates[j][k]`` bytes per second of link ``links[j][k]`` (its alone rate);
    with share ``f_j`` it uses ``f_j * rates[j][k]``. All shares rise together from 0; when a
    link's use reaches its ``capacity`` the shares of the jobs on it stop; every share stops at
    1. Returns ``f`` (one per job, in (0, 1]; 1 for a job that asks nothing). (The filling
    runs compiled: :func:`dallygym.sim.kernels.fill_shares`.)
    """
    n = len(links)
    shares = np.ones(n)
    if not n:
        return shares
    job_of = np.repeat(np.arange(n), [used.size for used in links])
    link_of = np.concatenate(links).astype(np.int64)
    rate_of = np.concatenate(rates).astype(float)
    # A job that asks nothing (no link, or nothing of any) keeps 1: its entries are left out.
    active = np.zeros(n, dtype=bool)
    active[job_of[rate_of > 0]] = True
    keep = active[job_of]
    job_of, link_of, rate_of = job_of[keep], link_of[keep], rate_of[keep]
    kernels.fill_shares(job_of, link_of, rate_of, np.asarray(capacity, dtype=float), shares, active)
    return shares


def shared_speeds(latency, links: Links, jobs: list[tuple[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(shares, speed factors)`` of jobs running together, each ``(model, gpus)``: the links
    each uses (:meth:`Links.of`), its alone rates on them (``latency.link_rates``), the fair
    shares (:func:`fair_shares`), and the speed factor at its share
    (``latency.shared_speed_factor``; exactly ``speed_factor`` at share 1)."""
    spec = links.spec
    used, rates, shapes = [], [], []
    for _, gpus in jobs:
        shape = spec.shape_of(np.asarray(gpus, dtype=np.int64))
        job_links, job_rates = links.asked(gpus, *latency.link_rates(shape))
        used.append(job_links)
        rates.append(job_rates)
        shapes.append(shape)
    shares = fair_shares(used, rates, links.capacity)
    speeds = np.array(
        [latency.shared_speed_factor(model, shape, float(f)) for (model, _), shape, f in zip(jobs, shapes, shares)]
    )
    return shares, speeds
