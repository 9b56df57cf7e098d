"""Dally: network-sensitive priority + delay scheduling with auto-tuned timers (SPEC §5.1).

The Dally paper (§IV-B) schedules with three pieces, all here:

* **priority** (§IV-B1): offers go to jobs in increasing order of
  ``Nw_sens = W_compl / T_norm`` (the ideal time of the iterations done over the time run),
  so the jobs most slowed by the network are offered first. For a job that has never run the
  formula is 0/0; option ``never_run_nw_sens`` (:data:`NEVER_RUN_NW_SENS`) says what it is:
  ``"zero"`` (default, the reference simulator's and SPEC's), ``"one"`` or ``"best"``. The
  engine computes it (:meth:`Engine.nw_sens`, compiled and Python alike).
* **delay scheduling** (Algorithm 1 "On Resource Offer"): accept a machine placement at
  once; otherwise wait until the job has starved ``T_Mc``, then accept a rack placement;
  otherwise wait until it has starved ``T_Rk``, then accept any placement.
* **auto-tuner** (Algorithm 2 "Get Tuned Timers", :class:`AutoTuner`): the timers for a GPU
  demand are mean + 2 sample standard deviations of the starvation times with which recent
  jobs of that demand accepted machine (for ``T_Mc``) or rack (for ``T_Rk``) placements;
  option ``tuner_limit`` (:data:`TUNER_LIMITS`) says what the "history time limit" bounds:
  the recording time (``"window"``, default) or the recorded waits (``"value"``).

The readings of the paper's open points, their sources and the profiles that group them:
``docs/profiles.md`` and :mod:`dallygym.sim.profiles`.

The paper's variants (§V-C) share the priority and differ only in the timers:
``dally`` (auto-tuned), ``dally-manual`` (12 h / 24 h), ``dally-nowait`` (0 / 0) and
``dally-consolidated`` (wait forever for the best tier the job can fit in).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from .. import kernels
from ..cluster import ClusterSpec, ClusterState, Tier
from .base import Policy

if TYPE_CHECKING:
    from ..engine import Engine, Offer

HOUR_S = 3600.0

#: Manual delay timers (paper §IV-B2, fact): 12 h for machine-level consolidation and another
#: 12 h (24 h of starvation in all) for rack-level consolidation.
MANUAL_T_MACHINE_S = 12 * HOUR_S
MANUAL_T_RACK_S = 24 * HOUR_S
_NO_TIMERS = (0.0, 0.0)  # a job bigger than a rack waits for nothing (§IV-B2)
# The tiers as module constants for decide(), which runs at every offer: reading an enum
# member off its class costs about ten times a global's lookup.
_MACHINE, _RACK, _NETWORK = Tier.MACHINE, Tier.RACK, Tier.NETWORK
_MACHINE_LEVEL, _RACK_LEVEL = int(_MACHINE), int(_RACK)

#: Default history window: this many hours on a cluster of :data:`HISTORY_REFERENCE_GPUS`
#: GPUs, scaled inversely with the cluster's GPU count (see :func:`default_history_s`).
HISTORY_REFERENCE_HOURS = 24.0
HISTORY_REFERENCE_GPUS = 512  # the paper's 8-rack cluster (8 racks x 8 machines x 8 GPUs)

#: Readings of a never-run job's Nw_sens (0/0 in the paper's formula), see DallyPolicy:
#: ``"zero"`` -- 0, the highest priority (the reference simulator's; SPEC §5.1);
#: ``"one"`` -- 1, the value of a job that has endured no network slowdown;
#: ``"best"`` -- the speed factor of the job's best possible placement (its Nw_sens after a
#: first lease run there, with no restart overhead).
NEVER_RUN_NW_SENS = ("zero", "one", "best")
#: Readings of Algorithm 2's "history time limit" (lines 3-4 and 9-10), see AutoTuner:
#: ``"window"`` -- entries recorded more than the limit ago are left out (a sliding window over
#: recording time); ``"value"`` -- recorded waits longer than the limit are left out (the
#: literal test ``time > HISTORY_TIME_LIMIT`` on the listed starvation times).
TUNER_LIMITS = ("window", "value")

#: Optional reference-simulator knobs (off by default: the paper has neither).
FLOOR_MACHINE_LEASES = 6
FLOOR_RACK_LEASES = 12
CAP_MACHINE_FRACTION = 0.8
CAP_RACK_FRACTION = 1.0


def default_history_s(spec: ClusterSpec) -> float:
    """The default auto-tuner history window for a cluster, in seconds.

    ``24 h x 512 / num_gpus``: 24 h on the paper's 8-rack cluster (512 GPUs), 96 h on 2 racks,
    48 h on 4, 12 h on 16. The paper asks for a smaller window on a larger cluster "because
    more jobs get placed over time in a larger cluster" and leaves the value open. Placements
    per hour grow roughly in proportion to the GPU count, so an inversely proportional window
    keeps about the same number of recent acceptances in each list whatever the cluster size;
    24 h on 8 racks is the manual rack timer, so the window covers one full manual waiting
    period there.
    """
    return HISTORY_REFERENCE_HOURS * HOUR_S * HISTORY_REFERENCE_GPUS / spec.num_gpus


def best_placement_shape(num_gpus: int, spec: ClusterSpec) -> tuple:
    """The shape of the most consolidated placement of ``num_gpus`` GPUs on ``spec``: whole
    machines filled first, then whole racks (``((8, 8, 4),)`` for 20 GPUs on 8-GPU machines)."""
    g = int(num_gpus)
    gpm, gpr = spec.gpus_per_machine, spec.gpus_per_rack
    racks = []
    while g > 0:
        in_rack = min(g, gpr)
        machines = [gpm] * (in_rack // gpm) + ([in_rack % gpm] if in_rack % gpm else [])
        racks.append(tuple(machines))
        g -= in_rack
    return tuple(racks)


def _tuned_reference(values: np.ndarray) -> float:
    """Algorithm 2, lines 13-14: the mean of ``values`` plus two sample standard deviations
    (numpy's own reductions written out: the same arithmetic, bit for bit, as mean() and
    std(ddof=1) without their overhead on short arrays). The definition that
    :func:`dallygym.sim.kernels.mean_plus_two_sd` follows (run with the kernels off)."""
    n = values.size
    mean = np.add.reduce(values) / n
    deviation = values - mean
    return float(mean + 2.0 * math.sqrt(np.add.reduce(deviation * deviation) / (n - 1)))


class AutoTuner:
    """Dally's delay-timer auto-tuner (paper §IV-B3, Algorithm 2).

    Every acceptance at MACHINE or RACK tier is recorded (Algorithm 1, lines 7 and 15) in a
    global list keyed by (tier, GPU demand): the job's starvation time, stamped with the time
    it was recorded. For demand ``g``::

        T_Mc = mean + 2 x std(machine list of g)      T_Rk = mean + 2 x std(rack list of g)

    with the *sample* standard deviation (ddof = 1), over the entries inside the history
    window only. The paper's ``HISTORY_TIME_LIMIT`` is a "sliding window" over the wait-time
    lists (§IV-B3): here it is a window over *recording time* -- an entry counts while its
    recording time is ``>= now_s - history_s`` -- which is what SPEC §5.1 calls the history
    window. (Algorithm 2's literal test ``time > HISTORY_TIME_LIMIT`` could also be read as
    dropping long starvation *values*; the text's "sliding window" and "moving averages" say
    otherwise.) A list with fewer than two entries in the window has no sample standard
    deviation: that timer falls back to its manual value (12 h / 24 h by default).

    Optional knobs of the paper's reference simulator, off by default (the paper has neither):
    ``floors`` keeps a tuned ``T_Mc >= 6`` leases and ``T_Rk >= 12`` leases; ``caps`` keeps a
    tuned ``T_Mc <= 0.8 H`` and ``T_Rk <= H`` (``H = history_s``). They apply to tuned values,
    not to the manual fallback; a cap wins over a floor if they cross.

    ``limit`` chooses the reading of Algorithm 2's test ``time > HISTORY_TIME_LIMIT`` (lines 3
    and 9): ``"window"`` (default) is the recording-time window above; ``"value"`` takes the
    test literally -- ``time`` is a listed starvation time, and one longer than ``history_s``
    is removed (so never counted), whenever it was recorded. With ``"value"`` there is no
    recording-time window: every wait up to the limit counts, and a tuned timer is at most
    the limit plus two sample standard deviations of values in ``[0, limit]``.

    Entries must be recorded in non-decreasing ``now_s`` (the engine's clock). Queries are
    cheap: a binary search for the window start per list, and the statistics are recomputed
    only when a list's window changed (a new entry, or an old one expired).

    Args:
        history_s: the history window in seconds (``math.inf``: keep everything).
        t_machine_s, t_rack_s: manual fallback timers in seconds.
        lease_s: the lease, the unit of the floors.
        floors, caps: the reference simulator's knobs (see above).
        limit: ``"window"`` or ``"value"`` (:data:`TUNER_LIMITS`, see above).
    """

    def __init__(
        self,
        history_s: float,
        t_machine_s: float = MANUAL_T_MACHINE_S,
        t_rack_s: float = MANUAL_T_RACK_S,
        *,
        lease_s: float = HOUR_S,
        floors: bool = False,
        caps: bool = False,
        limit: str = "window",
    ) -> None:
        if not (history_s > 0):  # also rejects NaN
            raise ValueError(f"history_s must be a positive number of seconds, got {history_s!r}")
        if limit not in TUNER_LIMITS:
            raise ValueError(f"unknown tuner_limit {limit!r}; choose one of {', '.join(TUNER_LIMITS)}")
        self.limit = limit
        self._by_value = limit == "value"
        for name, value in (("t_machine_s", t_machine_s), ("t_rack_s", t_rack_s), ("lease_s", lease_s)):
            if not (value >= 0):
                raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
        self.history_s = float(history_s)
        self.t_machine_s = float(t_machine_s)
        self.t_rack_s = float(t_rack_s)
        self.lease_s = float(lease_s)
        self.floors = bool(floors)
        self.caps = bool(caps)
        # (tier, g) -> recording times (sorted) and starvation times, appended in step.
        self._times: dict[tuple[int, int], list[float]] = {}
        self._values: dict[tuple[int, int], list[float]] = {}
        # (tier, g) -> (window start, window end, tuned timer) of the last computation.
        self._cache: dict[tuple[int, int], tuple[int, int, float]] = {}
        # (tier, g) -> the starvation times as a float array (room to grow) and how many of the
        # list it holds: a window is a view of it, and each entry is converted once.
        self._arrays: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        self._last_s = -math.inf
        #: How many entries were ever recorded.
        self.stamp = 0
        #: GPU demand -> how many entries its lists kept: a demand's timers change only when
        #: time moves or this count does (DallyPolicy.timers remembers them in between).
        self.kept: dict[int, int] = {}
        if floors:
            self._floor = {
                int(Tier.MACHINE): FLOOR_MACHINE_LEASES * self.lease_s,
                int(Tier.RACK): FLOOR_RACK_LEASES * self.lease_s,
            }
        if caps:
            self._cap = {
                int(Tier.MACHINE): CAP_MACHINE_FRACTION * self.history_s,
                int(Tier.RACK): CAP_RACK_FRACTION * self.history_s,
            }

    def record(self, tier: Tier, num_gpus: int, starvation_s: float, now_s: float) -> None:
        """Append an acceptance (Algorithm 1, lines 7 and 15); NETWORK ones are not kept."""
        if tier == Tier.NETWORK:
            return
        if not (starvation_s >= 0):
            raise ValueError(f"starvation_s must be >= 0, got {starvation_s!r}")
        if now_s < self._last_s:
            raise ValueError(f"entries must be recorded in time order: {now_s} after {self._last_s}")
        self._last_s = now_s
        self.stamp += 1
        if self._by_value and starvation_s > self.history_s:
            return  # Algorithm 2, lines 3-4 / 9-10, read literally: removed, never counted
        key = (int(tier), int(num_gpus))
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = []
            self._values[key] = []
        times.append(float(now_s))
        self._values[key].append(float(starvation_s))
        self.kept[key[1]] = self.kept.get(key[1], 0) + 1

    def record_many(self, tiers: np.ndarray, num_gpus: np.ndarray, starvation_s: np.ndarray, now_s: np.ndarray) -> None:
        """:meth:`record` for each entry of the arrays, in order (the same checks, the same
        lists); tiers as ints."""
        network = int(Tier.NETWORK)
        tuned, values = self._times, self._values
        last = self._last_s
        by_value, limit = self._by_value, self.history_s
        kept = self.kept
        try:
            for level, g, waited, at in zip(
                np.asarray(tiers).tolist(),
                np.asarray(num_gpus).tolist(),
                np.asarray(starvation_s, dtype=np.float64).tolist(),
                np.asarray(now_s, dtype=np.float64).tolist(),
            ):
                if level == network:
                    continue
                if not (waited >= 0):
                    raise ValueError(f"starvation_s must be >= 0, got {waited!r}")
                if at < last:
                    raise ValueError(f"entries must be recorded in time order: {at} after {last}")
                last = at
                if by_value and waited > limit:
                    self.stamp += 1
                    continue  # as in record()
                key = (level, g)
                listed = tuned.get(key)
                if listed is None:
                    listed = tuned[key] = []
                    values[key] = []
                listed.append(at)
                values[key].append(waited)
                kept[g] = kept.get(g, 0) + 1
                self.stamp += 1
        finally:
            self._last_s = last

    def timers(self, num_gpus: int, now_s: float) -> tuple[float, float]:
        """``(T_Mc, T_Rk)`` in seconds for a job of ``num_gpus`` GPUs at ``now_s`` (Algorithm 2).

        These are the tuned lists' values only; the size rules of Algorithm 1 (a job bigger
        than a machine has ``T_Mc = 0``, ...) are the policy's (:meth:`DallyPolicy.timers`).
        """
        g = int(num_gpus)
        return (
            self._timer(_MACHINE_LEVEL, g, now_s, self.t_machine_s),
            self._timer(_RACK_LEVEL, g, now_s, self.t_rack_s),
        )

    def _timer(self, tier: int, g: int, now_s: float, fallback: float) -> float:
        key = (tier, g)
        times = self._times.get(key)
        if times is None:
            return fallback
        hi = len(times)
        # Algorithm 2, lines 2-5 / 8-11: entries recorded before the window are left out
        # ("window"); with "value" the long waits were never kept (record) and all others count.
        lo = 0 if self._by_value else bisect_left(times, now_s - self.history_s)
        if hi - lo < 2:
            return fallback
        cached = self._cache.get(key)
        if cached is not None and cached[0] == lo and cached[1] == hi:
            return cached[2]
        # Algorithm 2, lines 13-14: mean + 2 sample standard deviations.
        values = self._window(key, lo, hi)
        timer = kernels.mean_plus_two_sd(values) if ClusterState.compiled else _tuned_reference(values)
        if self.floors:
            timer = max(timer, self._floor[tier])
        if self.caps:
            timer = min(timer, self._cap[tier])
        self._cache[key] = (lo, hi, timer)
        return timer

    def _window(self, key: tuple[int, int], lo: int, hi: int) -> np.ndarray:
        """The starvation times ``lo:hi`` of ``key``'s list, as a view of its array (the
        entries recorded since the last call are copied in; the array doubles when full)."""
        buf, held = self._arrays.get(key, (None, 0))
        if held < hi:
            if buf is None or buf.size < hi:
                grown = np.empty(max(2 * hi, 16))
                if held:
                    grown[:held] = buf[:held]
                buf = grown
            buf[held:hi] = self._values[key][held:hi]
            self._arrays[key] = (buf, hi)
        return buf[lo:hi]

    def entries(self, tier: Tier, num_gpus: int, now_s: float | None = None) -> np.ndarray:
        """The starvation times (s) recorded for (tier, demand), oldest first, as a read-only
        array: all of them, or only those inside the history window at ``now_s``."""
        key = (int(tier), int(num_gpus))
        times = self._times.get(key, [])
        lo = 0 if now_s is None or self._by_value else bisect_left(times, now_s - self.history_s)
        out = np.array(self._values.get(key, [])[lo:], dtype=np.float64)
        out.flags.writeable = False
        return out

    def __repr__(self) -> str:
        return (
            f"AutoTuner(history_s={self.history_s:g}, t_machine_s={self.t_machine_s:g}, "
            f"t_rack_s={self.t_rack_s:g}, floors={self.floors}, caps={self.caps}, limit={self.limit!r})"
        )


class DallyPolicy(Policy):
    """Dally with auto-tuned delay timers (paper §IV-B; SPEC §5.1).

    * Priority: ``Nw_sens`` (lower is offered first; never-run jobs have the value of
      ``never_run_nw_sens``, by default 0, so they come first; ties by earlier arrival, then
      job index -- the engine's rule).
    * Offer decision: Algorithm 1 (see :meth:`decide`) with the timers of :meth:`timers`.
    * Bookkeeping: every new placement at MACHINE or RACK tier is recorded in the
      :class:`AutoTuner` (Algorithm 1, lines 7 and 15). The engine calls :meth:`on_start` for
      every placement, whoever decided it, so the timers stay right when an agent decides.

    Args:
        history_s: the auto-tuner's history window in seconds; None (default) picks
            :func:`default_history_s` for the cluster at :meth:`reset` (24 h on 512 GPUs,
            inversely proportional to the GPU count, following the paper's "smaller window for
            larger clusters").
        t_machine_s, t_rack_s: the manual timers, used while a list has fewer than two
            entries in the window (default 12 h and 24 h, the paper's values).
        floors, caps: the reference simulator's clamps of tuned timers (default off).
        never_run_nw_sens: a never-run job's Nw_sens (the formula's 0/0), one of
            :data:`NEVER_RUN_NW_SENS`: ``"zero"`` (default; the reference simulator's and
            SPEC §5.1's: every new job outranks every job that has run), ``"one"`` (the value
            of a job that has endured no network slowdown, so it ranks with jobs running at
            full speed, ahead of every network-slowed one), ``"best"`` (the speed factor of its
            best possible placement, :func:`best_placement_shape`: the Nw_sens it would have
            after running there). Given to the engine through :meth:`never_run_nw_sens_of`.
        tuner_limit: ``"window"`` (default) or ``"value"`` -- what the auto-tuner's history
            limit bounds (:class:`AutoTuner`, ``limit``). Either way the limit is ``history_s``,
            by default :func:`default_history_s` (24 h on the paper's 512 GPUs, scaled
            inversely with the GPU count as §IV-B asks: "in larger clusters, a smaller history
            time limit is advised").

    Choices the paper leaves open, and where the paper's reference simulator differs (SPEC §5):

    * Timer clamps: the reference clamped tuned timers to floors of 6 / 12 leases and caps of
      0.8 H / H; the paper has no such clamps, so they are off unless asked for.
    * Zero waits: every machine or rack acceptance is recorded, including those with zero
      starvation (Algorithm 1 records every acceptance); the reference recorded only waits of
      at least one lease, which raises the tuned timers. Upgrades of running jobs at lease
      renewal are not recorded (no waiting job accepted anything).
    * Nw_sens ties: broken by earlier arrival, then job index (the engine's rule; never-run
      jobs all have Nw_sens 0, so among them the order is FIFO). The reference broke ties by
      fewer GPUs held, then longest starving.
    * Lease renewal: the engine's ``EngineConfig.renewal`` (default ``"upgrade"``: a
      lease-expired job below its best tier is offered better tiers from idle GPUs and its own
      and accepts at once, see :meth:`decide`). The reference ended every lease and re-admitted
      every job in Nw_sens order, delay timers applying again: ``renewal="rebid"``.
    """

    name: ClassVar[str] = "dally"
    #: Whether acceptances feed an :class:`AutoTuner` whose timers the policy uses.
    auto_tuned: ClassVar[bool] = True
    # decide() accepts an offer of the job's best possible tier at once (Algorithm 1: lines
    # 5-8 for a job that fits a machine; a bigger job has T_Mc = 0, and T_Rk = 0 too beyond a
    # rack); on_start() records the tier, GPUs and starvation it is given, nothing else.
    auto_accept: ClassVar[str | None] = "best-possible"
    batched_on_start: ClassVar[bool] = True
    priority_keys: ClassVar[str | None] = "nw_sens"  # priority() below

    def __init__(
        self,
        history_s: float | None = None,
        t_machine_s: float = MANUAL_T_MACHINE_S,
        t_rack_s: float = MANUAL_T_RACK_S,
        floors: bool = False,
        caps: bool = False,
        never_run_nw_sens: str = "zero",
        tuner_limit: str = "window",
    ) -> None:
        if never_run_nw_sens not in NEVER_RUN_NW_SENS:
            raise ValueError(
                f"unknown never_run_nw_sens {never_run_nw_sens!r}; choose one of {', '.join(NEVER_RUN_NW_SENS)}"
            )
        if tuner_limit not in TUNER_LIMITS:
            raise ValueError(f"unknown tuner_limit {tuner_limit!r}; choose one of {', '.join(TUNER_LIMITS)}")
        self.never_run_nw_sens = never_run_nw_sens
        self.tuner_limit = tuner_limit
        if history_s is not None and not (history_s > 0):
            raise ValueError(f"history_s must be a positive number of seconds, got {history_s!r}")
        for name, value in (("t_machine_s", t_machine_s), ("t_rack_s", t_rack_s)):
            if not (value >= 0):
                raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
        self.history_s = history_s
        self.t_machine_s = float(t_machine_s)
        self.t_rack_s = float(t_rack_s)
        self.floors = floors
        self.caps = caps
        self.tuner: AutoTuner | None = None
        self._gpus_per_machine: int | None = None
        self._gpus_per_rack = 0
        self._forget()

    def reset(self, view: Engine, rng: np.random.Generator) -> None:
        spec = view.spec
        self._gpus_per_machine = spec.gpus_per_machine
        self._gpus_per_rack = spec.gpus_per_rack
        if self.auto_tuned:
            history = default_history_s(spec) if self.history_s is None else self.history_s
            self.tuner = AutoTuner(
                history,
                self.t_machine_s,
                self.t_rack_s,
                lease_s=view.config.lease_s,
                floors=self.floors,
                caps=self.caps,
                limit=self.tuner_limit,
            )
        self._forget()

    def _forget(self) -> None:
        # GPU demand -> (the tuner's kept count for it, its timers) at time _memo_at (see timers).
        self._memo: dict[int, tuple[int, tuple[float, float]]] = {}
        self._memo_at = None

    def priority(self, view: Engine, jobs: np.ndarray) -> np.ndarray:
        # §IV-B1: offers in increasing order of Nw_sens (never-run jobs: never_run_nw_sens_of).
        return view.nw_sens(jobs)

    def never_run_nw_sens_of(self, view: Engine) -> float | np.ndarray:
        """Each job's Nw_sens while it has never run (option ``never_run_nw_sens``); the engine
        asks once, at the start of the run, and uses it wherever it computes Nw_sens."""
        if self.never_run_nw_sens == "zero":
            return 0.0
        if self.never_run_nw_sens == "one":
            return 1.0
        spec, latency = view.spec, view.latency
        speeds: dict[tuple[str, int], float] = {}
        out = np.empty(view.n)
        for j, (model, g) in enumerate(zip(view.model.tolist(), view.num_gpus.tolist())):
            s = speeds.get((model, g))
            if s is None:
                s = speeds[(model, g)] = float(latency.speed_factor(model, best_placement_shape(g, spec)))
            out[j] = s
        return out

    def base_timers(self, num_gpus: int, now_s: float) -> tuple[float, float]:
        """``(T_Mc, T_Rk)`` before the size rules: the auto-tuner's (variants override). With a
        tuner, :meth:`timers` remembers the answer while time and the tuner stand still, so an
        override must depend on nothing else."""
        return self.tuner.timers(num_gpus, now_s)

    def timers(self, num_gpus: int, now_s: float) -> tuple[float, float]:
        """The effective ``(T_Mc, T_Rk)`` in seconds for a job of ``num_gpus`` GPUs at ``now_s``.

        A job bigger than a machine has ``T_Mc = 0``; bigger than a rack, ``T_Mc = T_Rk = 0``
        (§IV-B2). Available once a run has started (after :meth:`reset`).
        """
        tuner = self.tuner
        if tuner is not None:
            # The environment's observation and the agent's decision ask the same question in
            # a row, and DallyQueue's observation asks it for every demand among the candidates
            # at each pick: a demand's answer holds until time moves or the tuner keeps an
            # entry for that demand (its two lists are the only ones the answer reads).
            if now_s != self._memo_at:
                self._memo = {}
                self._memo_at = now_s
            kept = tuner.kept.get(num_gpus, 0)
            memo = self._memo.get(num_gpus)
            if memo is not None and memo[0] == kept:
                return memo[1]
        elif self._gpus_per_machine is None:
            raise RuntimeError(f"{self.name}: timers() needs the cluster; call reset(view, rng) first")
        if num_gpus > self._gpus_per_rack:
            value = _NO_TIMERS
        else:
            t_machine, t_rack = self.base_timers(num_gpus, now_s)
            value = (0.0, t_rack) if num_gpus > self._gpus_per_machine else (t_machine, t_rack)
        if tuner is not None:
            self._memo[num_gpus] = (kept, value)
        return value

    def decide(self, offer: Offer, view: Engine) -> Tier | None:
        """Algorithm 1 "On Resource Offer".

        A renewal offer in ``"upgrade"`` mode (a running job whose lease expired, offered only
        tiers strictly better than its own) is accepted at its best tier: the job is running,
        not starving, so no delay applies -- it takes a better tier whenever one is free, which
        is how Nw_sens's high priority for network-slowed jobs turns into more consolidated
        placements (§IV-B1, §VI-3). In ``"rebid"`` mode the offer carries a starvation clock
        reset at the boundary and Algorithm 1 applies as to any waiting job."""
        tiers = offer.tiers
        if offer.renewal == "upgrade":
            return tiers[0]
        # Lines 5-8: the job fits on one machine of the offer -> accept at once.
        if _MACHINE in tiers:
            return _MACHINE
        # Lines 1-4: starvation time and the timers for this GPU demand.
        starvation = offer.starvation_s
        t_machine, t_rack = self.timers(offer.num_gpus, offer.now_s)
        # Lines 10-12: still within the machine-level delay -> reject.
        if starvation < t_machine:
            return None
        # Lines 13-16: fits on one rack -> accept.
        if _RACK in tiers:
            return _RACK
        # Lines 18-20: still within the rack-level delay -> reject.
        if starvation < t_rack:
            return None
        # Lines 21-22: accept anywhere on the network.
        return _NETWORK if _NETWORK in tiers else None

    def on_start(self, view: Engine, job: int, tier: Tier, starvation_s: float, now_s: float) -> None:
        # Algorithm 1, lines 7 and 15 (update_demand_delay); the tuner ignores NETWORK. An
        # upgrade of a running job is not an acceptance after waiting: it is not recorded (the
        # tuner learns how long waiting jobs wait for a tier).
        if self.tuner is not None and view.placement_kind != "upgrade":
            self.tuner.record(tier, int(view.num_gpus[job]), starvation_s, now_s)

    def on_start_batch(
        self, view: Engine, jobs: np.ndarray, tiers: np.ndarray, starvation_s: np.ndarray, now_s: np.ndarray
    ) -> None:
        # on_start for each, at once (the compiled loop's starts are all "new" placements).
        if self.tuner is not None and view.placement_kind != "upgrade":
            self.tuner.record_many(tiers, view.num_gpus[jobs], starvation_s, now_s)

    def _options_repr(self) -> str:
        """The reading options that differ from their defaults, for the reprs."""
        out = ""
        if self.never_run_nw_sens != "zero":
            out += f", never_run_nw_sens={self.never_run_nw_sens!r}"
        if self.tuner_limit != "window":
            out += f", tuner_limit={self.tuner_limit!r}"
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(history_s={self.history_s!r}, t_machine_s={self.t_machine_s:g}, "
            f"t_rack_s={self.t_rack_s:g}, floors={self.floors}, caps={self.caps}{self._options_repr()})"
        )


class DallyManualPolicy(DallyPolicy):
    """Dally with fixed, hand-set timers (paper §V-C "Dally-manual"): by default
    ``T_Mc = 12 h`` and ``T_Rk = 24 h`` of starvation (§IV-B2), subject to the size rules."""

    name: ClassVar[str] = "dally-manual"
    auto_tuned: ClassVar[bool] = False

    def __init__(
        self,
        t_machine_s: float = MANUAL_T_MACHINE_S,
        t_rack_s: float = MANUAL_T_RACK_S,
        never_run_nw_sens: str = "zero",
    ) -> None:
        super().__init__(t_machine_s=t_machine_s, t_rack_s=t_rack_s, never_run_nw_sens=never_run_nw_sens)

    def base_timers(self, num_gpus: int, now_s: float) -> tuple[float, float]:
        return self.t_machine_s, self.t_rack_s

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(t_machine_s={self.t_machine_s:g}, t_rack_s={self.t_rack_s:g}{self._options_repr()})"
        )


class DallyNoWaitPolicy(DallyPolicy):
    """Dally's priority without delay scheduling (paper §V-C "Dally-noWait"): both timers are
    0, so every offer is accepted at its most consolidated free tier."""

    name: ClassVar[str] = "dally-nowait"
    auto_tuned: ClassVar[bool] = False

    def __init__(self, never_run_nw_sens: str = "zero") -> None:
        super().__init__(t_machine_s=0.0, t_rack_s=0.0, never_run_nw_sens=never_run_nw_sens)

    def base_timers(self, num_gpus: int, now_s: float) -> tuple[float, float]:
        return 0.0, 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._options_repr()[2:]})"


class DallyConsolidatedPolicy(DallyPolicy):
    """Dally's priority, waiting as long as needed for the most consolidated tier the job can
    fit in (paper §V-C "Dally-fullyConsolidated"): both timers are infinite, so by the size
    rules a job that fits a machine only ever accepts a machine, one that fits a rack only a
    rack, and a bigger one the network."""

    name: ClassVar[str] = "dally-consolidated"
    auto_tuned: ClassVar[bool] = False
    # decide() with these timers accepts exactly the offers whose best tier is the job's best
    # possible one and declines the rest (renewal offers aside, which are always asked).
    auto_accept: ClassVar[str | None] = "best-possible-only"

    def __init__(self, never_run_nw_sens: str = "zero") -> None:
        super().__init__(t_machine_s=math.inf, t_rack_s=math.inf, never_run_nw_sens=never_run_nw_sens)

    def base_timers(self, num_gpus: int, now_s: float) -> tuple[float, float]:
        return math.inf, math.inf

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._options_repr()[2:]})"
