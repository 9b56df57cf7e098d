"""Tiresias (Gu et al., NSDI'19): discretised 2D-LAS priority and skew-based consolidation.

Priority (Discretised 2DAS, paper §3.2; public simulator ``dlas-gpu``): a job's attained service
is GPUs x time run. ``queue_limits_gpu_s`` splits it into K = len(limits) + 1 queues; a job is in
queue ``q`` when ``limits[q-1] <= service < limits[q]`` -- demoted exactly when it reaches a
threshold, as the simulator's ``j_gt >= queue_limit[q]``. Lower queue = offered first; inside a
queue jobs are FIFO by arrival (the engine's tie-break). Preemption is the engine's lease
mechanism: at a round boundary a waiting job of a higher queue claims the GPUs of a running job
of a lower queue (SPEC §5.2 allows preemption at round boundaries).

Defaults, from the public simulator (github.com/SymbioticLab/Tiresias, ``simulator/jobs.py``):
``num_queue = 3``, ``queue_limit = [3250, 7200, 18000]`` GPU-seconds; with 3 queues only the
first two thresholds are ever compared, so the default is ``(3250, 7200)``.

Starvation guard (``PROMOTEKNOB``, paper §3.2): a waiting job outside the top queue is promoted
to the top queue when its pending time reaches ``promote_knob`` x its executed time. As in the
simulator (``dlas_sim_jobs``): "executed time" is wall time run since the last promotion (the
job's attained service for queueing restarts from 0 at a promotion -- its real progress and its
run time in the metrics are untouched), and "pending time" is the time waited since the later of
its first start and its first restart after the last promotion. The public simulator runs
without the guard by default (``dlas-gpu``; knobs 0.5-1000 only in the ``dlas-gpu-N``
variants), and the Tiresias paper's evaluation gives no single value, so the guard is off by
default here (``promote_knob=None``). ``promote_knob=8`` -- the value third-party
reimplementations use (e.g. vodascheduler's ``TiresiasPromoteKnob = 8``) -- turns it on
(``TiresiasPolicy(promote_knob=8)``).

``tiresias-las`` (:class:`TiresiasLasPolicy`): continuous least attained service -- priority is
the attained service itself (GPUs x time run), no queues, no guard -- with the same placement
rule. It is what the Dally paper's reference simulator ran as "Tiresias".

Placement (paper §4, profile-based placement): a model whose skew -- largest layer's parameters
/ total parameters, :attr:`dallygym.sim.models.ModelProfile.skew` -- exceeds ``skew_threshold``
(0.3: vgg11, alexnet, mobilenet_v3 with the shipped profiles) must run on the fewest machines
possible, ``ceil(g / gpus_per_machine)``, and waits until such a placement is free. Other models
accept the best tier offered at once (engine best-fit placement). The paper's scheduler does not
know the network tiers, but SPEC §5.2 has it know the model profile.

Lease renewal (``EngineConfig.renewal``): a renewal offer is answered by the same rule as any
offer. In ``"upgrade"`` mode a running high-skew job whose lease expired moves when a
fewest-machines placement at a better tier is free (idle GPUs and its own); a low-skew job
accepts the better tier offered, as it accepts any offer. In ``"rebid"`` mode every job bids
again like a waiting job.

Tiresias sees machines, not racks ("partial knowledge of the network", Dally paper §V-C): a
consolidated placement over k >= 2 machines is put inside one rack when some rack has k machines
that can hold it (among such racks: the one needing the fewest GPUs of lease-expired jobs, then
the fewest free GPUs -- best fit --, then the lowest id), otherwise on the k machines with the
most free GPUs anywhere (ties: more idle GPUs, then lowest id), whatever racks they are in --
it never waits for one rack once k machines are free. Inside each machine the job takes idle
GPUs first, then those of the lowest-priority lease-expired job, as the engine's default does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..cluster import ClusterState, Tier
from ..models import shipped_profile
from .base import PlannedPlacementPolicy

WAITING = 1  # engine.WAITING (the engine imports this package, so it is not imported here)

#: Public Tiresias simulator defaults (``simulator/jobs.py``: 3 queues, limits in GPU-seconds).
DEFAULT_QUEUE_LIMITS_GPU_S: tuple[float, ...] = (3250.0, 7200.0)
#: PROMOTEKNOB (paper §3.2): off by default, as in the public simulator's ``dlas-gpu``.
DEFAULT_PROMOTE_KNOB: float | None = None
#: Skew above which a model is consolidated (SPEC §5.2).
DEFAULT_SKEW_THRESHOLD: float = 0.3


def consolidated_placement(cluster: ClusterState, num_gpus: int) -> np.ndarray | None:
    """GPU ids for ``num_gpus`` on the fewest machines, ``ceil(num_gpus / gpus_per_machine)``,
    or None if no such set of machines is free now (see the module docstring for the choice)."""
    spec = cluster.spec
    gpm = spec.gpus_per_machine
    k = math.ceil(num_gpus / gpm)
    free = cluster.free_per_machine
    idle = cluster.idle_per_machine
    # Machines ordered by free GPUs, then idle GPUs (fewer lease-expired victims), then id.
    key = free * (gpm + 1) + idle
    chosen = None
    if k <= spec.machines_per_rack:
        per_rack = key.reshape(spec.racks, spec.machines_per_rack)
        order = np.argsort(-per_rack, axis=1, kind="stable")[:, :k]
        top_free = np.take_along_axis(free.reshape(spec.racks, -1), order, axis=1)
        top_idle = np.take_along_axis(idle.reshape(spec.racks, -1), order, axis=1)
        fits = top_free.sum(axis=1) >= num_gpus
        if fits.any():
            racks = np.flatnonzero(fits)
            reclaim = np.maximum(0, num_gpus - top_idle[racks].sum(axis=1))
            rack_free = cluster.free_per_rack[racks]
            rack = int(racks[np.lexsort((racks, rack_free, reclaim))[0]])
            chosen = rack * spec.machines_per_rack + order[rack]
    if chosen is None:
        order = np.argsort(-key, kind="stable")[:k]
        if free[order].sum() < num_gpus:
            return None
        chosen = order
    parts = []
    left = num_gpus
    for m in chosen.tolist():
        take = min(int(free[m]), left)
        parts.append(cluster.gpus_on_machine(m, take))
        left -= take
    return np.concatenate(parts)


class TiresiasPolicy(PlannedPlacementPolicy):
    """Discretised 2DAS priority with a starvation guard; skew-based consolidation (SPEC §5.2).

    Args:
        queue_limits_gpu_s: increasing attained-service thresholds (GPU-seconds) between the
            K = len + 1 queues. Default (3250, 7200): the public simulator's.
        promote_knob: a waiting job is promoted to the top queue when its pending time reaches
            ``promote_knob`` x its executed time (see module docstring); None (default, as the
            public simulator's ``dlas-gpu``) disables it.
        skew_threshold: models with skew above it wait for a fewest-machines placement.
        skews: optional per-model skew overriding the shipped profiles (for models without a
            shipped profile).

    Attributes (valid after a run starts): ``promotions`` -- per job index, times promoted.
    """

    name = "tiresias"

    def __init__(
        self,
        queue_limits_gpu_s: Sequence[float] = DEFAULT_QUEUE_LIMITS_GPU_S,
        promote_knob: float | None = DEFAULT_PROMOTE_KNOB,
        skew_threshold: float = DEFAULT_SKEW_THRESHOLD,
        skews: Mapping[str, float] | None = None,
    ) -> None:
        limits = np.asarray(queue_limits_gpu_s, dtype=np.float64)
        if limits.ndim != 1 or not (np.all(np.isfinite(limits)) and np.all(limits > 0) and np.all(np.diff(limits) > 0)):
            raise ValueError(f"queue_limits_gpu_s must be increasing positive GPU-seconds, got {queue_limits_gpu_s!r}")
        if promote_knob is not None and not (math.isfinite(promote_knob) and promote_knob > 0):
            raise ValueError(f"promote_knob must be positive or None, got {promote_knob!r}")
        self.queue_limits_gpu_s = limits
        self.promote_knob = promote_knob
        self.skew_threshold = float(skew_threshold)
        self.skews = dict(skews or {})

    def reset(self, view, rng) -> None:
        n = view.n
        self.service_base_s = np.zeros(n)  # run_s at the last promotion
        self.pending_base_s = np.zeros(n)  # pending time (since first start) not counted
        self.awaiting_restart = np.zeros(n, dtype=bool)
        self.promotions = np.zeros(n, dtype=np.int64)
        own = self.skews
        skew = np.array([own[m] if m in own else shipped_profile(m).skew for m in view.model_names])
        self.high_skew = (skew > self.skew_threshold)[view.model_index]
        self._plan = None

    def queue_of(self, view, jobs: np.ndarray) -> np.ndarray:
        """Queue index (0 = top) of ``jobs`` from their attained service since promotion."""
        service = view.num_gpus[jobs] * (view.run_s[jobs] - self.service_base_s[jobs])
        return np.searchsorted(self.queue_limits_gpu_s, service, side="right")

    def priority(self, view, jobs):
        queue = self.queue_of(view, jobs)
        if self.promote_knob is not None:
            executed = view.run_s[jobs] - self.service_base_s[jobs]
            cand = (queue > 0) & (executed > 0) & (view.state[jobs] == WAITING)
            if cand.any():
                sel = jobs[cand]
                since_start = view.now_s - view.first_start_s[sel] - view.run_s[sel]
                pending = since_start - self.pending_base_s[sel]
                promote = pending >= self.promote_knob * executed[cand]
                if promote.any():
                    up = sel[promote]
                    self.service_base_s[up] = view.run_s[up]
                    self.awaiting_restart[up] = True
                    self.promotions[up] += 1
                    queue[np.flatnonzero(cand)[promote]] = 0
        return queue.astype(np.float64)

    def decide(self, offer, view):
        if not self.high_skew[offer.job]:
            return offer.best_tier  # low skew accepts any offer, a renewal offer too
        if offer.num_gpus <= view.spec.gpus_per_machine:
            return Tier.MACHINE if Tier.MACHINE in offer.tiers else None
        gpus = consolidated_placement(view.cluster, offer.num_gpus)
        if gpus is None:
            return None
        return self.plan(offer, view, gpus)  # low skew, or one machine: the engine's best fit

    def on_start(self, view, job, tier, starvation_s, now_s) -> None:
        if self.awaiting_restart[job]:
            # Pending time counts again only once the promoted job has run (simulator: only
            # while executed_time > 0).
            self.pending_base_s[job] = now_s - view.first_start_s[job] - view.run_s[job]
            self.awaiting_restart[job] = False

    def __repr__(self) -> str:
        return (
            f"TiresiasPolicy(queue_limits_gpu_s={tuple(self.queue_limits_gpu_s.tolist())}, "
            f"promote_knob={self.promote_knob}, skew_threshold={self.skew_threshold})"
        )


class TiresiasLasPolicy(TiresiasPolicy):
    """Continuous least attained service (LAS) with Tiresias's skew-based placement.

    Priority is the attained service ``GPUs x time run`` (GPU-seconds), lower first, with no
    queues and no starvation guard: the order the Dally paper's reference simulator used for
    its Tiresias baseline. Ties (e.g. all never-run jobs) go by arrival, the engine's rule.
    """

    name = "tiresias-las"

    def __init__(
        self, skew_threshold: float = DEFAULT_SKEW_THRESHOLD, skews: Mapping[str, float] | None = None
    ) -> None:
        super().__init__(promote_knob=None, skew_threshold=skew_threshold, skews=skews)

    def priority(self, view, jobs):
        return view.num_gpus[jobs] * view.run_s[jobs]

    def __repr__(self) -> str:
        return f"TiresiasLasPolicy(skew_threshold={self.skew_threshold})"
