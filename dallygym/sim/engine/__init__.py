"""The discrete-event engine (SPEC §4).

One engine serves every use: a native run with a heuristic policy and the Gymnasium
environment with an agent. :meth:`Engine.decisions` is a generator that yields an
:class:`Offer` whenever a waiting job is offered GPUs and receives the answer (a :class:`Tier`
to accept at, or ``None`` to wait); :func:`run_policy` drives it with a policy's ``decide``.

Time is continuous. A running job progresses at ``speed / iter_time_s`` iterations per second,
where ``speed`` is the latency model's speed factor of its placement; completion times are
computed analytically, and the engine only wakes on events:

* **arrival** of a job (it joins the waiting jobs, its starvation clock starts);
* **completion** of a job (its GPUs are freed);
* **round boundary** every ``lease_s`` from the first arrival: every running job's lease
  expires. The jobs -- waiting and lease-expired alike -- are visited in the policy's priority
  order. A lease-expired job whose GPUs were not claimed by a higher-priority job keeps them and
  continues at no cost (no decision is asked: it never lost them). A lease-expired job that lost
  any GPU is preempted: its progress is kept, it becomes a waiting job with starvation clock
  reset to now, the GPUs it still had are free for anyone (taking them displaces nobody), and
  it is offered the remaining GPUs like any waiting job. If it later restarts
  on a different GPU set it pays ``restart_overhead_s`` before progressing again.

After a boundary's pass, a policy with a ``migrate`` hook may move running jobs that kept their
GPUs to a more consolidated tier, using free GPUs (Gandiva's migration). A boundary at which no
job waits changes nothing, so the engine steps over such boundaries (the round count stays
exact) unless the policy migrates.

A scheduling pass runs at every event time (after all events of that instant). Waiting jobs are
visited in priority order; a job that does not fit anywhere is skipped and lower-priority jobs
are still offered (no head-of-line blocking). Only waiting jobs receive offers.

Per-job state lives in numpy arrays indexed by job index (the row of the trace, sorted by
arrival then id); policies read them through the engine object.

The small-array work of a pass (placements, opening a boundary, runs of renewals, tier tests,
progress, completions) runs as compiled kernels (:mod:`dallygym.sim.kernels`). Where the policy's
priority is one the engine knows and it neither migrates nor lets an agent pick, the whole
event loop runs compiled (:func:`dallygym.sim.kernels.run_events`: events, passes, records) up to
each event or turn that needs Python, which is taken in Python (:class:`turns.Run`,
:class:`turns.CompiledTurn`); otherwise events are taken in Python one by one, with compiled
passes (:meth:`Engine._open_pass`, :meth:`Engine._compiled_turns`) where the policy's hooks
allow. The run in Python is a stack of resumable frames (:mod:`dallygym.sim.engine.turns`), plain
data, so an engine copies at any decision.
With ``ClusterState.compiled`` false the Python methods here and in
:mod:`dallygym.sim.cluster` run instead, with the same results bit for bit (they are the reference
the tests hold the kernels to).
"""

from .config import (
    AUTO_ACCEPT,
    LEASE_PICKS,
    MAX_IDLE_ROUNDS,
    MAX_LEASE_S,
    MAX_RESTART_OVERHEAD_S,
    MAX_SEED,
    MIN_LEASE_S,
    RENEWAL_MODES,
    STATE_NAMES,
    EngineConfig,
)
from .core import Engine, run_policy
from .decisions import DONE, PENDING, RUNNING, TIERS, WAITING, Decision, EngineError, Offer, Pick
from .jobs import JobGpus, JobSet, TraceArrays
from .speed import SpeedTables, speed_tables

__all__ = [
    "AUTO_ACCEPT",
    "DONE",
    "LEASE_PICKS",
    "MAX_IDLE_ROUNDS",
    "MAX_LEASE_S",
    "MAX_RESTART_OVERHEAD_S",
    "MAX_SEED",
    "MIN_LEASE_S",
    "PENDING",
    "RENEWAL_MODES",
    "RUNNING",
    "STATE_NAMES",
    "TIERS",
    "WAITING",
    "Decision",
    "Engine",
    "EngineConfig",
    "EngineError",
    "JobGpus",
    "JobSet",
    "Offer",
    "Pick",
    "SpeedTables",
    "TraceArrays",
    "run_policy",
    "speed_tables",
]
