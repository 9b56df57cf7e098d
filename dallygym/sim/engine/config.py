"""The engine's run parameters (:class:`EngineConfig`) and the names and limits they take."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..contention import Contention

if TYPE_CHECKING:
    pass


STATE_NAMES = ("pending", "waiting", "running", "done")
#: Lease-renewal modes of :class:`EngineConfig` (the first is the default).
RENEWAL_MODES = ("upgrade", "keep", "rebid")
#: ``Engine.decisions(auto_accept=...)``: the offers the engine answers itself (by position:
#: the codes of :mod:`dallygym.sim.kernels`, ``AUTO_NONE``, ``AUTO_BEST_POSSIBLE``, ``AUTO_BEST``,
#: ``AUTO_BEST_POSSIBLE_ONLY``).
AUTO_ACCEPT = (None, "best-possible", "best", "best-possible-only")
#: What a round boundary's picks offer an agent (``Engine(lease_picks=...)``): every
#: lease-expired job too, or the waiting jobs only (the leases follow the policy's order).
LEASE_PICKS = ("all", "waiting")


@dataclass(frozen=True)
class EngineConfig:
    """Run parameters shared by ``dallygym simulate``, ``compare`` and the environment.

    Attributes:
        lease_s: length of a scheduling round (global lease) in seconds. The paper's delay
            timers are in hours and its reference simulator scales them by the lease, so the
            default is one hour. From :data:`MIN_LEASE_S` (1 s) to :data:`MAX_LEASE_S` (1e9 s):
            every round boundary with a job waiting is a scheduling pass, so a run takes about
            (makespan / lease) passes, and a lease of a nanosecond would never finish. Real
            leases are minutes to hours; one second is far below any of them.
        restart_overhead_s: time a preempted job spends restoring its checkpoint when it
            restarts on a different GPU set (the paper calls it negligible: default 0). From 0
            to :data:`MAX_RESTART_OVERHEAD_S` (one day): real restores take seconds to minutes,
            and each restart stretches the run by this much, every round of it a pass.
        seed: seed of the run's ``numpy.random.Generator`` (the only source of randomness),
            an integer from 0 to 2**63 - 1 (it is stored in int64 result columns).
        max_idle_rounds: a run stops with :class:`EngineError` if jobs keep waiting on a
            completely idle cluster, with nothing left to arrive, for this many rounds (a
            policy that never accepts would otherwise loop forever); from 1 to
            :data:`MAX_IDLE_ROUNDS`, since a larger bound only delays that error.

        Each is checked when the config is made: a bool, a non-number, NaN or infinity, or a
        value out of range is a ``ValueError`` naming the field and its bounds.
        renewal: what a round boundary does to a running job whose lease expired and whose
            GPUs no higher-priority job claimed (SPEC §4, "Lease renewal is an offer"):

            * ``"upgrade"`` (default): if its tier is worse than the best it could have, it is
              offered the tiers strictly better than its own that are free at its turn in the
              pass (its own GPUs count as free for it); accepting moves it there (a
              re-placement paying ``restart_overhead_s``, counted in ``upgrades``), waiting
              keeps its GPUs at no cost. A job at its best tier keeps its GPUs unasked, and so
              does one that declined an upgrade offer of the very same free GPUs (per machine,
              its own included) at an earlier boundary: its answer is taken to stand, and a
              boundary with nothing new to offer is stepped over.
            * ``"keep"``: it keeps its GPUs, never asked (the engine before this option).
            * ``"rebid"``: the Dally reference simulator's rule: it loses its lease and bids
              again like a waiting job whose starvation clock was reset at the boundary, with
              its own GPUs free for it. Accepting its current tier gives it back the same GPUs
              at no cost; another tier moves it (restart overhead); waiting leaves it waiting
              (a preemption), so delay timers apply again.
        contention: ``"none"`` (default: each placement is priced alone), ``"fair-share"`` or
            ``"interleaved"``: jobs crossing the same machine link or rack uplink share it
            (:mod:`dallygym.sim.contention`); the compiled event loop stops for the shares
            after each event that starts or ends a placement across machines.
        oversubscription: ``X`` > 0, the rack uplinks' oversubscription under a contention
            model: an uplink carries its rack's machines' link bandwidth / ``X`` (default 1).
    """

    lease_s: float = 3600.0
    restart_overhead_s: float = 0.0
    seed: int = 0
    max_idle_rounds: int = 1000
    renewal: str = "upgrade"
    contention: str = "none"
    oversubscription: float = 1.0

    @property
    def contention_model(self) -> Contention:
        """``contention`` and ``oversubscription`` as a :class:`~dallygym.sim.contention.Contention`."""
        return Contention(self.contention, self.oversubscription)

    def __post_init__(self) -> None:
        if not (_is_real(self.lease_s) and MIN_LEASE_S <= self.lease_s <= MAX_LEASE_S):
            raise ValueError(
                f"lease_s must be a number of seconds from {MIN_LEASE_S:g} to {MAX_LEASE_S:g}, got "
                f"{self.lease_s!r} (each round is a scheduling pass: a shorter lease makes a run "
                f"take about makespan / lease passes)"
            )
        if not (_is_real(self.restart_overhead_s) and 0 <= self.restart_overhead_s <= MAX_RESTART_OVERHEAD_S):
            raise ValueError(
                f"restart_overhead_s must be a number of seconds from 0 to {MAX_RESTART_OVERHEAD_S:g}, "
                f"got {self.restart_overhead_s!r}"
            )
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or not 0 <= self.seed <= MAX_SEED
        ):
            raise ValueError(f"seed must be an integer from 0 to 2**63 - 1, got {self.seed!r}")
        if (
            isinstance(self.max_idle_rounds, bool)
            or not isinstance(self.max_idle_rounds, int)
            or not 1 <= self.max_idle_rounds <= MAX_IDLE_ROUNDS
        ):
            raise ValueError(
                f"max_idle_rounds must be a whole number from 1 to {MAX_IDLE_ROUNDS:,}, got {self.max_idle_rounds!r}"
            )
        if self.renewal not in RENEWAL_MODES:
            raise ValueError(f"unknown renewal mode {self.renewal!r}; choose one of {', '.join(RENEWAL_MODES)}")
        self.contention_model  # noqa: B018  (its checks: a ValueError naming the field)


#: Shortest lease, seconds. A run passes every round boundary at which a job waits, so the
#: number of passes grows as makespan / lease: at 1 s a day-long trace takes at most 86,400
#: boundary passes, while a lease of 1e-9 s would never finish. Scheduling rounds in practice
#: are minutes to hours long.
MIN_LEASE_S = 1.0
#: Longest lease, seconds: the longest time a trace may hold (``trace.schema.MAX_TIME_S``);
#: a longer lease means the same as "no round boundary in the run".
MAX_LEASE_S = 1e9
#: Largest restart overhead, seconds (one day). Checkpoint restores take seconds to minutes;
#: every restart makes its job hold GPUs this much longer, with one pass per round meanwhile
#: for the jobs waiting behind it.
MAX_RESTART_OVERHEAD_S = 86_400.0
#: Largest seed: it is written to int64 columns (sweep results), and numpy takes any of them.
MAX_SEED = 2**63 - 1
#: Largest ``max_idle_rounds``: a guard against a policy that never accepts, which a larger
#: bound would only delay (the compiled loop also holds it as an int64).
MAX_IDLE_ROUNDS = 1_000_000


def _is_real(value: object) -> bool:
    """A finite int or float (numpy's float64 is one), not a bool. Other numpy scalars are
    refused as before: the compiled loop takes these fields as they are."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
