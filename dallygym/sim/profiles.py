"""Profiles: consistent sets of readings of the points the papers leave open.

Each *reading* is one open choice of the simulator (what a never-run job's Nw_sens is, what
the auto-tuner's history limit bounds, how Gandiva shares GPUs, what a lease renewal does,
...). A *profile* gives every reading a value:

* ``"default"`` -- the simulator's behaviour with no profile, exactly (bit for bit).
* ``"paper"`` -- for each reading, the one best argued from the papers' text (the argument
  is in :data:`SOURCES` and ``docs/profiles.md``; it is argued, not fitted to results).
* ``"reference"`` -- the Dally paper's reference simulator, as SPEC and the docstrings
  document it.

:data:`PROFILES` maps profile -> reading -> value; :data:`SOURCES` maps the same keys to the
sentence or code line each value rests on. :func:`resolve` gives a profile's readings with
explicit options put over them (an explicit option always wins over the profile's entry);
:func:`make_profile_policy` and :func:`profile_config` apply them to a policy and an
:class:`~dallygym.sim.engine.EngineConfig`. ``simulate``, ``compare``, the sweep grid, the
environments and the CLI (``--profile``) take a profile by name.

Readings with no option here (the reference simulator's Nw_sens tie-break by fewer GPUs held,
its recording only of waits of at least one lease, its Gandiva order "most recently started
first") are listed in ``docs/profiles.md``: ``reference`` does not reproduce them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

#: The readings, in the order the docs list them, and the values each may take.
READINGS: dict[str, tuple[Any, ...]] = {
    "never_run_nw_sens": ("zero", "one", "best"),
    "tuner_limit": ("window", "value"),
    "tuner_floors": (False, True),
    "tuner_caps": (False, True),
    "gandiva": ("migrate", "timeslice"),
    "renewal": ("upgrade", "keep", "rebid"),
}

PROFILES: dict[str, dict[str, Any]] = {
    "default": {
        "never_run_nw_sens": "zero",
        "tuner_limit": "window",
        "tuner_floors": False,
        "tuner_caps": False,
        "gandiva": "migrate",
        "renewal": "upgrade",
    },
    "paper": {
        "never_run_nw_sens": "one",
        "tuner_limit": "value",
        "tuner_floors": False,
        "tuner_caps": False,
        "gandiva": "timeslice",
        "renewal": "upgrade",
    },
    "reference": {
        "never_run_nw_sens": "zero",
        "tuner_limit": "window",
        "tuner_floors": True,
        "tuner_caps": True,
        "gandiva": "migrate",
        "renewal": "rebid",
    },
}

#: What each profile's value rests on: a sentence of a paper, SPEC, or a line of the code.
SOURCES: dict[str, dict[str, str]] = {
    "default": {
        "never_run_nw_sens": 'SPEC §5.1: "A job that has never run has Nw_sens = 0 (highest priority)"; '
        "kernels._nw_sens_of: `... if run_s > 0 else 0.0`.",
        "tuner_limit": 'AutoTuner docstring: the history limit is "a window over *recording time* -- an entry '
        'counts while its recording time is >= now_s - history_s"; SPEC §5.1: "using only '
        'entries inside the history window".',
        "tuner_floors": 'SPEC §5.1: "Expose the optional floor/cap knobs the reference simulator used ... but '
        "default to the paper's plain rule.\"",
        "tuner_caps": 'SPEC §5.1: "Expose the optional floor/cap knobs the reference simulator used ... but '
        "default to the paper's plain rule.\"",
        "gandiva": 'SPEC §5.3 (Gandiva "as characterised by the Dally paper"): FIFO, any free GPUs, migration; '
        "GandivaPolicy has no time-slicing.",
        "renewal": 'EngineConfig.renewal: "upgrade" (default); SPEC §4: "Modes: upgrade (this, the default)".',
    },
    "paper": {
        "never_run_nw_sens": 'Dally §IV-B1: "A lower value of Nw_sens indicates that the job has endured greater '
        'network-induced slowdowns, and, consequently, its priority should be increased." '
        "A job that has never run has endured no slowdown, and the value of a job that "
        "has endured none (T_run equal to the ideal time of the work done) is 1; 0 would "
        'rank it as the most slowed job of all. "Upon preemption, the job is reintroduced '
        'into the wait queue" with its Nw_sens: offers favour slowed jobs, not new ones.',
        "tuner_limit": 'Dally §IV-B3: "The maintenance of the wait-time lists involves discarding values ... that '
        'exceed the specified history time limit (lines 4 and 10 in Algo. 2)", and Algorithm 2, '
        'lines 2-4: "for time in mc_starvation_times do if time > HISTORY_TIME_LIMIT then remove '
        'time". Both test the listed starvation values; the limit is scaled to the cluster as '
        '"in larger clusters, a smaller history time limit is advised" (default_history_s).',
        "tuner_floors": "Dally Algorithm 2, lines 13-14: mean + 2 standard deviations, with no clamp.",
        "tuner_caps": "Dally Algorithm 2, lines 13-14: mean + 2 standard deviations, with no clamp.",
        "gandiva": 'SPEC §5: "Implement each from its paper; where the Dally reference simulator deviates from the '
        "papers, follow the papers.\" Gandiva (OSDI'18) schedules under oversubscription by "
        "suspend-resume time-slicing of jobs of the same size, besides migration; the Dally paper's "
        '"It addresses this limitation by migrating jobs ..." names the mechanism that concerns '
        "consolidation, not all of Gandiva.",
        "renewal": 'Dally §IV-B: "Upon acceptance, the job is moved to the run queue, where it executes until it is '
        'either preempted or completes"; §IV-B1: "This allows jobs with lower Nw_sens to have a higher '
        'probability of receiving more consolidated resource offers" (SPEC §4: "Lease renewal is an '
        'offer" -- upgrade).',
    },
    "reference": {
        "never_run_nw_sens": 'SPEC §5.1: "A job that has never run has Nw_sens = 0"; DallyPolicy docstring: '
        '"never-run jobs all have Nw_sens 0" (the reference simulator\'s choice).',
        "tuner_limit": 'SPEC §5.1: "using only entries inside the history window (history_s)"; the reference '
        "caps timers at 0.8 H / H with H the same window.",
        "tuner_floors": 'SPEC §5.1: "the optional floor/cap knobs the reference simulator used (floors 6 and 12 '
        'leases, caps 0.8·H and H leases)".',
        "tuner_caps": 'SPEC §5.1: "the optional floor/cap knobs the reference simulator used (floors 6 and 12 '
        'leases, caps 0.8·H and H leases)".',
        "gandiva": "SPEC §5.3 and GandivaPolicy docstring: the reference's Gandiva has migration and no time-slicing.",
        "renewal": 'EngineConfig.renewal: "rebid": the Dally reference simulator\'s rule: it loses its lease and '
        'bids again"; SPEC §4: "rebid (the reference simulator ...)".',
    },
}

#: Readings that are options of the Dally policy family, and the keyword each is passed as.
_DALLY_KEYWORDS = {
    "never_run_nw_sens": "never_run_nw_sens",
    "tuner_limit": "tuner_limit",
    "tuner_floors": "floors",
    "tuner_caps": "caps",
}


def _unknown(name: Any) -> ValueError:
    return ValueError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")


def resolve(profile: str | Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """Every reading's value: ``profile``'s (a name, a mapping of readings as :func:`resolve`
    returns, or None for ``"default"``), with ``options`` (explicit readings) put over it.
    ``ValueError`` for an unknown profile, reading or value."""
    if profile is None:
        settings = dict(PROFILES["default"])
    elif isinstance(profile, str):
        if profile not in PROFILES:
            raise _unknown(profile)
        settings = dict(PROFILES[profile])
    elif isinstance(profile, Mapping):
        settings = {**PROFILES["default"], **profile}
    else:
        raise _unknown(profile)
    settings.update(options)
    for reading, value in settings.items():
        if reading not in READINGS:
            raise ValueError(f"unknown reading {reading!r}; known readings: {', '.join(READINGS)}")
        if value not in READINGS[reading] or isinstance(value, bool) != isinstance(READINGS[reading][0], bool):
            raise ValueError(f"{reading} cannot be {value!r}; choose one of {', '.join(map(repr, READINGS[reading]))}")
    return settings


def check_profile(profile: str | Mapping[str, Any] | None) -> None:
    """Raise ``ValueError`` (naming the choices) unless ``profile`` is None, a known profile
    name or a valid mapping of readings."""
    resolve(profile)


def make_profile_policy(policy, profile: str | Mapping[str, Any] | None = None):
    """``policy`` built under ``profile``'s readings.

    A policy *name* of the Dally family gets the profile's Dally readings as options (those
    its constructor takes); ``"gandiva"`` is the time-slicing variant when the profile's
    ``gandiva`` reading is ``"timeslice"``. A :class:`~dallygym.sim.policies.Policy` instance is
    returned as it is: its own options were given explicitly, and explicit options win.
    """
    from .policies import POLICIES, DallyPolicy, Policy, make_policy

    if isinstance(policy, Policy) or profile is None:
        return make_policy(policy)
    settings = resolve(profile)
    if policy == "gandiva" and settings["gandiva"] == "timeslice":
        return make_policy("gandiva-timeslice")
    cls = POLICIES.get(policy) if isinstance(policy, str) else None
    if cls is None or not issubclass(cls, DallyPolicy):
        return make_policy(policy)
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {keyword: settings[reading] for reading, keyword in _DALLY_KEYWORDS.items() if keyword in accepted}
    return make_policy(policy, **kwargs)


def profile_renewal(profile: str | Mapping[str, Any] | None, renewal: str | None = None) -> str:
    """The renewal mode: ``renewal`` if given (explicit), else the profile's."""
    return renewal if renewal is not None else resolve(profile)["renewal"]


def profile_config(config, profile: str | Mapping[str, Any] | None = None):
    """The :class:`~dallygym.sim.engine.EngineConfig` of a run under ``profile``.

    With no profile, ``config`` as it is (None: the default config). With one, the profile's
    ``renewal`` replaces the config's default ``"upgrade"``; a config whose renewal is another
    mode was set explicitly, and keeps it. (To run a profile with ``"upgrade"`` renewal where it
    says otherwise, pass the readings: ``profile=resolve("reference", renewal="upgrade")``.)
    """
    from .engine import EngineConfig

    if profile is None:
        return config
    renewal = resolve(profile)["renewal"]
    if config is None:
        return EngineConfig(renewal=renewal)
    if config.renewal == EngineConfig.renewal:
        return dataclasses.replace(config, renewal=renewal)
    return config


__all__ = [
    "PROFILES",
    "READINGS",
    "SOURCES",
    "check_profile",
    "make_profile_policy",
    "profile_config",
    "profile_renewal",
    "resolve",
]
