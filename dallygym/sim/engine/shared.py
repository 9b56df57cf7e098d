"""Jobs that share links slow each other (:mod:`dallygym.sim.contention`): the engine's part.

With a contention model on (``EngineConfig.contention``), every start and every end of a
placement that crosses machines changes the set of jobs on some link, and so possibly every
such job's share. The shares are found again once per event, after all its changes and before
time moves on (:meth:`SharedLinks._reshare`, called when the next event is chosen); a job whose
speed changes closes its run segment at that instant and opens one at the new rate, so progress
is integrated exactly between events. (Within a pass, a job just started shows its speed alone
until then: :meth:`SharedLinks.update_shares` brings ``speed`` and ``link_share`` up to date
on demand.) The compiled event loop and compiled pass turns start and end placements inside
the kernels: the links of those placements are taken from their logs
(:meth:`~dallygym.sim.engine.compiled.CompiledPath._links_from_log`), and the loop stops for
the shares to be found after each event that starts or ends a placement across machines
(``kernels.STOP_RESHARE``).
"""

from __future__ import annotations

import heapq

import numpy as np

from ..contention import Links, fair_shares
from ..latency import LatencyModel
from .decisions import EngineError


class SharedLinks:
    """The parts of :class:`~dallygym.sim.engine.Engine` that share links between jobs."""

    def _init_links(self) -> None:
        """The links and their users (None without a contention model)."""
        contention = self.config.contention_model
        self._links: Links | None = None
        #: Each job's share of its alone rate on the links it crosses (1 without contention).
        self.link_share = np.ones(self.n)
        if not contention.on:
            return
        latency = self.latency
        if type(latency).shared_speed_factor is LatencyModel.shared_speed_factor or (
            contention.mode == "interleaved" and type(latency).link_duty is LatencyModel.link_duty
        ):
            raise EngineError(
                f"contention {contention.mode!r} needs a latency model that prices shared links "
                f"(link_rates, shared_speed_factor, and link_duty for 'interleaved'); {latency!r} has none"
            )
        self._links = Links(self.spec, latency.machine_link_bytes_per_s(), contention)
        #: The links each running job that crosses machines uses, and its alone rate on each.
        self._on_links: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._shared_speeds: dict[tuple[int, object, float], float] = {}
        self._links_changed = False

    def _join_links(self, j: int, gpus: np.ndarray, shape) -> None:
        """Job ``j`` started on ``gpus`` (of ``shape``): the links it crosses, if any."""
        used = self._links.asked(gpus, *self.asked_rates(self.model[j], shape))
        if not used[0].size:
            return
        self._on_links[j] = used
        self._links_changed = True

    def asked_rates(self, model: str, shape) -> tuple[float, float]:
        """What a job of ``model`` on ``shape`` asks of each of its machine links and rack uplinks
        under the contention model: its alone rates, times its duty under ``"interleaved"``."""
        machine_rate, uplink_rate = self.latency.link_rates(shape)
        if self._links.contention.mode == "interleaved":
            duty = self.latency.link_duty(model, shape)
            return machine_rate * duty, uplink_rate * duty
        return machine_rate, uplink_rate

    def _leave_links(self, j: int) -> None:
        """Job ``j``'s placement ended: its links are free of it."""
        if self._on_links.pop(j, None) is not None:
            self._links_changed = True
        self.link_share[j] = 1.0

    def link_load(self) -> np.ndarray | None:
        """What the running jobs ask of each shared link (their rates alone, summed) over its
        capacity: machine ``m``'s link at ``m``, rack ``r``'s uplink at ``num_machines + r``
        (above 1: the link is shared out). None without a contention model."""
        links = self._links
        if links is None:
            return None
        return links.use(self._on_links.values()) / links.capacity

    def update_shares(self) -> None:
        """Bring every running job's ``link_share`` and ``speed`` up to date with the placements
        made since the last event (the engine does it itself before time moves on)."""
        if self._links is not None:
            self._reshare()

    def _reshare(self) -> None:
        """The shares of every job on a shared link after the event's changes, and a new run
        segment at ``now_s`` for each job whose share they change."""
        if not self._links_changed:
            return
        self._links_changed = False
        jobs = sorted(self._on_links)
        if not jobs:
            return
        used = [self._on_links[j] for j in jobs]
        shares = fair_shares([u[0] for u in used], [u[1] for u in used], self._links.capacity)
        link_share = self.link_share
        for j, share in zip(jobs, shares.tolist()):
            if share == link_share.item(j):  # (a job that joined runs at its speed alone: share 1)
                continue
            link_share[j] = share
            speed = self._speed_at_share(j, share)
            if speed != self.speed.item(j):
                self._resegment(j, speed)

    def _speed_at_share(self, j: int, share: float) -> float:
        shape = self._last_shape_of(j)
        if share == 1.0:
            return self._speed_factor(j, shape)
        key = (self._model_index_list[j], shape, share)
        speed = self._shared_speeds.get(key)
        if speed is None:
            speed = self._shared_speeds[key] = float(self.latency.shared_speed_factor(self.model[j], shape, share))
        return speed

    def _resegment(self, j: int, speed: float) -> None:
        """Job ``j`` runs at ``speed`` from ``now_s``: its segment keeps its start (the end of
        any restart overhead, which the time accounting reads) and its iterations so far, and
        goes on at the new rate; its finish time follows."""
        t = self.now_s
        start = self.seg_start_s.item(j)
        rate = speed / self._iter_time_list[j]
        if t > start:
            done = self.seg_done0.item(j) + self.rate.item(j) * (t - start)
            self.seg_done0[j] = done - rate * (t - start)  # (so that done(t') = done + rate (t' - t))
            finish = t + (self._total_iterations_list[j] - done) / rate
        else:  # still restoring its checkpoint: nothing done yet
            finish = start + (self._total_iterations_list[j] - self.seg_done0.item(j)) / rate
        self.speed[j] = speed
        self.rate[j] = rate
        self.finish_s[j] = finish
        if self._finish_heap is not None:
            heapq.heappush(self._finish_heap, (finish, j))
