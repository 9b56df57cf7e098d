"""The run of an :class:`~dallygym.sim.engine.Engine` as resumable plain data.

A run is a stack of *frames*, each one of the loops of a run written as a small state machine:
the event loop (:class:`Run`), an event's pass (:class:`Pass` and the drivers it hands its
plan to), one job's turn (:class:`Visit`) and a
lease-expired job's renewal (:class:`Renew`). A frame's :meth:`~Frame.step` runs its loop
until it

* asks a question -- returns the :class:`~dallygym.sim.engine.decisions.Offer` or
  :class:`~dallygym.sim.engine.decisions.Pick`; the answer comes back as ``value`` of its next step;
* calls another frame -- pushes it; what that frame returns comes back as ``value``;
* returns -- pops itself, leaving what it returns in ``engine._ret``.

:meth:`Engine.next_decision` and :meth:`Engine.answer` drive the stack (:func:`drive`). Every
frame holds only numbers, numpy arrays and decisions, so an engine copies (``copy.deepcopy``,
``pickle``) at any decision, in time proportional to its state, and the copy goes on exactly as
the original. The code after each question is the reference semantics of the engine (SPEC §4),
in the order a run makes its calls: the compiled loop (:mod:`dallygym.sim.kernels`) hands the
turns it cannot take to these frames and takes the pass back after them.

A new kind of decision is asked by a frame: a :class:`Visit` subclass (an engine's ``Visit``
attribute names the class its passes use) or a frame of its own.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np

from .. import kernels
from .decisions import TIERS, WAITING, EngineError, Offer, Pick

if TYPE_CHECKING:
    from .engine import Engine


def after_too_big(pos: int, n_visit: int, free: int, least_ahead, expired_pos) -> int:
    """The plan position to go on from after a waiting job too big for the ``free`` GPUs (``pos``:
    the one after it). The free GPUs only shrink during the pass, so if no waiting job from
    ``pos`` up to the next expired lease can fit (``least_ahead``: the least demand from each
    position on to that lease), the turns go on at that lease (``expired_pos``: the leases'
    positions, increasing), or the pass is over. (The compiled twin: kernels.pass_turns.)"""
    if pos < n_visit and free < least_ahead.item(pos):
        k = bisect_left(expired_pos, pos)
        return int(expired_pos[k]) if k < len(expired_pos) else n_visit
    return pos


def after_pass(e: Engine, boundary: bool, cand, t: float) -> None:
    """After a pass's turns (its marks and ranks cleared by the frame that took them): at a
    round boundary, the policy's migrations among the pass's candidates ``cand``."""
    if boundary:
        e._migrations(cand, t)


class Frame:
    """One loop of a run, stopped where it asks, calls or returns (see the module's doc).
    ``pc`` is where its next :meth:`step` goes on."""

    __slots__ = ("pc",)

    def __init__(self) -> None:
        self.pc = 0

    def step(self, e: Engine, value):
        """Run on from ``pc`` with ``value`` (an answer or a called frame's result): return a
        decision to ask, or None after pushing a frame or popping this one (:func:`call`,
        :func:`done`)."""
        raise NotImplementedError

    def close(self, e: Engine) -> None:
        """Undo what this frame holds while stopped (an error ends the run under it)."""

    def __getstate__(self):
        state = {
            name: getattr(self, name)
            for cls in type(self).__mro__
            for name in getattr(cls, "__slots__", ())
            if hasattr(self, name)
        }
        state.update(getattr(self, "__dict__", {}))  # (a subclass's own attributes)
        return state

    def __setstate__(self, state) -> None:
        for name, value in state.items():
            setattr(self, name, value)


def call(e: Engine, frame: Frame) -> None:
    """Go on with ``frame`` (its result comes back to the caller's next step)."""
    e._frames.append(frame)


def done(e: Engine, result=None) -> None:
    """The top frame returns ``result``."""
    e._frames.pop()
    e._ret = result


def drive(e: Engine, value) -> Offer | Pick | None:
    """Run the frames from the top with ``value`` until one asks a question (returned) or the
    run ends (None). An error unwinds the stack: each frame undoes what it holds, top first,
    as a generator's ``finally`` would, and the run is over."""
    frames = e._frames
    try:
        while frames:
            decision = frames[-1].step(e, value)
            if decision is not None:
                return decision
            value = e._ret
            e._ret = None
    except BaseException as error:
        while frames:
            frames.pop().close(e)
        e._failed = f"{type(error).__name__}: {error}"
        raise
    return None


class Run(Frame):
    """The run's event loop (the bottom frame): events one by one in Python, or the compiled
    loop (kernels.run_events) up to each event or turn it leaves to Python. An event is
    (``Engine._next_event``) time moving to it, jobs finishing and arriving; then its
    scheduling pass (:class:`Pass`, if it has turns to take) and a timeline record."""

    __slots__ = ("compiled", "t")
    EVENTS, TURN_TAKEN, PASS_TAKEN = 0, 1, 2

    def __init__(self, compiled: bool) -> None:
        self.pc = self.EVENTS
        self.compiled = compiled

    def step(self, e: Engine, value):
        pc = self.pc
        if pc == self.PASS_TAKEN:  # the event's pass has ended
            e._record(self.t)
        if not self.compiled:
            while e.finished < e.n:
                if self._event(e):
                    return None
            done(e)
            return None
        while True:
            stop = e._run_events(value if pc == self.TURN_TAKEN else -1)
            pc = self.EVENTS
            if stop == kernels.STOP_TURN:
                self.pc = self.TURN_TAKEN
                call(e, CompiledTurn())
                return None
            if stop == kernels.STOP_EVENT:
                if self._event(e):
                    return None
            elif stop == kernels.STOP_RESHARE:
                e._reshare()  # (the links' shares after the last event's placements; then on)
            elif stop == kernels.STOP_IDLE:
                raise e._idle_error()
            elif stop == kernels.STOP_DONE:
                e._loop_args = None  # (the engine's arrays are its own alone again)
                done(e)
                return None
            # (kernels.STOP_LOG: its log was full, and is read: on from where it stopped)

    def _event(self, e: Engine) -> bool:
        """The next event, in Python: whether its pass has turns to take (a :class:`Pass` is
        called; the record follows when it ends), else its record is made here."""
        t, boundary = e._next_event()
        opened = e._open_any_pass(t, boundary)
        if opened is None:
            e._record(t)
            self.pc = self.EVENTS
            return False
        self.t = t
        self.pc = self.PASS_TAKEN
        cand, queue, least_ahead, expired_pos = opened
        if e.agent_picks:
            call(e, Pass(t, boundary, cand, queue, least_ahead, expired_pos, picked=True))
        elif e.cluster.compiled and e.renew_together and e._auto and e._batch_starts:
            # The turns run compiled until one needs Python (an offer to ask about, a renewal
            # offer, a placement or speed factor only Python has): that turn is taken here, and
            # the compiled pass goes on after it. (Only when the engine accepts offers itself
            # and may start jobs in batches: otherwise every offer stops the kernel, and the
            # Python turns do better.)
            call(e, Pass(t, boundary, cand, queue, least_ahead, expired_pos))
        else:  # the pass is its Python turns alone: they end it too
            call(e, PythonTurns(queue, least_ahead, expired_pos, 0, t, (boundary, cand)))
        return True


class Pass(Frame):
    """A pass's turns over its visit plan, in order (see ``Engine._visit_plan``), compiled up to
    each turn that needs Python (``picked``: an agent's picks instead, :class:`Picked`); then
    the pass's end (:func:`after_pass`)."""

    __slots__ = ("asks", "boundary", "cand", "expired_pos", "free", "least_ahead", "pos", "queue", "stop", "t")
    START, COMPILED, AFTER_VISIT, END = 0, 1, 2, 3

    def __init__(self, t, boundary, cand, queue, least_ahead, expired_pos, picked: bool = False) -> None:
        self.pc = self.START if picked else self.COMPILED
        self.t, self.boundary, self.cand = t, boundary, cand
        self.queue, self.least_ahead, self.expired_pos = queue, least_ahead, expired_pos
        self.pos = 0

    def step(self, e: Engine, value):
        pc = self.pc
        if pc == self.START:
            self.pc = self.END
            call(e, Picked(self.queue.tolist(), self.t, self.boundary))
            return None
        if pc == self.AFTER_VISIT:
            # A question (an offer the caller answers, a renewal offer) that is declined leaves
            # the free GPUs as they were, and the turns after it tend to be declined questions
            # too (a policy waiting for better tiers, an agent): a return to the kernel for each
            # would cost more than it saves, so the Python turns take the rest of the pass.
            if self.asks and e.cluster.free_total == self.free:
                self.pc = self.END
                call(e, PythonTurns(self.queue, self.least_ahead, self.expired_pos, self.stop + 1, self.t))
                return None
            self.pos = self.stop + 1
            pc = self.COMPILED
        if pc == self.COMPILED:
            stop, self.asks = e._compiled_turns(self.queue, self.least_ahead, self.expired_pos, self.pos, self.t)
            if stop >= 0:
                self.stop = stop
                self.free = e.cluster.free_total
                self.pc = self.AFTER_VISIT
                call(e, e.Visit(self.queue.item(stop), self.t))
                return None
        self.close(e)
        after_pass(e, self.boundary, self.cand, self.t)
        done(e)
        return None

    def close(self, e: Engine) -> None:
        if self.queue is not None:
            self.queue = None
            e._end_pass(self.boundary)


class CompiledTurn(Frame):
    """The turn at which kernels.run_events stopped in a pass, taken in Python. Returns the
    position from which the kernel goes on with the pass, or -1 if the rest of the pass was
    taken here too (after a declined question, or for a policy whose starts are not batched)."""

    __slots__ = ("boundary", "expired_pos", "free", "least_ahead", "offer", "pos", "queue", "rest_here", "t", "asks")
    START, ASKED, VISITED, HANDED_OVER, END = 0, 1, 2, 3, 4

    def step(self, e: Engine, value):
        pc = self.pc
        if pc == self.START:
            pc = self._start(e)
            if pc is None:
                return None
            if pc == self.ASKED:
                return self.offer
        if pc == self.ASKED:
            tier = e._checked(value, self.offer)
            self.offer = None
            if tier is not None:
                return self._hand_back(e, self.pos, tier)
            pc = self.VISITED
        if pc == self.VISITED:
            if not self.rest_here and not (self.asks and e.cluster.free_total == self.free):
                return self._hand_back(e, self.pos + 1)
            # After a declined question the next turns are taken here (another question is
            # likely, and a return to the kernel costs more than a declined question), up to an
            # accepted offer to a waiting job or a lease-expired job's turn when the kernel
            # makes the starts: that start or turn, and the rest of the pass, go back to it.
            if self.rest_here:
                self.pc = self.END
                call(e, PythonTurns(self.queue, self.least_ahead, self.expired_pos, self.pos + 1, self.t))
            else:
                self.pc = self.HANDED_OVER
                call(e, TurnsToHandOver(self.queue, self.least_ahead, self.expired_pos, self.pos + 1, self.t))
            return None
        if pc == self.HANDED_OVER and value is not None:
            return self._hand_back(e, *value)
        self.close(e)
        e._record(self.t)
        done(e, -1)
        return None

    def _start(self, e: Engine):
        """The turn itself: the next ``pc``, or None if a frame was called or the turn
        handed back already."""
        li = e._li
        self.t = t = e.now_s
        boundary, n_queue, n_exp_pos, start, n_ranked, pos, asks, _, answer = e._li_pass()
        self.boundary, self.pos, self.asks = boundary, pos, asks
        plan = e._plan
        self.queue, self.least_ahead = plan[1, :n_queue], plan[2, :n_queue]
        self.expired_pos = plan[3, :n_exp_pos]
        self.rest_here = not (e._auto and e._batch_starts)
        j = self.queue.item(pos)
        if boundary:
            if n_ranked:
                e._ranked = plan[0, start : start + n_ranked]
            # The lease-expired jobs the pass has not visited: those from this turn on (but
            # this turn's job if the kernel preempted it already, to ask it an offer); made
            # when first read, which the turns up to a hand-back to the kernel never do.
            k = bisect_left(self.expired_pos, pos + (e.state.item(j) == WAITING))
            e._expired_from = (self.queue, self.expired_pos[k:])
        self.free = e.cluster.free_total
        if answer >= 0:
            # An accepted offer whose start only Python can make (a placement shape or speed
            # factor it has not seen yet).
            li[kernels.LI_ANSWER] = -1
            e._start(j, TIERS[answer], t)
            return self.VISITED
        if not self.rest_here and asks and e.state.item(j) == WAITING:
            # An offer to a waiting job: asked here, and an acceptance is started by the
            # kernel, which goes on with the pass from this very turn.
            offer = e._offer_to(j, t)
            if offer is None:
                return self.VISITED
            if offer.__class__ is not Offer:
                self._hand_back(e, pos, offer)
                return None
            self.offer = offer
            self.pc = self.ASKED
            return self.ASKED
        self.pc = self.VISITED
        call(e, e.Visit(j, t))
        return None

    def _hand_back(self, e: Engine, pos: int, tier=None) -> None:
        """Give the pass back to the compiled loop from position ``pos`` of its plan, with
        ``tier`` the offer accepted at that turn (which the loop starts), if any: the loop goes
        on with the pass and ends it (marks and ranks), so nothing of it is left here."""
        if tier is not None:
            e._li[kernels.LI_ANSWER] = int(tier)
        e._expired_from = None
        e._expired.clear()
        e._ranked = None
        self.queue = None  # (nothing for close to end)
        done(e, pos)

    def close(self, e: Engine) -> None:
        if self.queue is not None:
            self.queue = None
            e._end_pass(self.boundary)


class PythonTurns(Frame):
    """The turns of a pass (without agent picks) from position ``pos`` of its visit plan, in
    Python, to the pass's end. With ``ends`` = (boundary, candidates) they are the whole pass
    and end it as :class:`Pass` does; otherwise their caller does."""

    __slots__ = ("ends", "expired_pos", "least_ahead", "offer", "pos", "queue", "t")

    def __init__(self, queue, least_ahead, expired_pos, pos: int, t: float, ends: tuple | None = None) -> None:
        self.pc = 0
        self.queue, self.least_ahead, self.expired_pos = queue, least_ahead, expired_pos.tolist()
        self.pos, self.t, self.ends = pos, t, ends
        self.offer = None

    def step(self, e: Engine, value):
        offer = self.offer
        if offer is not None:  # the answer to a waiting job's offer (a Visit's, taken here)
            self.offer = None
            tier = e._checked(value, offer)
            if tier is not None:
                e._start(offer.job, tier, self.t)
        plain = e.Visit is Visit
        cluster = e.cluster
        queue, least_ahead, expired_pos = self.queue, self.least_ahead, self.expired_pos
        n_visit = len(queue)
        expired_set = e.expired_unvisited
        num_gpus = e._num_gpus_list
        pos = self.pos
        while pos < n_visit:
            j = queue.item(pos)
            if j in expired_set:
                # Expired leases up to the next waiting job that may still fit take their
                # turns together (a waiting job that does not fit now never will).
                k = bisect_left(expired_pos, pos)
                if cluster.free_total < least_ahead.item(pos):
                    run = queue[expired_pos[k:]]
                    end = n_visit
                else:  # the expired leases at consecutive positions from here
                    last = k + 1
                    while last < len(expired_pos) and expired_pos[last] == pos + last - k:
                        last += 1
                    end = pos + last - k
                    run = queue[pos:end]
                self.pos = end
                call(e, ExpiredTurns(run, self.t))
                return None
            pos += 1
            if num_gpus[j] > cluster.free_total:
                pos = after_too_big(pos, n_visit, cluster.free_total, least_ahead, expired_pos)
                continue
            if plain:  # a waiting job's turn (Visit.ask), without a frame of its own
                offer = e._offer_to(j, self.t)
                if offer is None:
                    continue
                if offer.__class__ is Offer:
                    self.pos = pos
                    self.offer = offer
                    return offer
                e._start(j, offer, self.t)
                continue
            self.pos = pos
            call(e, e.Visit(j, self.t))
            return None
        ends = self.ends
        if ends is not None:
            self.close(e)
            after_pass(e, ends[0], ends[1], self.t)
        done(e)
        return None

    def close(self, e: Engine) -> None:
        ends = self.ends
        if ends is not None and self.queue is not None:
            self.queue = None
            e._end_pass(ends[0])


class TurnsToHandOver(Frame):
    """:class:`PythonTurns` up to an offer a waiting job accepts, returning (its position, the
    tier), or up to a lease-expired job's turn, returning (its position, None): the compiled
    loop makes that start or turn and goes on from there (see :class:`CompiledTurn`); None at
    the pass's end. The turns before are waiting jobs' only, so the leases are told by their
    positions (``expired_pos``, increasing)."""

    __slots__ = ("expired_pos", "lease", "least_ahead", "offer", "pos", "queue", "t")

    def __init__(self, queue, least_ahead, expired_pos, pos: int, t: float) -> None:
        self.pc = 0
        self.queue, self.least_ahead, self.expired_pos, self.pos, self.t = queue, least_ahead, expired_pos, pos, t
        k = bisect_left(expired_pos, pos)
        self.lease = expired_pos.item(k) if k < expired_pos.size else len(queue)  # the next lease's turn
        self.offer = None

    def step(self, e: Engine, value):
        offer = self.offer
        if offer is not None:  # answered
            self.offer = None
            if value is not None:
                done(e, (self.pos - 1, e._checked(value, offer)))
                return None
        cluster = e.cluster
        queue, least_ahead, lease, t = self.queue, self.least_ahead, self.lease, self.t
        n_visit = len(queue)
        num_gpus = e._num_gpus_list
        pos = self.pos
        while pos < n_visit:
            if pos == lease:
                done(e, (pos, None))  # (renewals, preemptions and upgrades: the kernel's)
                return None
            j = queue.item(pos)
            pos += 1
            if num_gpus[j] > cluster.free_total:
                pos = after_too_big(pos, n_visit, cluster.free_total, least_ahead, self.expired_pos)
                continue
            offer = e._offer_to(j, t)
            if offer is None:
                continue
            if offer.__class__ is Offer:
                self.pos = pos
                self.offer = offer
                return offer
            done(e, (pos - 1, offer))
            return None
        done(e)
        return None


class Visit(Frame):
    """Job ``j``'s turn in a pass: a lease-expired job renews (its GPUs all unclaimed) or is
    preempted and then offered like a waiting job; a waiting job gets an offer if it fits."""

    __slots__ = ("j", "offer", "t")

    def __init__(self, j: int, t: float) -> None:
        self.pc = 0
        self.j, self.t = j, t

    def step(self, e: Engine, value):
        if self.pc:
            if self.pc == 1:  # the answer to the offer
                tier = e._checked(value, self.offer)
                if tier is not None:
                    e._start(self.j, tier, self.t)
            done(e)
            return None
        j, t = self.j, self.t
        cluster = e.cluster
        if j in e.expired_unvisited:
            e.expired_unvisited.discard(j)
            held = e.gpus[j]
            if cluster.all_free(held):
                self.pc = 2
                call(e, Renew(j, held, t))
                return None
            cluster.unmark(held)  # what it still had is free for anyone, itself included
            e._preempt(j, t)
        return self.ask(e)

    def ask(self, e: Engine):
        """The offer to the (waiting) job, or its start unasked, or nothing if it does not fit."""
        offer = e._offer_to(self.j, self.t)
        if offer is not None and offer.__class__ is Offer:
            self.offer = offer
            self.pc = 1
            return offer
        if offer is not None:
            e._start(self.j, offer, self.t)
        done(e)
        return None


class Renew(Frame):
    """A lease-expired running job's turn in a boundary pass; its GPUs ``held`` are all still
    free (nobody ahead claimed any). What happens depends on the renewal mode (see
    :class:`~dallygym.sim.engine.EngineConfig`): it keeps them, is offered better tiers, or bids
    again."""

    __slots__ = ("current", "free_now", "held", "hidden", "j", "offer", "t")

    def __init__(self, j: int, held: np.ndarray, t: float) -> None:
        self.pc = 0
        self.j, self.held, self.t = j, held, t
        self.hidden = None

    def step(self, e: Engine, value):
        if self.pc == 0:
            offer = self._offer(e)
            if offer is not None:
                self.offer = offer
                self.pc = 1
                return offer
            done(e)
            return None
        offer = self.offer
        if value is not None and value not in offer.tiers:
            raise EngineError(
                f"{e.policy.name!r} answered {value!r} to {offer!r}; accept one of the offered tiers or None"
            )
        self._answered(e, value)
        self.close(e)
        done(e)
        return None

    def _offer(self, e: Engine):
        """Up to the question: the renewal offer, or None if the turn ended without one."""
        j, held, t = self.j, self.held, self.t
        mode = e._renewal
        cluster = e.cluster
        self.current = current = e.tier.item(j)
        if mode == "keep" or (
            mode == "upgrade" and (current == e.best_possible_tier.item(j) or not e._upgrades_offered)
        ):
            cluster.allocate(j, held, e._machine_of(j))  # renewed on the same GPUs
            return None
        g = e._num_gpus_list[j]
        if mode == "upgrade" and not e._better_tier_in(cluster.free_per_machine, g, current):
            # Not even every free GPU (idle or reclaimable, its own included) would make a
            # better tier: nothing to offer.
            cluster.allocate(j, held, e._machine_of(j))
            return None
        cluster.unmark(held)  # its own GPUs count as free (and idle) for it
        # An upgrade may use idle GPUs only: GPUs of lease-expired jobs later in the order stay
        # theirs (a running job improves its placement without displacing anyone). A rebid
        # bids like a waiting job, for every free GPU.
        if mode == "upgrade" and not e._better_tier_in(cluster.idle_per_machine, g, current):
            cluster.allocate(j, held, e._machine_of(j))  # the idle GPUs make no better tier
            return None
        self.hidden = cluster.hide_marked() if mode == "upgrade" else None
        tiers = e._offer_tiers(g)
        self.free_now = None
        if mode == "upgrade":
            tiers = tuple(tier for tier in tiers if tier < current)
            self.free_now = free_now = cluster.free_per_machine.tobytes()
            if tiers and e._declined.get(j) == free_now:
                tiers = ()  # it declined these very GPUs before: its answer stands
            starvation = t - e.starve_anchor_s.item(j)
        else:
            starvation = 0.0  # rebid: its clock restarts at the boundary
        if tiers:
            return Offer(j, e._job_id_list[j], g, t, starvation, tiers, e._best_tier_list[j], TIERS[current], mode)
        self.offer = None
        self._answered(e, None)
        self.close(e)
        return None

    def _answered(self, e: Engine, answer) -> None:
        """What the answer (None: declined, or no offer made) does."""
        j, held, t, current = self.j, self.held, self.t, self.current
        cluster = e.cluster
        if answer is None:
            if e._renewal == "upgrade":
                if self.offer is not None:
                    e._declined[j] = self.free_now
                    if cluster.compiled:  # what the compiled loop compares (kernels.vector_key)
                        e._declined_key[j] = kernels.vector_key(cluster.free_per_machine)
                cluster.allocate(j, held, e._machine_of(j))  # keeps its GPUs at no cost
            else:
                e._preempt(j, t)  # rebid and declined: it waits, its GPUs free for anyone
            return
        if int(answer) == current:  # rebid won back at its own tier: the same GPUs, no cost
            cluster.allocate(j, held, e._machine_of(j))
            return
        e._close_segment(j, t)
        if int(answer) < current:
            e.upgrades[j] += 1
        else:
            e.preemptions[j] += 1  # a rebid moved it to a worse tier: it lost its GPUs
        e.starve_anchor_s[j] = t  # it gives up its GPUs and gets new ones at once
        e._start(j, TIERS[int(answer)], t, restarted=True, kind=e._renewal)

    def close(self, e: Engine) -> None:
        if self.hidden is not None:
            e.cluster.unhide(self.hidden)
            self.hidden = None


class ExpiredTurns(Frame):
    """The turns, in order, of lease-expired ``jobs`` with nothing else happening between them
    in the pass: those whose turn only renews their lease in place go together
    (``Engine._renew_in_place``), the others one at a time (:class:`Visit`)."""

    __slots__ = ("i", "jobs", "plan", "t")

    def __init__(self, jobs: np.ndarray, t: float) -> None:
        self.pc = 0
        self.jobs, self.t, self.i = jobs, t, 0
        self.plan = None

    def step(self, e: Engine, value):
        jobs = self.jobs
        n = jobs.size
        i = self.i
        if e._serve_compiled and i < n:
            # In a picked pass: the turns run compiled up to the first that needs Python
            # (kernels.pass_turns on these leases alone, every position one), which is the Visit's.
            if self.plan is None:  # (least demand ahead: none counts; every position a lease)
                self.plan = (np.zeros(n, dtype=np.int64), np.arange(n))
            i, _ = e._compiled_turns(jobs, *self.plan, i, self.t)
            if i < 0:
                done(e)
                return None
            self.i = i + 1
            call(e, e.Visit(jobs.item(i), self.t))
            return None
        if i < n:
            if e.renew_together and n - i > 1:
                i += e._renew_in_place(jobs[i:])
            if i < n:
                self.i = i + 1
                call(e, e.Visit(jobs.item(i), self.t))
                return None
        done(e)
        return None


class InOrder(Frame):
    """The rest of a picked pass in priority order, once the order no longer matters: ``jobs``
    in order, ``leases`` flagging the lease-expired ones, whose consecutive runs take their
    turns together (:class:`ExpiredTurns`)."""

    __slots__ = ("i", "jobs", "least", "runs", "t")

    def __init__(self, jobs: np.ndarray, leases: np.ndarray, t: float) -> None:
        self.pc = 0
        self.jobs, self.t, self.i = jobs, t, 0
        self.least = None
        if leases.any():
            # Runs of consecutive flags: (start, end, lease?) of each run of leases and of
            # waiting jobs; a run of waiting jobs is one turn per job.
            edges = np.flatnonzero(np.diff(leases.view(np.int8))) + 1
            starts = [0, *edges.tolist()]
            ends = [*edges.tolist(), jobs.size]
            self.runs = []
            for start, end in zip(starts, ends):
                if leases.item(start):
                    self.runs.append((start, end))
                else:
                    self.runs.extend((k, -1) for k in range(start, end))
        else:
            self.runs = None

    def step(self, e: Engine, value):
        i = self.i
        runs = self.runs
        if runs is None and e._serve_compiled and i < self.jobs.size:
            # Waiting jobs only: their turns run compiled up to the first that needs Python
            # (kernels.pass_turns, as a native pass's), which is the Visit's.
            if self.least is None:  # the least demand from each position on
                self.least = np.minimum.accumulate(e.num_gpus[self.jobs][::-1])[::-1].copy()
            i, _ = e._compiled_turns(self.jobs, self.least, e._no_positions, i, self.t)
            if i < 0:
                done(e)
                return None
        if i < (self.jobs.size if runs is None else len(runs)):
            self.i = i + 1
            if runs is None:
                call(e, e.Visit(self.jobs.item(i), self.t))
            else:
                start, end = runs[i]
                if end < 0:
                    call(e, e.Visit(self.jobs.item(start), self.t))
                else:
                    call(e, ExpiredTurns(self.jobs[start:end], self.t))
            return None
        done(e)
        return None


class Picked(Frame):
    """A pass whose order an agent chooses (``agent_picks``): see :class:`~dallygym.sim.engine.decisions.Pick`.

    ``queue`` is the pass's jobs in the policy's priority order. While the order matters (the
    candidates' GPU demand exceeds the free GPUs, lease-expired jobs' GPUs counted as free, and
    there are two candidates or more), each turn is a :class:`Pick`; once it no longer matters
    -- it never does again in the pass, since a job leaves the candidates either placed (taking
    exactly its demand) or waiting -- the rest go in priority order (:class:`InOrder`). With
    ``lease_picks="waiting"`` the lease-expired jobs are not candidates: serving a waiting job
    first serves, in order, every lease-expired job ranked ahead of it. Answering every pick
    with ``candidates[0]`` is exactly the native pass.

    The jobs not served yet are two masks over the queue's positions: ``waiting`` and
    ``leases`` (lease-expired: a job leaves the lease-expired set only when it is served, so
    the flag holds while it is in the pass), with their counts and GPU demand kept as counters.
    A pick costs a few array operations, no Python loop over the queue. Where the engine
    accepts offers itself (``auto_accept``, as ``DallyQueue-v0`` sets it from its offer rule),
    the served job's turn, the turns of the leases served ahead of it and the rest of the pass
    in order run compiled (:func:`dallygym.sim.kernels.pass_turns`, as in a native pass) up to
    the first turn that needs Python, which is a :class:`Visit`.
    """

    __slots__ = (
        "at",
        "biggest_waiting",
        "boundary",
        "demand",
        "g",
        "guarded",
        "lease_demand",
        "leases",
        "n_leases",
        "n_waiting",
        "pick",
        "q",
        "t",
        "waiting",
    )
    SETUP, GUARDED, TURN, ANSWERED, AHEAD = 0, 1, 2, 3, 4

    def __init__(self, queue: list[int], t: float, boundary: bool) -> None:
        self.pc = 0
        self.q = np.asarray(queue, dtype=np.int64)
        self.t, self.boundary = t, boundary
        self.pick = None
        self.at = -1

    def step(self, e: Engine, value):
        pc = self.pc
        if pc == self.SETUP:
            self._setup(e)
            pc = self.GUARDED
        if pc == self.GUARDED:
            if self.guarded:  # guarded leases are served before any pick: nobody can claim their GPUs
                self.pc = self.GUARDED
                call(e, e.Visit(self.guarded.pop(0), self.t))
                return None
            self.pc = self.TURN
        elif pc == self.ANSWERED:
            self.pc = self.TURN
            return self._serve(e, value)
        elif pc == self.AHEAD:
            self.pc = self.TURN
            call(e, e.Visit(self.q.item(self.at), self.t))
            return None
        return self._turn(e)

    def _setup(self, e: Engine) -> None:
        q = self.q
        expired = e.expired_unvisited
        self.g = g = e.num_gpus[q]
        flags = e._lease_flags
        if expired:
            marked = np.fromiter(expired, dtype=np.int64, count=len(expired))
            flags[marked] = True
            leases = flags[q]
            flags[marked] = False
        else:
            leases = np.zeros(q.size, dtype=bool)
        waiting = ~leases
        self.guarded = []
        if self.boundary and expired and e.lease_guard is not None:
            at_lease = np.flatnonzero(leases)
            guarded = np.asarray(e.lease_guard(e, q[at_lease]), dtype=bool)
            if guarded.shape != (at_lease.size,):
                raise EngineError(f"lease_guard returned {guarded.shape} flags for {at_lease.size} lease-expired jobs")
            first = at_lease[guarded]
            if first.size:
                leases[first] = False
                self.guarded = q[first].tolist()
        self.leases, self.waiting = leases, waiting
        self.n_leases = int(np.count_nonzero(leases))
        self.n_waiting = int(np.count_nonzero(waiting))
        self.lease_demand = int(np.add.reduce(g, where=leases))
        self.demand = self.lease_demand + int(np.add.reduce(g, where=waiting))
        self.biggest_waiting = int(np.maximum.reduce(g, where=waiting, initial=0))
        e._queue_position[q] = np.arange(q.size)

    def _turn(self, e: Engine):
        """The next turn: a pick to ask (returned), the rest of the pass in order, or its end."""
        if not (self.n_waiting or self.n_leases):
            done(e)
            return None
        q, g, waiting, leases = self.q, self.g, self.waiting, self.leases
        pick_leases = e.pick_leases
        free = e.cluster.free_total
        if self.biggest_waiting > free:
            # A waiting job too big for the free GPUs now stays too big all pass long.
            waiting &= g <= free
            self.n_waiting = int(np.count_nonzero(waiting))
            self.demand = self.lease_demand + int(np.add.reduce(g, where=waiting))
            self.biggest_waiting = int(np.maximum.reduce(g, where=waiting, initial=0))
        at_cand = (waiting | leases if pick_leases else waiting).nonzero()[0]
        n_cand = at_cand.size
        # One candidate is a choice only between serving it and stopping (waiting picks).
        may_stop = self.demand > free and (n_cand > 1 or not pick_leases) and e._may_stop()
        if self.demand <= free or not n_cand or (n_cand < 2 and not may_stop):
            alive = waiting | leases
            done(e)  # (the rest is the pass's: this frame's caller gets what InOrder returns)
            call(e, InOrder(q[alive], leases[alive], self.t))
            return None
        jobs = q[at_cand]
        candidates = jobs.tolist()
        self.pick = pick = Pick(self.t, tuple(candidates), may_stop, self.boundary)
        e._pick_jobs = (pick, jobs)  # for the environment's observation
        answer = None if e.pick_guard is None else e.pick_guard(e, candidates)
        if answer is None:
            self.pc = self.ANSWERED
            return pick
        if answer not in candidates:
            raise EngineError(f"pick_guard served {answer!r}, which is not a candidate of {pick!r}")
        return self._serve(e, answer)

    def _serve(self, e: Engine, answer):
        """Serve the pick's ``answer`` (None: stop the pass)."""
        q, g, waiting, leases, pick = self.q, self.g, self.waiting, self.leases, self.pick
        pick_leases = e.pick_leases
        if answer is None:
            if not pick.may_stop:
                raise EngineError(
                    f"stopped the pass at {pick!r}, where stopping is not allowed (nothing would keep running)"
                )
            e._stop_pass(q[waiting | leases].tolist())
            done(e)
            return None
        at = e._position_in(q, e._queue_position, answer)
        if at < 0 or not (waiting[at] or (pick_leases and leases[at])):
            raise EngineError(f"picked {answer!r}, which is not a candidate of {pick!r}") from None
        # Served: placed (taking its demand from the free GPUs), renewed, or left waiting.
        if leases[at]:
            leases[at] = False
            self.n_leases -= 1
            self.lease_demand -= g.item(at)
        else:
            waiting[at] = False
            self.n_waiting -= 1
        self.demand -= g.item(at)
        # Without lease picks, the lease-expired jobs ranked ahead of the answer go first: they
        # take their turns with nothing between them (the jobs ranked between two of them wait
        # or were served already), together where they can be.
        if not pick_leases:
            ahead = leases[:at].nonzero()[0]
            if ahead.size:
                leases[ahead] = False
                self.n_leases -= ahead.size
                ahead_demand = int(np.add.reduce(g[ahead]))
                self.lease_demand -= ahead_demand
                self.demand -= ahead_demand
                self.at = at
                self.pc = self.AHEAD
                call(e, ExpiredTurns(q[ahead], self.t))
                return None
        j = q.item(at)
        if e._serve_compiled and e.state.item(j) == WAITING:
            # A waiting job whose offer the engine accepts itself and whose start needs nothing
            # from Python: its turn is taken compiled, as in a native pass (kernels.pass_turns on
            # the one job); any other turn is the Visit's.
            one = e._one_job
            one[0] = j
            e._one_least[0] = g.item(at)
            stop, _ = e._compiled_turns(one, e._one_least, e._no_positions, 0, self.t)
            if stop < 0:
                return self._turn(e)
        call(e, e.Visit(j, self.t))
        return None
