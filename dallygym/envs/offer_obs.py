"""``Dally-v0``'s observation: the 32 features of an offer (:data:`OBS_FEATURES`, documented in
the :class:`~dallygym.envs.offer.DallyEnv` docstring), built by :class:`OfferObservation`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from gymnasium import spaces

from ..sim import kernels
from ..sim.cluster import ClusterSpec, Tier
from ..sim.engine import Engine, Offer, TraceArrays
from .base import _LOG_1000, _LOG_LONG, LONG_LEASES

#: Names of the observation features, in order (see the DallyEnv docstring for each).
OBS_FEATURES: tuple[str, ...] = (
    "job_gpus",
    "job_best_machine",
    "job_best_rack",
    "job_best_network",
    "job_starvation",
    "job_nw_sens",
    "job_work_done",
    "job_attained_service",
    "job_preemptions",
    "job_remaining_ideal",
    "offer_machine",
    "offer_rack",
    "offer_network",
    "speed_machine",
    "speed_rack",
    "speed_network",
    "timer_machine",
    "timer_rack",
    "past_timer_machine",
    "past_timer_rack",
    "free_gpus",
    "machines_that_fit",
    "racks_that_fit",
    "max_free_machine",
    "max_free_rack",
    "queue_jobs",
    "queue_gpu_demand",
    "running_jobs",
    "jobs_remaining",
    "time_elapsed",
    "time_in_round",
    "job_current_tier",
)
OBS_DIM = len(OBS_FEATURES)
_NO_SPEEDS = (0.0, 0.0, 0.0)
_NO_TIMERS = (0.0, 0.0)

#: Features 10-12 (which tiers are offered) by offered tiers.
_OFFERED = {
    tiers: (Tier.MACHINE in tiers, Tier.RACK in tiers, Tier.NETWORK in tiers)
    for tiers in [(), *((t,) for t in Tier), *itertools.combinations(Tier, 2), tuple(Tier)]
}
#: The offered tiers as kernels.offer_observation takes them: bit t for tier t.
_OFFERED_BITS = {tiers: sum(1 << int(t) for t in tiers) for tiers in _OFFERED}


def load_shown(load: np.ndarray) -> np.ndarray:
    """Links' loads (:meth:`dallygym.sim.engine.Engine.link_load`) as observed: min(load, 2) / 2,
    so 0.5 is a link asked exactly its capacity."""
    return np.minimum(load, 2.0) / 2.0


class OfferObservation:
    """Writes the observation of an offer into one float32 buffer, :attr:`obs` (the
    environment hands out copies): in one compiled call
    (:func:`dallygym.sim.kernels.offer_observation`), or with the kernels off feature by feature
    (:meth:`observe_reference`, the readable definition the kernel matches bit for bit).

    Its state is plain data that copies with the environment; :attr:`head`, the arrays the
    kernel reads (views of the engine's), is remade for a copy by :meth:`views`.
    """

    def __init__(self, spec: ClusterSpec, sensitivity: str, link_load: bool = False) -> None:
        self.spec_cluster = spec
        self.sensitivity = sensitivity
        #: Whether the observation ends with each shared link's load (``link_load``).
        self.link_load = link_load
        size = OBS_DIM + (spec.num_machines + spec.racks if link_load else 0)
        #: The observation space.
        self.space = spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)
        self.obs = np.zeros(size, dtype=np.float32)
        self.engine: Engine | None = None
        #: Features 0-3 of each job of the engine's trace (n x 4).
        self.job_static: np.ndarray | None = None
        self._static_of: TraceArrays | None = None  # the fixed trace whose job_static is built
        #: What :func:`dallygym.sim.kernels.offer_observation` reads and writes (None with the kernels off).
        self.head: tuple | None = None

    def start(self, engine: Engine, trace, timers) -> None:
        """At reset: observe ``engine`` (built from ``trace``) from now on; ``timers`` is the
        priority policy's ``timers(gpus, now)`` (features 16-19), or None."""
        self.engine = engine
        spec = self.spec_cluster
        self._lease_s = float(engine.config.lease_s)
        self._long_s = LONG_LEASES * self._lease_s  # a time this long or longer shows as 1
        self._num_gpus = float(spec.num_gpus)
        # Features 0-3 of each job (its size and best possible tier) never change (nor, for a
        # fixed trace, from one episode to the next).
        if self._static_of is not trace:
            self.job_static = self._static_features()
            self._static_of = trace if isinstance(trace, TraceArrays) else None
        # kernels.offer_observation's constants (kernels.OC_*), in its order.
        self._consts = np.array(
            [
                self._lease_s,
                self._long_s,
                _LOG_LONG,
                _LOG_1000,
                spec.num_gpus,
                engine.n,
                engine.first_arrival_s,
                spec.num_machines,
                spec.racks,
                spec.gpus_per_machine,
                spec.gpus_per_rack,
            ]
        )
        # kernels.offer_observation's arrays, the same objects all episode long.
        self.head = self.views() if engine.cluster.compiled else None
        self._timers = timers

    def clear(self) -> None:
        """All zeros: the observation once the episode has ended."""
        self.obs[:] = 0.0

    def _static_features(self) -> np.ndarray:
        """Features 0-3 of every job of the engine's trace (n x 4): log2(1 + GPUs) / log2(1 +
        cluster GPUs), and its best possible tier one-hot."""
        engine = self.engine
        log_cluster = math.log2(1 + self.spec_cluster.num_gpus)
        demands, index = np.unique(engine.num_gpus, return_inverse=True)
        static = np.empty((engine.n, 4))
        static[:, 0] = np.array([math.log2(1 + g) / log_cluster for g in demands.tolist()])[index]
        static[:, 1:] = engine.best_possible_tier[:, None] == np.arange(3)
        return static

    def views(self) -> tuple:
        """The arrays :func:`dallygym.sim.kernels.offer_observation` reads and writes: the
        observation buffer and its constants, and the engine's tables and free-GPU counts (views
        of its cluster's buffer: made again for a copy, whose cluster has its own)."""
        c = self.engine.cluster
        return (
            self.obs,
            self._consts,
            self.job_static,
            self.engine._jobf,
            self.engine._jobi,
            c.free_per_machine,
            c.free_per_rack,
        )

    def observe(self, offer: Offer) -> None:
        """Write the observation of ``offer`` into :attr:`obs`: in one compiled call
        (:func:`dallygym.sim.kernels.offer_observation`), or with the kernels off by
        :meth:`observe_reference`, the readable definition it matches bit for bit."""
        if self.link_load:
            self.obs[OBS_DIM:] = load_shown(self.engine.link_load())
        head = self.head  # (None with the kernels off)
        if head is None:
            self.observe_reference(offer)
            return
        e = self.engine
        timers = self._timers
        current = offer.current_tier
        kernels.offer_observation(
            *head,
            offer.job,
            offer.now_s,
            offer.starvation_s,
            *(timers(offer.num_gpus, offer.now_s) if timers is not None else _NO_TIMERS),
            _OFFERED_BITS[offer.tiers],
            -1 if current is None else int(current),
            *(_NO_SPEEDS if self.sensitivity == "hidden" else self.speeds(offer)),
            e.n_waiting,
            e.waiting_gpus,
            e.n_running,
            e.finished,
            e.cluster.free_total,
        )

    def observe_reference(self, offer: Offer) -> None:
        """The observation of ``offer``, feature by feature: the definition that
        :func:`dallygym.sim.kernels.offer_observation` follows (run with the kernels off)."""
        e = self.engine
        spec = self.spec_cluster
        c = e.cluster
        lease = self._lease_s

        def shown(t: float) -> float:  # a time: log1p(t / lease) / log1p(LONG_LEASES), in [0, 1]
            if t > 0:
                return 1.0 if t >= self._long_s else math.log1p(t / lease) / _LOG_LONG
            return 0.0

        j = offer.job
        g = offer.num_gpus
        now = offer.now_s
        run_s = e.run_s.item(j)
        done = e.done_iters.item(j)
        total = e._total_iterations_list[j]
        iter_time = e._iter_time_list[j]
        nw = done * iter_time / run_s if run_s > 0 else 0.0
        t_mc, t_rk = self._timers(g, now) if self._timers is not None else _NO_TIMERS
        starv = offer.starvation_s
        elapsed = now - e.first_arrival_s
        free_m, free_r = c.free_per_machine, c.free_per_rack
        current = offer.current_tier
        self.obs[:OBS_DIM] = (
            *self.job_static[j].tolist(),
            shown(starv),
            nw if nw < 1.0 else 1.0,
            done / total,
            shown(g * run_s / self._num_gpus),
            min(e.preemptions.item(j), 20) / 20.0,
            shown((total - done) * iter_time),
            *_OFFERED[offer.tiers],
            *(_NO_SPEEDS if self.sensitivity == "hidden" else self.speeds(offer)),
            shown(t_mc),
            shown(t_rk),
            starv >= t_mc,
            starv >= t_rk,
            c.free_total / spec.num_gpus,
            np.count_nonzero(free_m >= g) / spec.num_machines,
            np.count_nonzero(free_r >= g) / spec.racks,
            free_m.max() / spec.gpus_per_machine,
            free_r.max() / spec.gpus_per_rack,
            math.log1p(e.n_waiting) / _LOG_1000,
            min(e.waiting_gpus / self._num_gpus, 10.0) / 10.0,
            math.log1p(e.n_running) / _LOG_1000,
            (e.n - e.finished) / e.n,
            shown(elapsed),
            (elapsed % lease) / lease,
            0.0 if current is None else (int(current) + 1) / 3.0,
        )

    def speeds(self, offer: Offer) -> tuple[float, float, float]:
        """Features 13-15 of ``offer``, by ``sensitivity``."""
        if self.sensitivity == "hidden":
            return (0.0, 0.0, 0.0)
        e = self.engine
        j = offer.job
        if self.sensitivity == "observed":
            seen = e.speed_seen[j]
            return (float(seen[0]), float(seen[1]), float(seen[2]))
        out = [0.0, 0.0, 0.0]
        for tier in offer.tiers:
            gpus = e.cluster.place(offer.num_gpus, tier)
            out[int(tier)] = e._speed_factor(j, e.spec.shape_of(gpus))
        return tuple(out)
