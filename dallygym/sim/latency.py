"""Communication-latency models: the speed factor of a job for a placement shape (SPEC §2).

A latency model answers one question for the engine: for a job training ``model`` on a placement
of canonical ``shape`` (see :mod:`dallygym.sim.cluster`), what is its **speed factor**

    s = compute / (compute + exposed_communication)   in (0, 1]

for one training iteration? A running job then needs ``iter_time_s / s`` per iteration. 1-GPU
jobs have ``s = 1`` exactly. Models are pluggable: subclass :class:`LatencyModel`, or pick a
preset with :func:`get_latency_model`.

The default preset ``"dally-paper"`` (:class:`DallyPaperLatency`) rebuilds what the Dally
paper's simulator measured with ASTRA-sim (paper §III-A Table I, §IV-C): one ring all-reduce
per weight layer, issued as that layer's weight gradient is ready during the backward pass, on
one FIFO communication stream, over the hierarchy NVSwitch -> rack -> spine. How the
collective cost is built from the shape, why it is monotone in spreading, and how it was
calibrated against Table I is written down in ``docs/latency.md``; the numbers live in the
constants below (tier links) and in the single per-model table :data:`MODEL_CALIBRATION`.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd

from .cluster import Shape, Tier, canonical_shape
from .models import MODEL_NAMES, ModelProfile, check_model, shipped_profile

__all__ = [
    "ASSUMED_FLOPS_PER_S",
    "DEFAULT_COMPUTE_MS",
    "LATENCY_PRESETS",
    "MODEL_CALIBRATION",
    "NETWORK_SWITCH",
    "NVSWITCH",
    "RACK_RING",
    "TABLE_I_PAPER",
    "TABLE_I_SHAPES",
    "Calibration",
    "DallyPaperLatency",
    "LatencyModel",
    "TierLink",
    "collective_cost",
    "cross_link_traffic",
    "fit_calibration",
    "get_latency_model",
    "table_i_frame",
    "within_table_i_tolerance",
]


# --------------------------------------------------------------------------------------------
# The pluggable interface
# --------------------------------------------------------------------------------------------


class LatencyModel(abc.ABC):
    """Maps (model identifier, placement shape) to a speed factor in (0, 1].

    Subclasses implement :meth:`speed_factor` and set ``name``. The engine calls
    ``speed_factor`` once per new (model, shape) pair and caches the answer -- across the runs
    that use the same model object, too (an environment's episodes) -- so a model must be a
    pure function of its arguments, and must not be changed once it has been used.

    Only the job's own shape is seen by ``speed_factor``. Jobs sharing links
    (:mod:`dallygym.sim.contention`) need three more answers, which a model gives by overriding
    :meth:`machine_link_bytes_per_s`, :meth:`link_rates` and :meth:`shared_speed_factor` (the
    engine refuses a contention model with a latency model that does not).
    """

    #: Preset name (shown by the CLI and in results).
    name: str = "latency-model"

    @abc.abstractmethod
    def speed_factor(self, model: str, shape: Shape) -> float:
        """Speed factor ``s`` in (0, 1] of ``model`` on a placement of ``shape``; 1 for 1 GPU."""

    def exposed_comm_pct(self, model: str, shape: Shape) -> float:
        """Exposed communication as a percentage of compute: ``100 * (1 / s - 1)``.

        This is the unit of the paper's Table I.
        """
        return 100.0 * (1.0 / self.speed_factor(model, shape) - 1.0)

    # A model that prices links shared between jobs (a contention model, see
    # dallygym.sim.contention) also answers these three; the base class has no links.

    def machine_link_bytes_per_s(self) -> float:
        """Bandwidth of a machine's link to its rack, bytes per second."""
        raise NotImplementedError(f"{type(self).__name__} does not model the links between machines")

    def link_rates(self, shape: Shape) -> tuple[float, float]:
        """Bytes per second a job on ``shape`` pushes alone through each of its machines' links and
        each of its racks' uplinks while it communicates."""
        raise NotImplementedError(f"{type(self).__name__} does not model the links between machines")

    def shared_speed_factor(self, model: str, shape: Shape, share: float) -> float:
        """Speed factor when the job's links between machines give it ``share`` of its alone rate."""
        raise NotImplementedError(f"{type(self).__name__} does not model the links between machines")

    def link_duty(self, model: str, shape: Shape) -> float:
        """The share of an iteration (alone) that a job spends sending bytes between machines."""
        raise NotImplementedError(f"{type(self).__name__} does not model the links between machines")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


# --------------------------------------------------------------------------------------------
# Tier links and the cost of one hierarchical all-reduce
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TierLink:
    """The link of one network tier, as the reference simulator parameterised it.

    Attributes:
        hop_latency_s: latency of one hop.
        hops_per_step: hops a message crosses per algorithm step (1 on a ring; 2 through a
            switch: up and down).
        bandwidth_bytes_per_s: bandwidth of one link of this tier.
    """

    hop_latency_s: float
    hops_per_step: int
    bandwidth_bytes_per_s: float

    @property
    def step_latency_s(self) -> float:
        return self.hops_per_step * self.hop_latency_s


#: Inside a machine: NVSwitch, 600 GB/s per GPU port. The per-hop latency was not recorded by
#: the reference (SPEC §2: "0-500 ns"); 280 ns is the calibrated value (docs/latency.md): it
#: makes the latency-bound MobileNetV3 reproduce its 42 % machine cell.
NVSWITCH = TierLink(hop_latency_s=280e-9, hops_per_step=1, bandwidth_bytes_per_s=600e9)
#: Machine to machine inside a rack: a ring, 5 us per hop, 200 GB/s (fact, SPEC §2).
RACK_RING = TierLink(hop_latency_s=5e-6, hops_per_step=1, bandwidth_bytes_per_s=200e9)
#: Rack to rack: through the spine switch, 2 hops per step, 50 us per hop, 400 GB/s (fact).
NETWORK_SWITCH = TierLink(hop_latency_s=50e-6, hops_per_step=2, bandwidth_bytes_per_s=400e9)


def _ring_traffic(k: int) -> float:
    """Bytes each member sends per byte of data in a bandwidth-optimal all-reduce of k members."""
    return 2.0 * (k - 1) / k


def collective_cost(
    shape: Shape,
    machine: TierLink = NVSWITCH,
    rack: TierLink = RACK_RING,
    network: TierLink = NETWORK_SWITCH,
) -> tuple[float, float]:
    """Cost of one all-reduce on a placement: ``(latency_s, seconds_per_byte)``.

    An all-reduce of ``D`` gradient bytes takes ``latency_s + seconds_per_byte * D``.

    Latency (sum over the tiers the hierarchical ring crosses, SPEC §2 "hops x latency"):
    the intra-machine stage is a reduce-scatter and an all-gather through NVSwitch, one hop
    each, whatever the number of GPUs (a switch, not a ring); it is charged to every multi-GPU
    all-reduce, even when each machine holds one GPU (then it stands for the local
    synchronisation), so that splitting a machine never removes latency. The rack stage is a
    ring over the machines of a rack, ``2 (m - 1)`` steps for the rack with the most machines
    ``m`` (racks run their stage in parallel); the top stage is a ring over the ``r`` racks
    through the spine, ``2 (r - 1)`` steps of 2 hops.

    Bandwidth (the busiest link; chunked collectives pipeline the stages, so the slowest link
    sets the rate): a bandwidth-optimal all-reduce over ``k`` members makes each member send
    ``2 (k - 1) / k * D`` bytes. On one machine that is every GPU's NVSwitch port (``k`` =
    GPUs). Across machines, every byte leaving a machine -- to its rack or beyond -- crosses
    that machine's rack link, so each machine link carries ``2 (M - 1) / M * D`` with ``M`` the
    job's machines, and each rack uplink ``2 (r - 1) / r * D``. With balanced shapes this is
    exactly the traffic of the hierarchical ring; with unbalanced ones it is what a
    load-balanced ring over the machines achieves, and it depends only on counts that can only
    grow when a placement is spread (docs/latency.md, "Monotonicity").
    """
    gpus = sum(sum(r) for r in shape)
    if gpus < 2:
        return 0.0, 0.0
    g_max = max(max(r) for r in shape)
    machines = sum(len(r) for r in shape)
    racks = len(shape)
    m_max = max(len(r) for r in shape)

    latency_s = 2 * machine.step_latency_s
    latency_s += 2 * (m_max - 1) * rack.step_latency_s
    latency_s += 2 * (racks - 1) * network.step_latency_s

    per_byte = _ring_traffic(g_max) / machine.bandwidth_bytes_per_s
    if machines > 1:
        per_byte = max(per_byte, _ring_traffic(machines) / rack.bandwidth_bytes_per_s)
    if racks > 1:
        per_byte = max(per_byte, _ring_traffic(racks) / network.bandwidth_bytes_per_s)
    return latency_s, per_byte


def cross_link_traffic(
    shape: Shape, rack: TierLink = RACK_RING, network: TierLink = NETWORK_SWITCH
) -> tuple[float, float, float]:
    """What one all-reduce on ``shape`` asks of the links between machines, per byte of data:
    ``(seconds_per_byte, machine_link_bytes, rack_uplink_bytes)``.

    ``seconds_per_byte`` is the cross-machine part of :func:`collective_cost`'s bandwidth term
    (0 on one machine); ``machine_link_bytes`` = ``2 (M - 1) / M`` is what each of the job's
    ``M`` machines sends over its own link (0 on one machine), ``rack_uplink_bytes`` =
    ``2 (r - 1) / r`` what each of its ``r`` racks sends over its uplink to the spine (0 in one
    rack). Alone, a job pushes ``bytes / seconds_per_byte`` bytes per second through each such
    link while it communicates: the rates a contention model shares out
    (:mod:`dallygym.sim.contention`).
    """
    machines = sum(len(r) for r in shape)
    racks = len(shape)
    if machines < 2:
        return 0.0, 0.0, 0.0
    machine_bytes = _ring_traffic(machines)
    per_byte = machine_bytes / rack.bandwidth_bytes_per_s
    uplink_bytes = 0.0
    if racks > 1:
        uplink_bytes = _ring_traffic(racks)
        per_byte = max(per_byte, uplink_bytes / network.bandwidth_bytes_per_s)
    return per_byte, machine_bytes, uplink_bytes


def _check_links(machine: TierLink, rack: TierLink, network: TierLink) -> None:
    """Refuse tier parameters for which spreading could speed a job up.

    The cost above is monotone in spreading when (a) a spine step is no faster than a rack
    step (moving a whole machine to a new rack may trade 2 rack-ring steps for 2 spine steps),
    and (b) a GPU's NVSwitch port is at least twice as fast as a machine's rack link (then the
    first cross-machine link always dominates the bandwidth term, since ``2 (g - 1) / g < 2``).
    The fact values satisfy both (100 us >= 5 us, 600 >= 2 x 200 GB/s).
    """
    for label, link in (("machine", machine), ("rack", rack), ("network", network)):
        if link.hop_latency_s < 0 or link.hops_per_step < 1 or link.bandwidth_bytes_per_s <= 0:
            raise ValueError(f"{label} link needs latency >= 0, hops >= 1, bandwidth > 0: {link}")
    if network.step_latency_s < rack.step_latency_s:
        raise ValueError(
            "a network step must not be faster than a rack step "
            f"({network.step_latency_s} s < {rack.step_latency_s} s): spreading would speed jobs up"
        )
    if machine.bandwidth_bytes_per_s < 2 * rack.bandwidth_bytes_per_s:
        raise ValueError(
            "the machine (NVSwitch) bandwidth must be at least twice the rack bandwidth "
            "for the speed factor to be monotone in spreading"
        )


# --------------------------------------------------------------------------------------------
# Per-model compute and calibration
# --------------------------------------------------------------------------------------------

#: Compute time of one iteration that the reference simulator used to turn ASTRA-sim's exposed
#: communication into a speed factor (fact, SPEC §2), in ms. Tiny scaled figures: they set s
#: only; a job's real iteration time comes from its trace.
DEFAULT_COMPUTE_MS: Mapping[str, float] = MappingProxyType(
    {
        "vgg11": 3.63,
        "alexnet": 1.03,
        "mobilenet_v3": 0.053,
        "resnet18": 0.150,
        "resnet50": 11.65,
        "bert_large": 1.70,
    }
)

#: Throughput assumed for a user-supplied profile given without ``compute_ms``: one sample,
#: forward + backward = 3 x forward multiply-accumulates, 2 FLOP each, at 100 TFLOP/s (an
#: A100-class sustained rate). Only an order of magnitude; pass ``compute_ms`` when known.
ASSUMED_FLOPS_PER_S = 100e12


@dataclass(frozen=True)
class Calibration:
    """Per-model correction of the physical model (all default to "no correction").

    Attributes:
        bytes_scale: multiplies the gradient bytes of every all-reduce. This is the paper's own
            calibration step (§IV-C2: the ASTRA-sim workload file of each model was scaled to
            match measurements); it also absorbs that the reference's "B512" workload files are
            not our torchvision profiles.
        latency_scale: multiplies the hop-latency part of every all-reduce: the effective
            number of latency-bound collectives per iteration relative to our count of weight
            layers (e.g. 0.9 = the reference workload behaved like 49 of MobileNetV3's 54).
        overhead_pct: a fixed exposed cost per iteration of every multi-GPU placement, in %
            of compute, independent of the placement (e.g. ResNet50's 12 % at both machine and
            rack tier, which the reference simulator also shows for 2 GPUs on one switch).
    """

    bytes_scale: float = 1.0
    latency_scale: float = 1.0
    overhead_pct: float = 0.0

    def __post_init__(self) -> None:
        if not (self.bytes_scale >= 0 and self.latency_scale >= 0 and self.overhead_pct >= 0):
            raise ValueError(f"calibration values must be non-negative: {self}")


#: THE per-model calibration table of the "dally-paper" preset -- the only per-model numbers
#: besides compute time. Each entry was fitted by a grid search against the three Table I cells
#: of its model (SPEC §2), keeping as many knobs at the neutral (1, 1, 0) as the fit allowed;
#: docs/latency.md lists the uncalibrated numbers ("dally-paper-raw") next to these. Why each:
#: - vgg11 (latency 0.02): Table I has VGG11's network cell (7 %) barely above its rack cell
#:   (6 %): the paper's VGG workload hid almost all spine latency. On one FIFO stream each of
#:   the 11 layers queued behind the 411 MB classifier gradient pays its 200 us spine latency
#:   in full, so only a near-zero latency scale reproduces the row -- the one entry with no
#:   physical reading. Its bytes stay fp32 as profiled: their rack backlog is the 6 %.
#: - alexnet (bytes 0.6, latency 0.6, overhead 2): uncalibrated it gives 61 % / 209 % at rack /
#:   network; both scales bring rack to 13 % and network to 100 %, the overhead is its 2 %
#:   machine cell.
#: - mobilenet_v3 (latency 0.9): latency-bound, 54 collectives of ~10 us (rack) and ~200 us
#:   (network) each; 0.9 = 49 effective collectives (the reference's profile issued about 52).
#:   Its 42 % machine cell is what fixed the global NVSwitch latency (NVSWITCH).
#: - resnet18 (bytes 0.2, overhead 6.5): in the reference its rack cell is latency-bound; our
#:   47 MB of fp32 gradients would make it bandwidth-bound (237 % instead of 116 %). Its 7 %
#:   machine cell is not produced by any link (backward compute hides NVSwitch traffic), hence
#:   the placement-independent overhead.
#: - resnet50 (overhead 11): links as they are give 0 / 0 / 31 %; the paper's 12 % at both
#:   machine and rack tier is a placement-independent cost (the reference simulator shows the
#:   same 12.3 % even for 2 GPUs on one switch), added to every multi-GPU placement.
#: - bert_large (bytes 0.12, latency 0.4, overhead 5): 148 weight layers at >= 200 us each
#:   would give ~1700 % at network tier against 715 %: latency 0.4 = ~59 effective collectives
#:   (e.g. fused Q/K/V and biases); bytes 0.12 = the reference's small "B512" sizes instead of
#:   1.3 GB of fp32 gradients; overhead 5 for its 8 % machine cell.
MODEL_CALIBRATION: Mapping[str, Calibration] = MappingProxyType(
    {
        "vgg11": Calibration(bytes_scale=1.0, latency_scale=0.02, overhead_pct=0.0),
        "alexnet": Calibration(bytes_scale=0.6, latency_scale=0.6, overhead_pct=2.0),
        "mobilenet_v3": Calibration(bytes_scale=1.0, latency_scale=0.9, overhead_pct=0.0),
        "resnet18": Calibration(bytes_scale=0.2, latency_scale=1.0, overhead_pct=6.5),
        "resnet50": Calibration(bytes_scale=1.0, latency_scale=1.0, overhead_pct=11.0),
        "bert_large": Calibration(bytes_scale=0.12, latency_scale=0.4, overhead_pct=5.0),
    }
)


@dataclass(frozen=True)
class _Schedule:
    """What the exposure computation needs of one model, precomputed once.

    Attributes:
        compute_s: compute time of one iteration.
        issue_s: time each all-reduce is issued, in issue order (backward order).
        grad_bytes: fp32 gradient bytes of each all-reduce, same order.
    """

    compute_s: float
    issue_s: np.ndarray
    grad_bytes: np.ndarray


def _schedule(profile: ModelProfile, compute_ms: float) -> _Schedule:
    """Issue times of the per-layer all-reduces within one iteration of ``compute_ms``.

    Time per layer is proportional to its forward MACs (SPEC §2). The forward pass runs the
    layers in order; the backward pass runs them in reverse, each as a weight-gradient half
    then an input-gradient half, each as long as the layer's forward (backward = 2 x forward),
    except that the first layer computes no input gradient (nothing upstream needs it). A
    weight layer's all-reduce is issued as soon as its weight gradient is done -- before its
    own input gradient, as in ASTRA-sim's data-parallel loop -- so only backward compute
    overlaps communication, and the last all-reduce (the first weight layer's) is issued at the
    very end of compute.
    """
    compute_s = compute_ms * 1e-3
    macs = profile.fwd_macs.astype(float)
    weight = profile.weight_layers
    if macs.sum() <= 0:
        # A profile without MACs: spread compute evenly over its weight layers instead.
        macs = weight.astype(float)
    input_grad = macs.copy()
    input_grad[0] = 0.0
    unit_s = compute_s / (2.0 * macs.sum() + input_grad.sum())
    forward_s = macs.sum() * unit_s
    # Backward visits layers L-1 .. 0; layer i's weight gradient ends after everything the
    # backward pass did for layers above it plus its own weight-gradient half.
    rev = slice(None, None, -1)
    per_layer_bwd = (macs + input_grad)[rev] * unit_s
    before = np.concatenate(([0.0], np.cumsum(per_layer_bwd)[:-1]))  # backward work above layer
    weight_done_s = forward_s + before + macs[rev] * unit_s
    keep = weight[rev]
    return _Schedule(
        compute_s=compute_s,
        issue_s=weight_done_s[keep],
        grad_bytes=profile.grad_bytes[rev][keep].astype(float),
    )


def _exposed_s(schedule: _Schedule, latency_s: float, per_byte_s: float) -> float:
    """End of the last all-reduce minus end of compute, for one FIFO stream.

    With ``end_k = max(end_{k-1}, issue_k) + T_k`` the last end is
    ``max_k (issue_k + T_k + ... + T_K)``: one vectorised suffix sum instead of a loop.
    """
    if schedule.issue_s.size == 0:
        return 0.0
    cost = latency_s + per_byte_s * schedule.grad_bytes
    suffix = np.cumsum(cost[::-1])[::-1]
    last_end = float(np.max(schedule.issue_s + suffix))
    return max(0.0, last_end - schedule.compute_s)


# --------------------------------------------------------------------------------------------
# The "dally-paper" preset
# --------------------------------------------------------------------------------------------


class DallyPaperLatency(LatencyModel):
    """The Dally paper's per-layer ring all-reduce model (preset ``"dally-paper"``, SPEC §2).

    For a shape, each weight layer's all-reduce costs ``latency_s * latency_scale +
    seconds_per_byte * grad_bytes * bytes_scale`` (:func:`collective_cost`, the model's
    :data:`MODEL_CALIBRATION` entry); the all-reduces run on one FIFO stream as the backward
    pass releases them (:func:`_schedule`); exposed communication is the end of the last one
    minus the end of compute, plus the model's fixed ``overhead_pct`` of compute for any
    multi-GPU placement; ``s = compute / (compute + exposed)``.

    Arguments:
        profiles: extra or replacement per-layer profiles, ``{name: ModelProfile or CSV path}``
            (CSV columns as in ``dallygym/data/models``). Known models = the six shipped ones
            plus these.
        compute_ms: compute time of one iteration per model, ms, overriding
            :data:`DEFAULT_COMPUTE_MS`. A user profile without an entry gets
            ``6 x forward MACs / ASSUMED_FLOPS_PER_S`` (one sample at 100 TFLOP/s).
        calibration: per-model :class:`Calibration` overriding :data:`MODEL_CALIBRATION`;
            a model with no entry is uncalibrated ``Calibration()``.
        use_paper_calibration: False to start from no per-model calibration at all (the raw
            physical model; preset ``"dally-paper-raw"``).
        machine_link, rack_link, network_link: tier links (defaults :data:`NVSWITCH`,
            :data:`RACK_RING`, :data:`NETWORK_SWITCH`).

    Example::

        lat = DallyPaperLatency(profiles={"mynet": "mynet.csv"}, compute_ms={"mynet": 2.0})
        lat.speed_factor("mynet", ((4, 4),))
    """

    name = "dally-paper"

    def __init__(
        self,
        *,
        profiles: Mapping[str, ModelProfile | str | Path] | None = None,
        compute_ms: Mapping[str, float] | None = None,
        calibration: Mapping[str, Calibration] | None = None,
        use_paper_calibration: bool = True,
        machine_link: TierLink = NVSWITCH,
        rack_link: TierLink = RACK_RING,
        network_link: TierLink = NETWORK_SWITCH,
    ) -> None:
        _check_links(machine_link, rack_link, network_link)
        self.links = (machine_link, rack_link, network_link)

        self._profiles: dict[str, ModelProfile] = {}
        for name, prof in (profiles or {}).items():
            if not isinstance(prof, ModelProfile):
                prof = ModelProfile.from_csv(prof, name=name)
            self._profiles[str(name)] = prof
        self.known_models: tuple[str, ...] = tuple(MODEL_NAMES) + tuple(
            n for n in self._profiles if n not in MODEL_NAMES
        )

        self._compute_ms = dict(DEFAULT_COMPUTE_MS)
        for name, ms in (compute_ms or {}).items():
            check_model(name, self.known_models)
            if not ms > 0:
                raise ValueError(f"compute_ms[{name!r}] must be positive, got {ms!r}")
            self._compute_ms[name] = float(ms)

        self._calibration = dict(MODEL_CALIBRATION) if use_paper_calibration else {}
        for name, cal in (calibration or {}).items():
            check_model(name, self.known_models)
            if not isinstance(cal, Calibration):
                cal = Calibration(**cal)
            self._calibration[name] = cal

        self._schedules: dict[str, _Schedule] = {}
        self._cache: dict[tuple[str, Shape], float] = {}
        self._shared_parts: dict[tuple[str, Shape], object] = {}  # see shared_speed_factor

    # --- per-model data --------------------------------------------------------------------

    def profile(self, model: str) -> ModelProfile:
        """Per-layer profile used for ``model``; unknown names raise UnknownModelError."""
        check_model(model, self.known_models)
        if model in self._profiles:
            return self._profiles[model]
        return shipped_profile(model)

    def compute_ms(self, model: str) -> float:
        """Compute time of one iteration of ``model`` used to form ``s``, ms."""
        check_model(model, self.known_models)
        if model not in self._compute_ms:
            macs = float(self.profile(model).fwd_macs.sum())
            return 6.0 * macs / ASSUMED_FLOPS_PER_S * 1e3
        return self._compute_ms[model]

    def calibration(self, model: str) -> Calibration:
        """Per-model calibration in force for ``model``."""
        check_model(model, self.known_models)
        return self._calibration.get(model, Calibration())

    def _schedule_of(self, model: str) -> _Schedule:
        sched = self._schedules.get(model)
        if sched is None:
            sched = _schedule(self.profile(model), self.compute_ms(model))
            self._schedules[model] = sched
        return sched

    # --- the model -------------------------------------------------------------------------

    def exposed_comm_ms(self, model: str, shape: Shape) -> float:
        """Exposed communication per iteration of ``model`` on ``shape``, ms (0 for 1 GPU)."""
        shape = _checked_shape(shape)
        sched = self._schedule_of(model)  # raises UnknownModelError first
        if sum(sum(r) for r in shape) < 2:
            return 0.0
        cal = self.calibration(model)
        latency_s, per_byte_s = collective_cost(shape, *self.links)
        exposed_s = _exposed_s(sched, latency_s * cal.latency_scale, per_byte_s * cal.bytes_scale)
        exposed_s += cal.overhead_pct / 100.0 * sched.compute_s
        return exposed_s * 1e3

    def speed_factor(self, model: str, shape: Shape) -> float:
        """``compute / (compute + exposed communication)`` of ``model`` on ``shape``, cached."""
        key = (model, shape)
        s = self._cache.get(key)
        if s is None:
            compute_ms = self.compute_ms(model)
            s = compute_ms / (compute_ms + self.exposed_comm_ms(model, shape))
            self._cache[key] = s
        return s

    def exposed_comm_pct(self, model: str, shape: Shape) -> float:
        """Exposed communication, % of compute (computed directly, without rounding via s)."""
        return 100.0 * self.exposed_comm_ms(model, shape) / self.compute_ms(model)

    def machine_link_bytes_per_s(self) -> float:
        """The rack tier's link bandwidth: a machine's link to its rack."""
        return self.links[1].bandwidth_bytes_per_s

    def link_rates(self, shape: Shape) -> tuple[float, float]:
        """Bytes per second a job on ``shape`` pushes, alone, through each of its machines' links
        and each of its racks' uplinks while it communicates (0 where it uses none):
        :func:`cross_link_traffic` at this model's tier links."""
        per_byte, machine_bytes, uplink_bytes = cross_link_traffic(_checked_shape(shape), *self.links[1:])
        if per_byte == 0.0:
            return 0.0, 0.0
        return machine_bytes / per_byte, uplink_bytes / per_byte

    def shared_speed_factor(self, model: str, shape: Shape, share: float) -> float:
        """Speed factor of ``model`` on ``shape`` when its links between machines carry only
        ``share`` (in (0, 1]) of the rate they would give it alone: the cross-machine bandwidth
        term of every all-reduce is divided by ``share``, hop latencies and the NVSwitch term
        are unchanged. ``share == 1`` is :meth:`speed_factor` itself, bit for bit."""
        if share == 1.0:
            return self.speed_factor(model, shape)
        if not 0.0 < share < 1.0:
            raise ValueError(f"share must be in (0, 1], got {share!r}")
        parts = self._shared_parts.get((model, shape))
        if parts is None:
            parts = self._shared_parts[model, shape] = self._parts_of(model, _checked_shape(shape))
        if parts is True:
            return self.speed_factor(model, shape)  # nothing leaves the machine
        sched, latency_s, per_byte_s, cross_s, bytes_scale, overhead_s, compute_ms = parts
        per_byte_s = max(per_byte_s, cross_s / share)
        exposed_s = _exposed_s(sched, latency_s, per_byte_s * bytes_scale) + overhead_s
        return compute_ms / (compute_ms + exposed_s * 1e3)

    def link_duty(self, model: str, shape: Shape) -> float:
        """The share of one iteration, run alone on ``shape``, during which ``model``'s all-reduces
        send bytes between machines: the bandwidth time of all its all-reduces (cross-machine
        seconds per byte x calibrated gradient bytes) over the iteration's time (compute /
        speed factor), at most 1; 0 on one machine. What ``"interleaved"`` contention takes a
        job to ask of its links on average (:mod:`dallygym.sim.contention`)."""
        shape = _checked_shape(shape)
        cross_s = cross_link_traffic(shape, *self.links[1:])[0]
        if cross_s == 0.0:
            return 0.0
        sched = self._schedule_of(model)
        sending_s = cross_s * self.calibration(model).bytes_scale * float(sched.grad_bytes.sum())
        iteration_s = sched.compute_s / self.speed_factor(model, shape)
        return min(1.0, sending_s / iteration_s)

    def _parts_of(self, model: str, shape: Shape):
        """What :meth:`shared_speed_factor` needs of ``(model, shape)`` whatever the share (True
        for a shape on one machine)."""
        sched = self._schedule_of(model)
        if sum(len(r) for r in shape) < 2:
            return True
        cal = self.calibration(model)
        latency_s, per_byte_s = collective_cost(shape, *self.links)
        cross_s = cross_link_traffic(shape, *self.links[1:])[0]
        overhead_s = cal.overhead_pct / 100.0 * sched.compute_s
        return (
            sched,
            latency_s * cal.latency_scale,
            per_byte_s,
            cross_s,
            cal.bytes_scale,
            overhead_s,
            self.compute_ms(model),
        )


def _checked_shape(shape: Iterable[Iterable[int]]) -> Shape:
    """Canonical form of ``shape``; ValueError for an empty or non-positive one."""
    try:
        racks = [list(r) for r in shape]
        bad = any(isinstance(c, bool) or int(c) != c or c < 1 for r in racks for c in r)
    except (TypeError, ValueError):
        raise ValueError(f"a shape is a tuple of per-rack tuples of GPU counts, got {shape!r}") from None
    if bad or not racks or any(not r for r in racks):
        raise ValueError(f"a shape needs positive GPU counts in every machine and rack, got {shape!r}")
    return canonical_shape(racks)


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------


def _raw_paper_model(**kwargs) -> DallyPaperLatency:
    model = DallyPaperLatency(use_paper_calibration=False, **kwargs)
    model.name = "dally-paper-raw"
    return model


#: Preset name -> factory. ``"dally-paper"`` is the default (SPEC §2); ``"dally-paper-raw"``
#: is the same physics with no per-model calibration, to see what the calibration does.
LATENCY_PRESETS: Mapping[str, Callable[..., LatencyModel]] = MappingProxyType(
    {
        "dally-paper": DallyPaperLatency,
        "dally-paper-raw": _raw_paper_model,
    }
)


def get_latency_model(name: str = "dally-paper", **kwargs) -> LatencyModel:
    """A fresh latency model of preset ``name``; keyword arguments go to its constructor."""
    try:
        factory = LATENCY_PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown latency model {name!r}; known presets: {', '.join(LATENCY_PRESETS)}") from None
    return factory(**kwargs)


# --------------------------------------------------------------------------------------------
# Table I of the paper
# --------------------------------------------------------------------------------------------

#: The paper's Table I: exposed communication, % of compute, of 8-GPU jobs placed on one
#: machine, one rack, across the network (fact, SPEC §2): (machine, rack, network).
TABLE_I_PAPER: Mapping[str, tuple[float, float, float]] = MappingProxyType(
    {
        "vgg11": (1.0, 6.0, 7.0),
        "alexnet": (2.0, 13.0, 100.0),
        "mobilenet_v3": (42.0, 940.0, 19592.0),
        "resnet18": (7.0, 116.0, 2749.0),
        "resnet50": (12.0, 12.0, 38.0),
        "bert_large": (8.0, 23.0, 715.0),
    }
)

#: The placements behind Table I (SPEC §2): 1 machine x 8, 2 machines x 4 in one rack,
#: 2 racks x (1 machine x 4).
TABLE_I_SHAPES: Mapping[Tier, Shape] = MappingProxyType(
    {
        Tier.MACHINE: ((8,),),
        Tier.RACK: ((4, 4),),
        Tier.NETWORK: ((4,), (4,)),
    }
)


def within_table_i_tolerance(ours: float, paper: float) -> bool:
    """SPEC §2 tolerance: within 15 % relative or 2 percentage points, whichever is looser."""
    return abs(ours - paper) <= max(0.15 * abs(paper), 2.0)


def table_i_frame(latency: LatencyModel | None = None) -> pd.DataFrame:
    """Our Table I next to the paper's, one row per model in :data:`MODEL_NAMES` order.

    Columns: ``model, machine_pct, rack_pct, network_pct, paper_machine_pct, paper_rack_pct,
    paper_network_pct, within_tolerance`` (all three cells within tolerance). Percentages are
    rounded to 0.01; the tolerance is judged on the unrounded values.
    """
    latency = latency if latency is not None else get_latency_model()
    rows = []
    for model in MODEL_NAMES:
        ours = [latency.exposed_comm_pct(model, TABLE_I_SHAPES[t]) for t in Tier]
        paper = TABLE_I_PAPER[model]
        row = {"model": model}
        row.update({f"{t.label}_pct": round(v, 2) for t, v in zip(Tier, ours)})
        row.update({f"paper_{t.label}_pct": p for t, p in zip(Tier, paper)})
        row["within_tolerance"] = all(within_table_i_tolerance(o, p) for o, p in zip(ours, paper))
        rows.append(row)
    return pd.DataFrame.from_records(rows)


# --------------------------------------------------------------------------------------------
# Fitting the per-model calibration
# --------------------------------------------------------------------------------------------

#: Grid of ``bytes_scale`` and ``latency_scale`` values :func:`fit_calibration` searches.
FIT_SCALES: tuple[float, ...] = tuple(round(0.01 * i, 2) for i in range(1, 101))
#: Grid of ``overhead_pct`` values :func:`fit_calibration` searches (% of compute).
FIT_OVERHEADS: tuple[float, ...] = tuple(0.5 * i for i in range(41))
_KNOBS = ("bytes_scale", "latency_scale", "overhead_pct")


def _grid_pct(
    model: DallyPaperLatency, name: str, shape: Shape, latency_scales: np.ndarray, bytes_scales: np.ndarray
) -> np.ndarray:
    """Exposed communication (% of compute, no overhead) of ``name`` on ``shape`` for every
    pair of scales: shape ``(len(latency_scales), len(bytes_scales))``.

    The same FIFO end time as :func:`_exposed_s`, written as ``max_k(issue_k + latency x
    collectives from k on + per-byte x bytes from k on)``, which is linear in both scales and so
    evaluates a whole grid at once (equal to :meth:`DallyPaperLatency.exposed_comm_pct` up to
    float rounding).
    """
    sched = model._schedule_of(name)
    if sched.issue_s.size == 0 or sum(sum(r) for r in shape) < 2:
        return np.zeros((latency_scales.size, bytes_scales.size))
    latency_s, per_byte_s = collective_cost(shape, *model.links)
    count = np.arange(sched.issue_s.size, 0, -1, dtype=float)
    suffix_bytes = np.cumsum(sched.grad_bytes[::-1])[::-1]
    end = (
        sched.issue_s
        + latency_scales[:, None, None] * (latency_s * count)
        + bytes_scales[None, :, None] * (per_byte_s * suffix_bytes)
    ).max(axis=2)
    return 100.0 * np.maximum(end - sched.compute_s, 0.0) / sched.compute_s


def fit_calibration(
    model: str, targets: Mapping[Shape, float], latency: DallyPaperLatency | None = None
) -> Calibration:
    """The per-model :class:`Calibration` that reproduces ``targets`` (shape -> exposed
    communication, % of compute), by the rule the ``"dally-paper"`` table follows.

    A grid search (:data:`FIT_SCALES` for both scales, :data:`FIT_OVERHEADS` for the
    overhead) that moves as few knobs away from neutral ``(1, 1, 0)`` as it can: first no knob,
    then each single knob, then each pair, then all three; the first of these sizes at which
    some grid point puts every target within the Table I tolerance
    (:func:`within_table_i_tolerance`) wins, and among its points the one with the least
    ``sum(((ours - target) / tolerance) ** 2)``. If no point meets the tolerance, the point of
    least loss over all three knobs is returned. Ties go to the first point in knob order
    (bytes, latency, overhead), each grid ascending.

    ``latency``: the physics (links, profiles, compute times) to calibrate; default the raw
    ``"dally-paper"`` physics. The global NVSwitch latency is not refitted here. With the three
    Table I cells of a model as targets this is how :data:`MODEL_CALIBRATION` is refitted; with
    one cell left out, how the benchmark ``latency_validation.py`` tests the fit.
    """
    raw = latency if latency is not None else DallyPaperLatency(use_paper_calibration=False)
    check_model(model, raw.known_models)
    shapes = [_checked_shape(shape) for shape in targets]
    target = np.array([float(targets[shape]) for shape in targets])[:, None, None, None]
    tolerance = np.maximum(0.15 * np.abs(target), 2.0)
    scales = np.array(FIT_SCALES)
    overheads = np.array(FIT_OVERHEADS)
    fallback: tuple[float, Calibration] | None = None
    for size in range(len(_KNOBS) + 1):
        best: tuple[float, Calibration] | None = None
        for free in itertools.combinations(_KNOBS, size):
            grids = [
                scales if "bytes_scale" in free else np.array([1.0]),
                scales if "latency_scale" in free else np.array([1.0]),
                overheads if "overhead_pct" in free else np.array([0.0]),
            ]
            base = np.stack(
                [_grid_pct(raw, model, shape, grids[1], grids[0]) for shape in shapes]
                or [np.zeros((grids[1].size, grids[0].size))]
            )
            # (target, bytes, latency, overhead): grid order bytes, latency, overhead for ties.
            ours = base.transpose(0, 2, 1)[..., None] + grids[2]
            ours = ours if shapes else ours[:0]
            loss = (((ours - target) / tolerance) ** 2).sum(axis=0)
            within = (np.abs(ours - target) <= tolerance).all(axis=0)
            candidates = [(np.where(within, loss, np.inf), False)]
            if size == len(_KNOBS):
                candidates.append((loss, True))
            for values, is_fallback in candidates:
                i = np.unravel_index(int(np.argmin(values)), values.shape)
                value = float(values[i])
                if not np.isfinite(value):
                    continue
                cal = Calibration(*(float(grid[k]) for grid, k in zip(grids, i)))
                if is_fallback:
                    if fallback is None or value < fallback[0]:
                        fallback = (value, cal)
                elif best is None or value < best[0]:
                    best = (value, cal)
        if best is not None:
            return best[1]
    assert fallback is not None
    return fallback[1]
