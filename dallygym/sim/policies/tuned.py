"""Priorities computed from the ``DallyQueue-v0`` candidate features: a linear one, weights tuned
off line (``tuned-priority``), and a small network's (:class:`NetPriorityPolicy`, the policy of
a learned priority agent).

The key of a job is ``w . f``: ``f`` its row of job features exactly as the queue
environment's observation shows them (:data:`dallygym.envs.queue.JOB_FEATURES`, computed by the
environment's own code), ``w`` a weight vector. The shipped weights were found by the
cross-entropy method on training draws only (``agents/tune_priority.py``) and are package data
(``dallygym/data/tuned_priority.json``). It is the black-box-tuned yardstick a learned
job-ordering agent has to beat: the same information, a fixed linear rule.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import ClassVar

import numpy as np

from .. import kernels
from .dally import DallyConsolidatedPolicy, DallyPolicy

#: Package-data file of the shipped weights.
WEIGHTS_FILE = "tuned_priority.json"


def shipped_weights() -> dict:
    """The committed tuning result: ``features`` (names), ``weights``, ``settings``, ``history``."""
    ref = resources.files("dallygym") / "data" / WEIGHTS_FILE
    return json.loads(ref.read_text(encoding="utf-8"))


class CandidateFeatures:
    """The queue environment's per-candidate features, for an engine run natively.

    It borrows :meth:`dallygym.envs.queue_obs.QueueObservation._job_features_compiled` (its
    kernel; on an engine whose cluster does not use the kernels, the readable numpy reference
    ``_job_features``, the same numbers bit for bit) and the helpers they call, with the scratch
    state they read set up for ``engine``, so a policy computes the very numbers an agent
    observes. Features 14-16 (speed factors) are 0, as under the default ``sensitivity="hidden"``.
    """

    def __init__(self, engine, policy: DallyPolicy) -> None:
        from ...envs.queue_obs import QueueObservation  # (not at import: queue_obs imports the policies)

        cls = QueueObservation
        self._job_features = cls._job_features.__get__(self)
        self._job_features_compiled = cls._job_features_compiled.__get__(self)
        self._demand_tables = cls._demand_tables.__get__(self)
        self._candidate_demand_tables = cls._candidate_demand_tables.__get__(self)
        self._demand_timers = cls._demand_timers.__get__(self)
        self._time = cls._time.__get__(self)
        self.largest_estimate_s = cls.largest_estimate_s.__get__(self)
        spec = engine.spec
        size = spec.num_gpus + 1
        self.engine = engine
        self.spec_cluster = spec
        self._lease_s = float(engine.config.lease_s)
        self._num_gpus = float(spec.num_gpus)
        self._log_cluster = float(np.log2(1 + spec.num_gpus))
        self._timers = policy.timers
        self._largest_estimate = None
        self._demand_best = np.zeros(size, dtype=np.int64)
        self._demand_seen = np.zeros(size, dtype=bool)
        self._demand_free = np.zeros(size, dtype=bool)
        self._demand_limits = np.zeros((size, 2))
        self._size_feature = np.log2(1.0 + engine.num_gpus) / self._log_cluster
        self._estimates = np.zeros(engine.n)

    def __call__(self, jobs: np.ndarray) -> np.ndarray:
        """The feature rows (float32, ``len(jobs)`` x ``JOB_DIM``) of ``jobs`` now."""
        from ...envs.queue import JOB_DIM

        rows = np.zeros((jobs.size, JOB_DIM), dtype=np.float32)
        if not jobs.size:
            return rows
        e = self.engine
        if not e.cluster.compiled:
            self._job_features(jobs, e.now_s, rows)
            return rows
        timed = self._candidate_demand_tables(jobs, e.now_s)  # (the tables the kernel reads)
        self._job_features_compiled(jobs, e.now_s, rows, timed)
        return rows


class _FeaturePriority:
    """The candidate features of the jobs a policy orders (:class:`CandidateFeatures`), kept
    per engine; mixed into a Dally policy (whose timers the features show)."""

    _features: CandidateFeatures | None = None

    def reset(self, view, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        self._features = CandidateFeatures(view, self)

    def features(self, view, jobs: np.ndarray) -> np.ndarray:
        """The queue features of ``jobs`` at ``view``'s current state."""
        if self._features is None or self._features.engine is not view:
            self._features = CandidateFeatures(view, self)
        return self._features(np.asarray(jobs, dtype=np.int64))


class TunedPriorityPolicy(_FeaturePriority, DallyPolicy):
    """Priority ``w . f`` (lower first) over the queue features; offers as auto-tuned ``dally``.

    * Priority key of a job (waiting, or running when the engine orders lease-expired jobs at
      a round boundary): the dot product of ``weights`` with its 20 job features of
      ``DallyQueue-v0`` (:data:`~dallygym.envs.queue.JOB_FEATURES`: the normalised, log-scaled
      values of the observation, sensitivity hidden), computed over the jobs being ordered at
      the engine's current state. Ties: earlier arrival, then job index (the engine's rule).
    * Offers, lease renewal and the auto-tuner: :class:`~dallygym.sim.policies.dally.DallyPolicy`
      unchanged (the queue environment's ``offer_rule="dally"``), so only the order differs.

    Args:
        weights: 20 numbers in ``JOB_FEATURES`` order; None (default) loads the shipped ones.
    """

    name: ClassVar[str] = "tuned-priority"
    priority_keys: ClassVar[str | None] = None  # priority() below: the engine must ask

    def __init__(self, weights=None, **kwargs) -> None:
        super().__init__(**kwargs)
        from ...envs.queue import JOB_DIM

        if weights is None:
            weights = shipped_weights()["weights"]
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (JOB_DIM,) or not np.all(np.isfinite(w)):
            raise ValueError(f"weights must be {JOB_DIM} finite numbers (JOB_FEATURES order), got shape {w.shape}")
        self.weights = w
        self._features: CandidateFeatures | None = None

    def priority(self, view, jobs: np.ndarray) -> np.ndarray:
        return self.features(view, jobs).astype(np.float64) @ self.weights

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weights={np.round(self.weights, 4).tolist()})"


#: The input a :class:`NetPriorityPolicy` may read beyond the queue features: a job's share of
#: the time the unfinished work needs (:func:`drain_share`).
DRAIN_SHARE = "drain_share"


def net_inputs() -> tuple[str, ...]:
    """The inputs a :class:`NetPriorityPolicy` reads by default, in order: the ``JOB_FEATURES``
    but the three speed factors (always 0 under the hidden sensitivity a native policy has)."""
    from ...envs.queue_obs import JOB_FEATURES  # (not at import: queue_obs imports the policies)

    return tuple(name for name in JOB_FEATURES if not name.startswith("speed_"))


#: The inputs a :class:`NetPriorityPolicy` may read about the makespan limit (the
#: ``DallyQueue-v0`` features of ``limit_features=True``, :func:`limit_inputs`): the job's own
#: ``limit_finish``, then the pass's ``limit_elapsed``, ``limit_estimate`` and ``limit_work``.
LIMIT_INPUTS: tuple[str, ...] = ("limit_finish", "limit_elapsed", "limit_estimate", "limit_work")


def needs_limit(inputs) -> bool:
    """Whether a network reading ``inputs`` reads the makespan limit (any of :data:`LIMIT_INPUTS`)."""
    return any(name in LIMIT_INPUTS for name in inputs)


def known_net_inputs() -> tuple[str, ...]:
    """Every input a :class:`NetPriorityPolicy` can read: :func:`net_inputs`, ``drain_share``,
    then :data:`LIMIT_INPUTS`."""
    return (*net_inputs(), DRAIN_SHARE, *LIMIT_INPUTS)


def known_work(view) -> tuple[np.ndarray, float, float]:
    """The remaining estimates of the running and waiting jobs (an array over all jobs, 0 for
    the rest; :meth:`ProtectedRemainingPolicy.remaining_estimate_s`), the largest of them, and
    the time their work needs on the whole cluster at full use (GPU demand x estimate, summed,
    over the cluster's GPUs); 0 and 0 when none is left. The queue environment's
    ``limit_features`` read the same count (``limit_work``)."""
    from .protected import NEVER_RUN_MULTI_MACHINE_NW_SENS, ProtectedRemainingPolicy  # (the estimate's definition)

    running, waiting = view.running_jobs(), view.waiting_jobs()
    unfinished = np.concatenate([running, waiting])
    estimates = np.zeros(view.n)
    if view.cluster.compiled:  # (the same numbers: kernels.remaining_estimates)
        gpm = view.spec.gpus_per_machine
        largest = float(
            kernels.remaining_estimates(
                running, waiting, view._jobf, view._jobi, gpm, NEVER_RUN_MULTI_MACHINE_NW_SENS, estimates
            )
        )
    else:
        estimates[unfinished] = ProtectedRemainingPolicy.remaining_estimate_s(view, unfinished)
        largest = float(estimates[unfinished].max()) if unfinished.size else 0.0
    work = float(view.num_gpus[unfinished] @ estimates[unfinished]) / view.spec.num_gpus
    return estimates, largest, work


def limit_inputs(view, jobs: np.ndarray, makespan_limit_s: float) -> np.ndarray:
    """Inputs :data:`LIMIT_INPUTS` of ``jobs`` (one row each, in that order), against a makespan
    limit of ``makespan_limit_s`` seconds from the first arrival; the definitions of the queue
    environment's ``limit_features``, each time a share of the limit shown as min(share, 2) / 2
    (0.5 at the limit):

    * ``limit_finish``: (time since the first arrival + the job's remaining estimate) / limit;
    * ``limit_elapsed``: time since the first arrival / limit;
    * ``limit_estimate``: (that time + the largest remaining estimate of a running or waiting
      job) / limit;
    * ``limit_work``: (that time + the running and waiting jobs' GPU demand x remaining
      estimate summed, over the cluster's GPUs) / limit.

    The last three are the same for every job of a pass. Estimates are
    :meth:`ProtectedRemainingPolicy.remaining_estimate_s` (feature ``remaining_estimate``)."""
    jobs = np.asarray(jobs, dtype=np.int64)
    estimates, largest, work = known_work(view)
    elapsed = view.now_s - view.first_arrival_s
    limit = max(float(makespan_limit_s), 1e-9)
    out = np.empty((jobs.size, len(LIMIT_INPUTS)))
    out[:, 0] = elapsed + estimates[jobs]
    out[:, 1:] = (elapsed, elapsed + largest, elapsed + work)
    return np.minimum(out / limit, 2.0) / 2.0


def drain_share(view, jobs: np.ndarray) -> np.ndarray:
    """Input ``drain_share`` of ``jobs``: ``r / (r + D)``, in [0, 1).

    ``r`` is a job's remaining estimate (:meth:`ProtectedRemainingPolicy.remaining_estimate_s`,
    the queue feature ``remaining_estimate`` in seconds); ``D`` the time the cluster would need
    to finish every unfinished job's estimated work at full use: the sum over the running and
    waiting jobs of GPU demand x remaining estimate, over the cluster's GPUs. A job whose ``r``
    reaches ``D`` (share >= ½) ends after the rest of the known work could, so starting it late
    lengthens the makespan; a small share says there is room to serve others first. It uses
    what the queue observation shows (estimates, demands, the cluster's size), not the future
    arrivals. 0 when no unfinished job has work left."""
    jobs = np.asarray(jobs, dtype=np.int64)
    estimates, _, drain = known_work(view)
    if not drain > 0.0:
        return np.zeros(jobs.size)
    est = estimates[jobs]  # (the jobs being ordered are unfinished)
    return est / (est + drain)


#: The largest hidden layer a :class:`NetPriorityPolicy` accepts.
MAX_HIDDEN = 256


class NetPriorityPolicy(_FeaturePriority, DallyConsolidatedPolicy):
    """Priority ``v . tanh(W f + b)`` (lower first) over a job's features; offers as
    ``dally-consolidated`` (and ``protected-remaining``).

    * ``f``: a job's ``inputs`` (default :func:`net_inputs`): features of the rows
      ``DallyQueue-v0`` shows an agent (sensitivity hidden) and, if named, :func:`drain_share`
      and :data:`LIMIT_INPUTS` (:func:`limit_inputs`, against ``makespan_limit_s``, which
      they need) (:func:`known_net_inputs`), computed over the jobs being ordered at the engine's
      current state (waiting jobs at each scheduling pass, and the lease-expired running jobs
      at a round boundary). ``W`` is hidden x inputs, ``b`` and ``v`` hidden long. Ties:
      earlier arrival, then job index (the engine's rule).
    * Offers and lease renewal: a job waits for the most consolidated tier it fits in, as in
      the queue environment under ``offer_rule="protected-remaining"`` (the headline agents'),
      so only the order is learned.

    It is the policy of a learned priority agent (:mod:`dallygym.learning.priority_search`,
    which finds the parameters and loads them from a run directory); any parameters of the
    right shapes make a valid policy.
    """

    name: ClassVar[str] = "net-priority"
    # priority() below, computed by the engine too (compiled_keys) unless the offer rule's
    # timers move during the run.
    priority_keys: ClassVar[str | None] = "net"

    def __init__(
        self, hidden_weights, hidden_bias, output_weights, inputs=None, makespan_limit_s=None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        from ...envs.queue_obs import JOB_FEATURES

        names = net_inputs() if inputs is None else tuple(inputs)
        allowed = known_net_inputs()
        unknown = [name for name in names if name not in allowed]
        if unknown or len(set(names)) != len(names) or not names:
            raise ValueError(
                (f"inputs {unknown} are unknown; " if unknown else f"inputs {list(names)}: ")
                + f"the inputs must be distinct names, at least one, among {list(allowed)}"
            )
        w = np.asarray(hidden_weights, dtype=np.float64)
        b = np.asarray(hidden_bias, dtype=np.float64)
        v = np.asarray(output_weights, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != len(names) or not 1 <= w.shape[0] <= MAX_HIDDEN:
            raise ValueError(
                f"hidden_weights must be hidden x {len(names)} (one column per input, 1 <= hidden <= {MAX_HIDDEN}), "
                f"got shape {w.shape}"
            )
        if b.shape != (w.shape[0],) or v.shape != (w.shape[0],):
            raise ValueError(
                f"hidden_bias and output_weights must have {w.shape[0]} entries each, got {b.shape} and {v.shape}"
            )
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b)) and np.all(np.isfinite(v))):
            raise ValueError("the network's parameters must be finite")
        self.hidden_weights, self.hidden_bias, self.output_weights = w, b, v
        self.inputs = names
        self._limit = needs_limit(names)
        if self._limit and not (
            isinstance(makespan_limit_s, int | float) and math.isfinite(makespan_limit_s) and makespan_limit_s > 0
        ):
            raise ValueError(
                f"inputs {[n for n in names if n in LIMIT_INPUTS]} need the makespan limit: give makespan_limit_s, "
                f"a positive number of seconds (got {makespan_limit_s!r})"
            )
        self.makespan_limit_s = float(makespan_limit_s) if self._limit else None
        # Each input's column in [queue features..., drain_share, limit inputs...].
        extra = (DRAIN_SHARE, *LIMIT_INPUTS)
        self._columns = np.array(
            [len(JOB_FEATURES) + extra.index(n) if n in extra else JOB_FEATURES.index(n) for n in names]
        )
        self._drain = DRAIN_SHARE in names

    def compiled_keys(self, view) -> tuple | None:
        """What the engine needs to compute :meth:`priority` itself
        (:func:`dallygym.sim.kernels.net_keys`, on a compiled cluster): ``(W, b, v, timers by
        GPU demand, feature 0 by job, constants)``, ``W`` transposed and spread over every job
        feature, then, if the network reads ``drain_share`` or a limit input, over those (0 in
        the rows of the inputs it does not read); None when the offer rule's timers (features
        17-18) move during the run."""
        from ...envs.base import _LOG_LONG
        from ...envs.queue_obs import JOB_FEATURES
        from .protected import NEVER_RUN_MULTI_MACHINE_NW_SENS

        if self.tuner is not None:
            return None
        spec = view.spec
        known = self._drain or self._limit
        w = np.zeros((len(JOB_FEATURES) + (kernels.KNOWN_INPUTS if known else 0), self.hidden_bias.size))
        w[self._columns] = self.hidden_weights.T
        timers = np.array([self.timers(g, view.now_s) for g in range(spec.num_gpus + 1)], dtype=np.float64)
        size_feature = CandidateFeatures(view, self)._size_feature  # (feature 0 by job, as the rows have it)
        consts = np.zeros(kernels.NK_SIZE)
        consts[kernels.NK_LEASE] = view.config.lease_s
        consts[kernels.NK_GPUS] = spec.num_gpus
        consts[kernels.NK_GPM] = spec.gpus_per_machine
        consts[kernels.NK_NEVER_MULTI] = NEVER_RUN_MULTI_MACHINE_NW_SENS
        consts[kernels.NK_LOG_LONG] = _LOG_LONG
        consts[kernels.NK_FEATURES] = len(JOB_FEATURES)
        consts[kernels.NK_FIRST_ARRIVAL] = view.first_arrival_s
        consts[kernels.NK_LIMIT] = self.makespan_limit_s if self._limit else 0.0
        return w, self.hidden_bias.copy(), self.output_weights.copy(), timers, size_feature, consts

    def priority(self, view, jobs: np.ndarray) -> np.ndarray:
        f = self.features(view, jobs).astype(np.float64)
        if self._drain or self._limit:  # (their columns are past the queue features)
            drain = drain_share(view, jobs) if self._drain else np.zeros(jobs.size)
            limit = (
                limit_inputs(view, jobs, self.makespan_limit_s)
                if self._limit
                else np.zeros((jobs.size, len(LIMIT_INPUTS)))
            )
            f = np.column_stack([f, drain, limit])
        f = f[:, self._columns]
        return np.tanh(f @ self.hidden_weights.T + self.hidden_bias) @ self.output_weights

    def __repr__(self) -> str:
        return f"{type(self).__name__}(hidden={self.hidden_bias.size})"
