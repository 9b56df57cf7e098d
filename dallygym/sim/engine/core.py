"""The :class:`Engine`: its construction, the views it gives policies, and its run driven one
decision at a time; :func:`run_policy`."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd

from .. import kernels
from ..cluster import ClusterSpec, Tier
from ..policies.base import (
    Policy,
    auto_accept_of,
)
from . import turns
from .compiled import CompiledPath
from .decisions import WAITING, EngineError, Offer, Pick
from .passes import Passes
from .setup import EngineSetup
from .shared import SharedLinks
from .state import JobState

if TYPE_CHECKING:
    from ..latency import LatencyModel

from .config import AUTO_ACCEPT, LEASE_PICKS, EngineConfig
from .jobs import TraceArrays

_FIRST_CALL = object()  # Engine.next_decision's auto_accept when left out


class Engine(EngineSetup, CompiledPath, Passes, JobState, SharedLinks):
    """Discrete-event simulation of one trace on one cluster under one policy.

    Args:
        trace: a canonical trace DataFrame (see :func:`dallygym.sim.trace.load_trace`), or its
            :class:`TraceArrays` (made once for a trace run many times); it is bound to the
            cluster here, so a job larger than the cluster is an error.
        cluster: the cluster size.
        policy: the scheduling policy (priority order, decisions, hooks).
        latency: the latency model giving each placement's speed factor.
        config: lease, restart overhead, seed.
        agent_picks: if True, every pass in which the order matters yields a :class:`Pick`
            (an agent chooses which job is served next); if False (native runs) the pass
            follows the policy's priority order and no pick is made.
        lease_picks: with ``agent_picks``, what a round boundary's picks offer:
            ``"all"`` puts every lease-expired job among the candidates (picking one renews
            it before anyone else can claim its GPUs); ``"waiting"`` offers only the waiting
            jobs, and serving one first serves every lease-expired job the policy ranks
            ahead of it, in order (so a waiting job may claim only the GPUs of lease-expired
            jobs ranked after it, as in a native pass). See :data:`LEASE_PICKS`.

    Per-job arrays (index = row of the trace sorted by arrival then id), all read-only for
    policies: ``job_id``, ``arrival_s``, ``num_gpus``, ``model`` (names), ``model_index``,
    ``total_iterations``, ``iter_time_s``, ``state`` (PENDING/WAITING/RUNNING/DONE),
    ``done_iters``, ``speed`` (current speed factor, 0 when not running), ``run_s`` (time
    holding GPUs), ``overhead_s``, ``tier_s`` (n x 3: time held at each tier, counted when a
    placement ends), ``tier`` (current tier or -1), ``starve_anchor_s``, ``first_start_s``,
    ``end_s``, ``preemptions``, ``migrations`` (moves by the policy's migrate hook),
    ``upgrades`` (moves to a better tier accepted at lease renewal), ``speed_seen`` (n x 3: speed factor of its last
    placement at each tier), ``gpus`` (list: current GPU ids or None).
    """

    #: The frame each job's turn in a pass is taken by (:class:`dallygym.sim.engine.turns.Visit`); a
    #: subclass may name its own (e.g. one that asks a new kind of decision).
    Visit: ClassVar[type[turns.Visit]] = turns.Visit

    def __init__(
        self,
        trace: pd.DataFrame | TraceArrays,
        cluster: ClusterSpec,
        policy: Policy,
        latency: LatencyModel,
        config: EngineConfig | None = None,
        agent_picks: bool = False,
        lease_picks: str = "all",
    ) -> None:
        self.spec = cluster
        self.agent_picks = bool(agent_picks)
        if lease_picks not in LEASE_PICKS:
            raise ValueError(f"unknown lease_picks {lease_picks!r}; choose one of {', '.join(LEASE_PICKS)}")
        #: Whether a boundary's picks include the lease-expired jobs (``lease_picks="all"``).
        self.pick_leases = lease_picks == "all"
        self.policy = policy
        # A policy that keeps the default priority (arrival time) orders a pass's jobs as their
        # indices already are (indices follow arrival, then id): no sort needed.
        self._arrival_order = getattr(type(policy), "priority", None) is Policy.priority and "priority" not in getattr(
            policy, "__dict__", {}
        )
        self.latency = latency
        self.config = config or EngineConfig()
        self.rng = np.random.default_rng(self.config.seed)

        self._take_trace(trace, cluster)
        self._init_jobs(cluster, latency)
        self._init_links()
        self._init_run_state(policy)
        self._init_policy_traits(policy)
        self._init_compiled_state()

    # --- the views and caches, made from the plain state; copies ---------------------------

    # --- views for policies and the environment ------------------------------------------

    @property
    def expired_unvisited(self) -> set[int]:
        """During a round-boundary pass: running jobs whose lease expired and that the pass has
        not visited yet. Their GPUs count as free (a higher-priority job may claim them).

        (After the compiled loop stops in a pass to ask a question, the set is made when first
        read: the engine's own turns up to the next lease-expired job need only its position.)"""
        lazy = self._expired_from
        if lazy is not None:
            self._expired_from = None
            queue, positions = lazy
            self._expired.update(queue[positions].tolist())
        return self._expired

    def waiting_jobs(self) -> np.ndarray:
        """Indices of the waiting jobs, increasing (do not modify the array)."""
        return self._waiting.array()

    def running_jobs(self) -> np.ndarray:
        """Indices of the running jobs, increasing (do not modify the array)."""
        return self._running.array()

    def below_best_jobs(self) -> np.ndarray:
        """Indices of the running jobs whose tier is worse than their best possible one,
        increasing."""
        run = self.running_jobs()
        return run[self.tier[run] > self.best_possible_tier[run]]

    @property
    def n_below_best(self) -> int:
        """Running jobs whose tier is worse than their best possible one."""
        return self.below_best_jobs().size

    def starvation_s(self, jobs: np.ndarray | int) -> np.ndarray | float:
        return self.now_s - self.starve_anchor_s[jobs]

    def nw_sens(self, jobs: np.ndarray) -> np.ndarray:
        """Dally's priority (paper §IV-B1): W_compl / T_norm = ideal time of completed
        iterations / time run. For a job that has never run, ``_never_nw_sens`` (0 by default)."""
        if self.cluster.compiled:
            return kernels.nw_sens(jobs, self.done_iters, self.iter_time_s, self.run_s, self._never_nw_sens)
        run = self.run_s[jobs]
        return np.divide(
            self.done_iters[jobs] * self.iter_time_s[jobs], run, out=self._never_nw_sens[jobs], where=run > 0
        )

    # --- the run -------------------------------------------------------------------------

    def decisions(self, auto_accept: str | None = None) -> Generator[Offer | Pick, Tier | int | None, None]:
        """Run the simulation, yielding each decision and receiving the answer.

        To an :class:`Offer` send back a :class:`Tier` from ``offer.tiers`` to accept, or
        ``None`` to wait; to a :class:`Pick` (only with ``agent_picks``) a job index from
        ``pick.candidates``, or ``None`` to stop the pass. The
        generator returns when every job has finished; read the results with
        :func:`dallygym.sim.metrics.collect` (or use :func:`run_policy`).

        ``auto_accept`` names offers to waiting jobs the caller would answer with their best
        tier anyway, so that the engine accepts them itself and never yields them (the run is
        the same): ``"best-possible"`` -- an offer whose best tier is the best the job could
        ever have (``not offer.is_choice``); ``"best"`` -- every such offer;
        ``"best-possible-only"`` -- as ``"best-possible"``, and every other offer is declined
        unasked (the job waits), for a caller that only ever accepts the best tier a job could
        have; None (default) -- none. Renewal offers are always yielded. See :data:`AUTO_ACCEPT`.

        A generator over :meth:`next_decision` and :meth:`answer` (the run itself is plain data,
        :mod:`dallygym.sim.engine.turns`: a copy of the engine taken at any decision goes on by those two).
        """
        decision = self._start_run(auto_accept, "decisions")
        while decision is not None:
            decision = self.answer(decision, (yield decision))

    def _start_run(self, auto_accept: str | None, driver: str) -> Offer | Pick | None:
        """Start the run (once) and run it to its first decision, which is returned."""
        if self._started:
            raise EngineError("an Engine runs once; build a new one for another run")
        if auto_accept not in AUTO_ACCEPT:
            raise ValueError(f"unknown auto_accept {auto_accept!r}; choose one of {AUTO_ACCEPT}")
        self._auto = AUTO_ACCEPT.index(auto_accept)  # kernels.AUTO_*
        self._auto_arg = auto_accept
        #: Whether a picked pass serves a waiting job compiled where it can (turns.Picked): as
        #: for the compiled turns of a pass (turns.Run._event), the engine accepts offers itself.
        self._serve_compiled = bool(
            self.agent_picks and self.cluster.compiled and self.renew_together and self._auto and self._batch_starts
        )
        self._driver = driver
        self._started = True
        self.policy.reset(self, self.rng)
        if self._keys == kernels.KEYS_NET:
            # A network's keys: the engine computes them from the parameters the policy gives,
            # or asks the policy if it gives none (inputs only Python computes).
            self._net_params = self.policy.compiled_keys(self)
            if self._net_params is None:
                self._keys = -1
        never_run = getattr(self.policy, "never_run_nw_sens_of", None)
        if never_run is not None:
            self._never_nw_sens[:] = never_run(self)
        self._round_no = 1
        self._next_round = self.first_arrival_s + self.config.lease_s
        self._idle_rounds = 0
        self._timeline = np.zeros((self.timeline_rows + 1, 5))  # (one spare row: see _record)
        compiled = self._compiled_loop()
        if compiled:
            # The loop runs compiled (kernels.run_events) until an event or a turn needs Python.
            self._finish_heap = None  # the next finish is found among the running jobs instead
            self._loop_args = self._make_loop_args()
        self._frames = [turns.Run(compiled)]
        self._open = turns.drive(self, None)
        return self._open

    def next_decision(self, auto_accept: str | None | object = _FIRST_CALL) -> Offer | Pick | None:
        """The decision the run waits on (an :class:`Offer`, or a :class:`Pick` with
        ``agent_picks``), or None once every job has finished. The first call starts the run,
        with ``auto_accept`` as for :meth:`decisions` (default None) and runs it to its first
        decision; until that decision is answered (:meth:`answer`), every call returns it again.
        A later call may repeat the first one's ``auto_accept`` or leave it out, not change it."""
        if self._driver is None:
            return self._start_run(None if auto_accept is _FIRST_CALL else auto_accept, "next_decision")
        if self._driver != "next_decision":
            raise EngineError("this engine's run was driven by decisions(); build a new Engine to use next_decision")
        if auto_accept is not _FIRST_CALL and auto_accept != self._auto_arg:
            raise ValueError(f"auto_accept is fixed when the run starts ({self._auto_arg!r} here), got {auto_accept!r}")
        self._check_not_failed()
        return self._open

    def answer(self, decision: Offer | Pick, response: Tier | int | None) -> Offer | Pick | None:
        """Answer ``decision``, the one :meth:`next_decision` returned (to an offer a tier from
        ``offer.tiers`` or None to wait; to a pick a job from ``pick.candidates`` or None to
        stop the pass), run to the next decision and return it (None once every job has finished)."""
        if self._failed is not None:
            self._check_not_failed()
        if decision is None or decision is not self._open:
            what = "no decision is open" if self._open is None else f"the open decision is {self._open!r}"
            raise EngineError(f"answer() takes the decision next_decision() returned; {what}, got {decision!r}")
        self._open = None
        self._open = turns.drive(self, response)
        return self._open

    def _check_not_failed(self) -> None:
        if self._failed is not None:
            raise EngineError(f"this engine's run stopped at an error ({self._failed}); build a new Engine")

    def _compiled_loop(self) -> bool:
        """Whether :meth:`decisions` runs compiled: the kernels are on, the policy's priority
        order is one the engine computes, it does not migrate, and no agent picks. (Under a
        contention model the loop stops after each event that starts or ends a placement across
        machines, and the links' shares are found in Python: kernels.STOP_RESHARE.)"""
        return (
            self.cluster.compiled
            and self.renew_together
            and self._keys >= 0
            and not self.agent_picks
            and not self._migrates
        )

    def _next_event(self) -> tuple[float, bool]:
        """The next event (taken by :class:`dallygym.sim.engine.turns.Run`): time moves to it (arrival, finish or
        round boundary, whichever comes first), jobs finish and arrive. Returns its time and
        whether it is a round boundary; its pass and timeline record come next."""
        if self._links is not None:
            self._reshare()  # the last event's placements, before time moves on
        n = self.n
        lease = self.config.lease_s
        first = self.first_arrival_s
        arrival = self.arrival_s
        t_arr = arrival[self._next_arrival] if self._next_arrival < n else math.inf
        t_fin = self._next_finish_s()
        if self._next_round < min(t_arr, t_fin) and self.n_waiting == 0 and not self._boundary_may_act():
            # With no job waiting, no renewal offer to make and no possible migration, a
            # round boundary changes nothing: every lease is renewed on the same GPUs.
            # Nothing changes either until the next event, so jump to the last boundary
            # not after it.
            t_next = min(t_arr, t_fin)
            k = max(self._round_no, math.floor((t_next - first) / lease))
            while first + k * lease > t_next:
                k -= 1
            while first + (k + 1) * lease <= t_next:
                k += 1
            if k > self._round_no:
                self.rounds += k - self._round_no
                self._round_no = k
                self._next_round = first + k * lease
        t = min(t_arr, t_fin, self._next_round)
        self._advance(t)
        if t_fin <= t:
            self._complete(self._finishing_by(t), t)
        while self._next_arrival < n and arrival[self._next_arrival] <= t:
            self._set_state(self._next_arrival, WAITING)
            self._next_arrival += 1
        boundary = t >= self._next_round
        if boundary:
            self.rounds += 1
            self._round_no += 1
            self._next_round = first + self._round_no * lease
            if self.cluster.free_total == self.spec.num_gpus and self._next_arrival >= n:
                self._idle_rounds += 1
                if self._idle_rounds > self.config.max_idle_rounds and self.finished < n:
                    raise self._idle_error()
            else:
                self._idle_rounds = 0
        return t, boundary

    def _open_any_pass(self, t: float, boundary: bool):
        """Count the event's pass and open it: its plan ``(cand, queue, least_ahead,
        expired_pos)`` (:meth:`_open_pass`), or None if it has no turn to take."""
        self.passes += 1
        if not boundary and self.n_waiting == 0:
            return None
        if self._keys >= 0 and self.cluster.compiled:
            return self._open_pass(t, boundary)
        return self._python_open_pass(t, boundary)

    def _idle_error(self) -> EngineError:
        return EngineError(
            f"policy {self.policy.name!r} left {self.n - self.finished} job(s) waiting on an "
            f"idle cluster for {self.config.max_idle_rounds} rounds"
        )

    def _end_pass(self, boundary: bool) -> None:
        """A boundary pass's end: no lease-expired job left unvisited, no GPU marked, no rank."""
        if boundary:
            self._expired_from = None
            self._expired.clear()
            self.cluster.clear_marks()
            if self._ranked is not None:
                self._rank[self._ranked] = -1
                self._ranked = None

    def _next_finish_s(self) -> np.float64:
        """The earliest finish time of a running job (inf if none), dropping stale heap
        entries on the way (without the heap: the least over the running jobs)."""
        heap = self._finish_heap
        finish = self.finish_s
        if heap is None:
            run = self.running_jobs()
            return finish[run].min() if run.size else np.float64(math.inf)
        while heap:
            f, j = heap[0]
            if finish.item(j) == f:
                return finish[j]
            heapq.heappop(heap)
        return np.float64(math.inf)

    def _finishing_by(self, t: float) -> list[int]:
        """The running jobs whose finish time is ``t`` or earlier, in increasing index order
        (taken off the heap)."""
        heap = self._finish_heap
        finish = self.finish_s
        if heap is None:
            run = self.running_jobs()
            return run[finish[run] <= t].tolist()
        due = set()
        while heap and heap[0][0] <= t:
            f, j = heapq.heappop(heap)
            if finish.item(j) == f:
                due.add(j)
        return sorted(due)

    def _boundary_may_act(self) -> bool:
        """With no job waiting, could a round boundary change anything? Only through renewal
        offers (``upgrade``: a running job that a better tier is free for; ``rebid``: any
        running job) or the policy's migrations."""
        mode = self._renewal
        if mode == "upgrade":
            if self._upgrades_offered and self.upgrade_possible():
                return True
        elif mode == "rebid" and self.n_running:
            return True
        return self.policy.may_migrate(self)

    #: With ``agent_picks``: None, or ``lease_guard(engine, jobs) -> bool per job``, asked at
    #: each round boundary's pass about its lease-expired jobs (in the offer order). Those it
    #: flags take their turns first, before any pick, so no picked job can claim their GPUs
    #: (``DallyQueue-v0``'s ``guard_leases``).
    lease_guard: Callable[[Engine, np.ndarray], np.ndarray] | None = None

    #: With ``agent_picks``: None, or ``pick_guard(engine, candidates) -> job or None``, asked
    #: before each :class:`Pick` with its candidates (in the offer order). A job it returns is
    #: served as if the agent had picked it, without asking; None asks the agent
    #: (``DallyQueue-v0``'s ``guard_waiting``).
    pick_guard: Callable[[Engine, list[int]], int | None] | None = None

    # --- state changes -------------------------------------------------------------------


def run_policy(engine: Engine, progress: Callable[[Engine], None] | None = None) -> Engine:
    """Drive an engine to the end, answering every decision with its policy
    (:meth:`Policy.answer <dallygym.sim.policies.Policy.answer>`: offers by ``decide``, and with
    ``agent_picks`` picks by ``pick``). Built without ``agent_picks`` it is a native run.
    ``progress``, if given, is called with the engine every 256 decisions and once at the end
    (e.g. :class:`dallygym.sim.simulate.ProgressLine`)."""
    policy = engine.policy
    hooks: dict[str, Callable] = {}  # kind -> the policy's bound method (Policy.answer, looked up once)
    decision = engine.next_decision(auto_accept_of(policy))
    asked = 0
    while decision is not None:
        hook = hooks.get(decision.kind)
        if hook is None:
            hook = hooks[decision.kind] = getattr(policy, decision.hook)
        decision = engine.answer(decision, hook(decision, engine))
        asked += 1
        if progress is not None and not asked & 255:
            progress(engine)
    if progress is not None:
        progress(engine)
    return engine
