"""Importers from public trace formats into the canonical trace (SPEC §3).

Four formats: Tiresias-simulator CSV, Philly-derived CSV (the Pollux artifact's
``philly.csv``), Helios ``cluster_log.csv`` and Gavel ``.trace`` files (with Gavel's throughput
table). Every importer runs the same pipeline, :func:`_build`, on what its reader got from the
file:

1. the format's own rule for rows that are not training jobs (Helios: failed, CPU-only,
   zero-second jobs) -- counted in ``report["dropped"]``;
2. the filters the caller asked for, in this order: virtual cluster (``vc``), time window
   (``start_h``/``end_h`` hours after the earliest arrival, or ``start``/``end`` date-times),
   jobs larger than the cluster (``oversize``: error, drop or clamp; every such row listed),
   then the first ``max_jobs`` jobs in arrival order;
3. models: the user's ``model_map``, then the known identifiers and their spellings
   (:data:`MODEL_ALIASES`), then the family aliases (:data:`FAMILY_ALIASES`), then a seeded
   draw (or an error) -- every name's fate is in ``report["model_names"]``;
4. durations: by default (``durations="wall"``) a recorded duration is the job's wall time
   alone on the cluster at its most consolidated placement, communication included, so the
   compute-only time is ``duration * s_best`` with ``s_best`` the latency model's speed factor
   there (:func:`best_speed_factors`); ``durations="compute"`` takes the duration as
   compute-only time (an earlier reading of these files);
5. iterations: the file's count where it has one (Tiresias ``iterations``, Gavel steps), else
   ``round(compute_time / ITER_TIME_S[model])``; ``iter_time_s = compute_time / iterations``;
6. job ids 0, 1, ... in arrival order (Tiresias keeps its ids), arrivals shifted so the first
   job arrives at 0 s, and the frame validated by :func:`~dallygym.sim.trace.validate_trace`.

Errors name the *source* file, its line (header = line 1; a Gavel file has no header, so its
first job is line 1) and its column. The result carries ``attrs["import_report"]`` (a
JSON-serialisable dict: what was read, dropped, changed, mapped, drawn, and which duration
reading was used), ``attrs["source_line"][job_index]`` (the source line of each row) and, for
Helios, ``attrs["job_id_map"]`` (the original ids).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dallygym.sim.cluster import ClusterSpec, ClusterState, Tier
from dallygym.sim.latency import LatencyModel, get_latency_model
from dallygym.sim.models import MODEL_NAMES
from dallygym.sim.trace.filters import (
    check_max_jobs,
    check_oversize_mode,
    check_window,
    first_jobs,
    handle_oversize,
    window_mask,
)
from dallygym.sim.trace.generators import ITER_TIME_S, paper_model_mix
from dallygym.sim.trace.schema import (
    MAX_TIME_S,
    MIN_ITER_TIME_S,
    RowLocator,
    TraceError,
    _decode,
    _exists,
    _read_bytes,
    clip,
    parse_labels,
    parse_numbers,
    read_csv_raw,
    require_columns,
    show_name,
    show_names,
    show_value,
    validate_trace,
)

#: Other spellings of the known model identifiers accepted in imported files (compared after
#: lower-casing and turning "-" and spaces into "_").
MODEL_ALIASES: dict[str, str] = {
    "vgg_11": "vgg11",
    "alex_net": "alexnet",
    "mobilenetv3": "mobilenet_v3",
    "mobilenet_v3_small": "mobilenet_v3",
    "mobilenetv3_small": "mobilenet_v3",
    "resnet_18": "resnet18",
    "resnet_50": "resnet50",
    "bert": "bert_large",
    "bertlarge": "bert_large",
}

#: Models that are not among the six profiled ones, mapped to the profiled model of their
#: family, or -- where no family member is profiled -- to the one closest in size and layer
#: structure (keys compared like :data:`MODEL_ALIASES`). Parameter counts, from the models'
#: papers and torchvision: VGG-11/16/19 133/138/144 M; ResNet-18/34 12/22 M, ResNet-50/101/152
#: 26/45/60 M; Inception-v3 24 M and Inception-v4 43 M (deep bottleneck CNNs like ResNet-50);
#: GoogLeNet 7 M (closest: ResNet-18); Gavel's "Transformer" is a translation transformer
#: (closest: BERT-large, the one transformer profiled).
FAMILY_ALIASES: dict[str, str] = {
    "vgg13": "vgg11",
    "vgg16": "vgg11",
    "vgg19": "vgg11",
    "resnet34": "resnet18",
    "resnet101": "resnet50",
    "resnet152": "resnet50",
    "inception3": "resnet50",
    "inception_v3": "resnet50",
    "inceptionv3": "resnet50",
    "inception4": "resnet50",
    "inception_v4": "resnet50",
    "inceptionv4": "resnet50",
    "googlenet": "resnet18",
    "mobilenet_v3_large": "mobilenet_v3",
    "mobilenet_v2": "mobilenet_v3",
    "bert_base": "bert_large",
    "transformer": "bert_large",
}

#: How a recorded duration is read: ``"wall"`` (default) -- wall time alone on the cluster at
#: the job's most consolidated placement, communication included; ``"compute"`` -- compute-only
#: time (speed factor 1).
DURATION_READINGS: tuple[str, ...] = ("wall", "compute")

#: The cluster imports are made for unless told otherwise: the README's main one (8 racks of
#: 8 machines of 8 GPUs). Only machines per rack and GPUs per machine change a job's best
#: placement; the rack count only decides which jobs fit.
DEFAULT_IMPORT_CLUSTER = ClusterSpec(racks=8, machines_per_rack=8, gpus_per_machine=8)

TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
HELIOS_COLUMNS = (
    "job_id",
    "user",
    "vc",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
)
#: Fields of a Gavel trace line: the 7-field layout of Gavel's Philly-derived traces
#: (``traces/msr``) and the 10-field layout its simulator's ``parse_trace`` reads.
GAVEL_FIELDS_7 = (
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time",
    "scale_factor",
)
GAVEL_FIELDS_10 = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)

# Columns an importer needs; the others of the format are allowed but not used.
_TIRESIAS_USED = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration")
_PHILLY_USED = ("timestamp", "duration", "num_gpus")
_HELIOS_USED = ("job_id", "gpu_num", "state", "submit_time", "duration")


class SharedTuple(tuple):
    """A tuple that pandas copies by reference when it propagates ``DataFrame.attrs``.

    pandas deep-copies ``attrs`` on nearly every operation; for a mapping over a million jobs
    that would cost a fraction of a second each time. A tuple is immutable, so sharing it is
    safe.
    """

    def __deepcopy__(self, memo) -> SharedTuple:
        return self


# ----------------------------------------------------------------------------------------------
# Options shared by every importer
# ----------------------------------------------------------------------------------------------


@dataclass
class ImportOptions:
    """What every importer accepts besides its file (all keyword arguments of the importers).

    Attributes:
        seed: seed of the model draws (``numpy.random.default_rng(seed)``).
        model_map: source model name -> known model identifier, tried first (the full name,
            then the name without a trailing ``(...)``, e.g. Gavel's ``(batch size 64)``).
        unknown_models: ``"draw"`` (seeded draw from ``model_mix``) or ``"error"``.
        model_mix: model -> weight for draws (default: the paper's mix).
        cluster: the target cluster: jobs must fit on it (see ``oversize``) and, with
            ``durations="wall"``, their best placement is found on it. None (only with
            ``durations="compute"``) skips the size check.
        models: the known model identifiers.
        durations: ``"wall"`` or ``"compute"`` (:data:`DURATION_READINGS`).
        latency: latency model (preset name or instance) giving ``s_best`` for ``"wall"``.
        start_h, end_h: keep jobs arriving in ``[start_h, end_h)`` hours after the earliest
            arrival of the file's jobs.
        start, end: the same window as date-times (files with date-time timestamps).
        vc: keep only these virtual clusters (a name or a list; Philly ``cluster``, Helios
            ``vc``).
        max_jobs: keep the first ``max_jobs`` jobs (arrival order) left after the other filters.
        oversize: ``"error"`` (default), ``"drop"`` or ``"clamp"`` for jobs larger than
            ``cluster``.
    """

    seed: int = 0
    model_map: Mapping[str, str] | None = None
    unknown_models: str = "draw"
    model_mix: Mapping[str, float] | None = None
    cluster: ClusterSpec | None = DEFAULT_IMPORT_CLUSTER
    models: Iterable[str] = MODEL_NAMES
    durations: str = "wall"
    latency: str | LatencyModel = "dally-paper"
    start_h: float | None = None
    end_h: float | None = None
    start: str | None = None
    end: str | None = None
    vc: str | Iterable[str] | None = None
    max_jobs: int | None = None
    oversize: str = "error"

    def __post_init__(self) -> None:
        self.models = tuple(self.models)
        if self.unknown_models not in ("draw", "error"):
            raise ValueError(f"unknown_models must be 'draw' or 'error', got {self.unknown_models!r}")
        if self.durations not in DURATION_READINGS:
            raise TraceError(f"durations must be one of {', '.join(DURATION_READINGS)}, got {self.durations!r}")
        if self.durations == "wall" and self.cluster is None:
            raise TraceError(
                "durations='wall' needs the target cluster (its best placements); "
                "pass cluster=ClusterSpec(...) or durations='compute'"
            )
        check_window(self.start_h, self.end_h)
        if (self.start_h is not None or self.end_h is not None) and (self.start is not None or self.end is not None):
            raise TraceError("give the time window in hours (start_h/end_h) or as date-times (start/end), not both")
        check_oversize_mode(self.oversize)
        check_max_jobs(self.max_jobs)
        if isinstance(self.vc, str):
            self.vc = (self.vc,)
        elif self.vc is not None:
            self.vc = tuple(str(v) for v in self.vc)
        self.model_map = dict(self.model_map or {})
        bad = {k: v for k, v in self.model_map.items() if v not in self.models}
        if bad:
            raise TraceError(f"model_map maps to unknown model(s) {bad}; known models: {', '.join(self.models)}")
        self.mix = _mix(self.model_mix, self.models)


def _mix(model_mix: Mapping[str, float] | None, models: tuple[str, ...]) -> dict[str, float]:
    mix = dict(paper_model_mix() if model_mix is None else model_mix)
    unknown = [m for m in mix if m not in models]
    if unknown:
        raise TraceError(f"model_mix names unknown model(s) {', '.join(unknown)}; known models: {', '.join(models)}")
    weights = np.array([float(w) for w in mix.values()])
    if not len(weights) or (weights < 0).any() or weights.sum() <= 0:
        raise TraceError("model_mix needs non-negative weights with a positive sum")
    return mix


def _draw_models(rng: np.random.Generator, count: int, mix: Mapping[str, float]) -> np.ndarray:
    names = np.array(list(mix), dtype=object)
    weights = np.array([float(w) for w in mix.values()])
    return rng.choice(names, size=count, p=weights / weights.sum()) if count else names[:0]


# ----------------------------------------------------------------------------------------------
# What a reader hands to the pipeline
# ----------------------------------------------------------------------------------------------


@dataclass
class _Read:
    """The jobs a reader kept from a file, one entry per row, in file order.

    ``arrival_s`` is seconds after the earliest of these rows' arrivals; ``stamps`` the
    absolute date-times where the file has them (for date windows); ``names`` the file's model
    names (None: the format names none); ``iterations`` the file's iteration counts (None: the
    format has none); ``ids`` ids kept as they are (None: numbered in arrival order);
    ``labels`` how the file identifies each job in reports; ``vc`` each job's virtual cluster.
    ``arrival_column`` and ``duration_column`` are the file's columns that times out of range
    are reported against.
    """

    where: RowLocator
    arrival_s: np.ndarray
    gpus: np.ndarray
    duration_s: np.ndarray
    gpu_column: str
    report: dict
    arrival_column: str = "submit_time"
    duration_column: str = "duration"
    names: np.ndarray | None = None
    name_column: str = "model_name"
    iterations: np.ndarray | None = None
    ids: np.ndarray | None = None
    labels: np.ndarray | None = None
    vc: np.ndarray | None = None
    vc_column: str | None = None
    stamps: pd.Series | None = None
    origin: str | None = None
    extra: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# Speed factor at the most consolidated placement
# ----------------------------------------------------------------------------------------------


def best_placement_shape(cluster: ClusterSpec, num_gpus: int):
    """``(tier, shape)`` of the engine's placement of ``num_gpus`` GPUs on an empty cluster
    at the most consolidated tier it can have (one machine; else one rack over the fewest
    machines; else the fewest racks) -- what a job alone on the cluster gets."""
    tier = cluster.best_possible_tier(num_gpus)
    if tier == Tier.MACHINE:
        return tier, ((int(num_gpus),),)
    gpus = ClusterState(cluster).place(int(num_gpus), tier)
    return tier, cluster.shape_of(gpus)


def best_speed_factors(
    models: np.ndarray, gpus: np.ndarray, cluster: ClusterSpec, latency: LatencyModel
) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the speed factor ``s_best`` (0 < s <= 1) at its most consolidated placement on
    ``cluster`` (:func:`best_placement_shape`), and that placement's tier (int)."""
    speed = np.empty(len(gpus), dtype=np.float64)
    tiers = np.empty(len(gpus), dtype=np.int64)
    cache: dict[tuple[str, int], tuple[float, int]] = {}
    for i, (m, g) in enumerate(zip(models.tolist(), gpus.tolist())):
        hit = cache.get((m, g))
        if hit is None:
            tier, shape = best_placement_shape(cluster, g)
            hit = cache[(m, g)] = (float(latency.speed_factor(m, shape)), int(tier))
        speed[i], tiers[i] = hit
    return speed, tiers


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def _normalise(name: str) -> str:
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    return MODEL_ALIASES.get(key, key)


_TRAILING_NOTE = re.compile(r"\s*\([^()]*\)\s*$")


def _family_name(name: str) -> str:
    """The name without a trailing note in parentheses: ``ResNet-50 (batch size 64)`` ->
    ``ResNet-50``."""
    return _TRAILING_NOTE.sub("", name).strip()


def _resolve_name(name: str, opt: ImportOptions) -> tuple[str | None, str]:
    """``(model, how)`` for one source name; ``how`` is mapped / as_is / aliased / family /
    unknown (model None)."""
    base = _family_name(name)
    for key in (name, name.strip(), base):
        if key in opt.model_map:
            return opt.model_map[key], "mapped"
    if name.strip() in opt.models:
        return name.strip(), "as_is"
    norm = _normalise(base)
    if norm in opt.models:
        return norm, "aliased"
    if norm in FAMILY_ALIASES and FAMILY_ALIASES[norm] in opt.models:
        return FAMILY_ALIASES[norm], "family"
    return None, "unknown"


def _assign_models(read: _Read, rows: np.ndarray, opt: ImportOptions) -> tuple[np.ndarray, dict]:
    """Models of the jobs at positions ``rows`` (file order) of ``read``, and the report part.

    Draws are one per job that needs one, in file order, from ``default_rng(opt.seed)``.
    """
    rng = np.random.default_rng(opt.seed)
    counts = {"as_is": 0, "aliased": 0, "family": 0, "mapped": 0, "drawn": 0}
    if read.names is None:
        if opt.model_map:
            raise TraceError(
                f"{read.where.source}: this format names no model, so model_map "
                f"has nothing to map; every job's model is drawn"
            )
        models = _draw_models(rng, len(rows), opt.mix)
        counts["drawn"] = len(rows)
        return models, {"models": counts, "model_names": {}}
    names = read.names[rows]
    fate: dict[str, tuple[str | None, str]] = {}
    for n in dict.fromkeys(names.tolist()):
        fate[n] = _resolve_name(n, opt)
    resolved = np.array([fate[n][0] for n in names.tolist()], dtype=object)
    unknown = np.flatnonzero(np.array([fate[n][1] == "unknown" for n in names.tolist()], dtype=bool))
    if len(unknown) and opt.unknown_models == "error":
        i = int(unknown[0])
        raise TraceError(
            f"{read.where.subset(rows).at(i, read.name_column)}: unknown model "
            f"{show_value(names[i])} "
            f"(not in model_map, not a known model, spelling or family alias); "
            f"known models: {', '.join(opt.models)}"
        )
    resolved[unknown] = _draw_models(rng, len(unknown), opt.mix)
    per_name: dict[str, dict] = {}
    for n in names.tolist():
        model, how = fate[n]
        entry = per_name.setdefault(n, {"how": "drawn" if how == "unknown" else how, "model": model, "jobs": 0})
        entry["jobs"] += 1
        counts[entry["how"]] += 1
    drawn_as: dict[str, dict[str, int]] = {}
    for i in unknown.tolist():
        split = drawn_as.setdefault(names[i], {})
        split[resolved[i]] = split.get(resolved[i], 0) + 1
    for n, split in drawn_as.items():
        per_name[n]["model"] = dict(sorted(split.items()))
    drawn_for = {n: e["jobs"] for n, e in per_name.items() if e["how"] == "drawn"}
    return resolved, {"models": counts, "model_names": per_name, "models_drawn_for": drawn_for}


# ----------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------


def _stamp(text: str, name: str, stamps: pd.Series) -> pd.Timestamp:
    try:
        value = pd.Timestamp(text)
    except (ValueError, TypeError, OverflowError):
        raise TraceError(
            f"{name} must be a date-time like 2017-10-09 or 2017-10-09 12:00, got {clip(str(text))}"
        ) from None
    tz = stamps.dt.tz
    if tz is not None and value.tzinfo is None:
        value = value.tz_localize(tz)
    elif tz is None and value.tzinfo is not None:
        raise TraceError(f"{name} {clip(str(text))} has a time zone, the file's timestamps have none")
    return value


def _build(read: _Read, opt: ImportOptions) -> pd.DataFrame:
    """Filters, models, durations, iterations and ids for what a reader kept (module doc)."""
    source = read.where.source
    report = read.report
    dropped = report.setdefault("dropped", {})
    keep = _filtered(read, opt, dropped)

    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise TraceError(
            f"{source}: no job is left after the filters ({report['rows_read']} "
            f"rows read; dropped: {_dropped_words(dropped)})"
        )

    labels = None if read.labels is None else read.labels[rows]
    kept, gpus, changes = handle_oversize(
        read.gpus[rows], opt.cluster, opt.oversize, read.where.subset(rows), read.gpu_column, labels
    )
    report["oversize"] = {"mode": opt.oversize, "rows": changes}
    if opt.oversize == "drop":
        dropped["oversize"] = int((~kept).sum())
    rows, gpus = rows[kept], gpus[kept]
    if len(rows) == 0:
        raise TraceError(f"{source}: every job left is larger than the cluster ({len(changes)} dropped)")

    # Arrival order, ties in file order; then the first max_jobs.
    order = np.argsort(read.arrival_s[rows], kind="stable")
    rows, gpus = rows[order], gpus[order]
    first = first_jobs(len(rows), opt.max_jobs)
    if opt.max_jobs is not None:
        dropped["max_jobs"] = int((~first).sum())
    rows, gpus = rows[first], gpus[first]

    # Models are drawn in file order, whatever the arrival order.
    file_order = np.argsort(rows, kind="stable")
    models = np.empty(len(rows), dtype=object)
    drawn, model_report = _assign_models(read, rows[file_order], opt)
    models[file_order] = drawn
    report.update(model_report)

    duration = read.duration_s[rows]
    where = read.where.subset(rows)
    _check_arrivals(read, rows, where)
    compute_s = _compute_times(read, rows, models, gpus, opt, duration)
    _check_run_times(compute_s, read, where)
    if opt.cluster is not None:
        report["cluster"] = {
            "racks": opt.cluster.racks,
            "machines_per_rack": opt.cluster.machines_per_rack,
            "gpus_per_machine": opt.cluster.gpus_per_machine,
        }

    iterations = _iterations(read, rows, models, compute_s)

    _check_iteration_times(compute_s, iterations, read, where)
    arrival = read.arrival_s[rows]
    shift = float(arrival.min())
    report["arrival_shift_s"] = shift
    ids = read.ids[rows] if read.ids is not None else np.arange(len(rows), dtype=np.int64)
    frame = pd.DataFrame(
        {
            "job_id": ids,
            "arrival_s": arrival - shift,
            "num_gpus": gpus,
            "model": models,
            "total_iterations": iterations,
            "iter_time_s": compute_s / iterations,
        }
    )
    report["rows_kept"] = len(rows)
    out = validate_trace(frame, source, opt.cluster, opt.models, locator=where)
    out.attrs["import_report"] = report
    # validate_trace sorts by (arrival, id): map its rows back to the source's lines.
    by_id = pd.Index(ids).get_indexer(out["job_id"].to_numpy())
    out.attrs["source_line"] = SharedTuple(int(where.first_line + where.positions[i]) for i in by_id.tolist())
    if read.labels is not None and read.ids is None:
        out.attrs["job_id_map"] = SharedTuple(str(read.labels[rows][i]) for i in by_id.tolist())
    return out


def _filtered(read: _Read, opt: ImportOptions, dropped: dict) -> np.ndarray:
    """Which rows are in the virtual clusters and time window asked for (what each filter
    dropped counted in ``dropped``, and reported)."""
    source = read.where.source
    report = read.report
    keep = np.ones(len(read.gpus), dtype=bool)
    if opt.vc is not None:
        if read.vc is None:
            raise TraceError(
                f"{source}: this format has no virtual-cluster column; "
                f"vc (--cluster) applies to philly and helios files"
            )
        present = sorted(set(read.vc.tolist()))
        missing = [v for v in opt.vc if v not in present]
        if missing:
            raise TraceError(
                f"{source}, column {read.vc_column}: no job of virtual cluster(s) "
                f"{show_names(missing)}; the file has {show_names(present)}"
            )
        in_vc = np.isin(read.vc.astype(str), np.array(opt.vc, dtype=str))
        dropped["other_virtual_cluster"] = int((keep & ~in_vc).sum())
        keep &= in_vc
        report["virtual_clusters"] = list(opt.vc)

    if opt.start is not None or opt.end is not None:
        if read.stamps is None:
            raise TraceError(
                f"{source}: the file's times are not date-times; give the window "
                f"in hours (start_h/end_h, --start-h/--end-h)"
            )
        in_window = np.ones(len(keep), dtype=bool)
        if opt.start is not None:
            in_window &= (read.stamps >= _stamp(opt.start, "start", read.stamps)).to_numpy()
        if opt.end is not None:
            in_window &= (read.stamps < _stamp(opt.end, "end", read.stamps)).to_numpy()
        if (
            opt.start is not None
            and opt.end is not None
            and _stamp(opt.end, "end", read.stamps) <= _stamp(opt.start, "start", read.stamps)
        ):
            raise TraceError(f"the time window is empty: end {opt.end} <= start {opt.start}")
        dropped["outside_window"] = int((keep & ~in_window).sum())
        keep &= in_window
        report["window"] = {"start": opt.start, "end": opt.end}
    elif opt.start_h is not None or opt.end_h is not None:
        start_s = None if opt.start_h is None else opt.start_h * 3600.0
        end_s = None if opt.end_h is None else opt.end_h * 3600.0
        in_window = window_mask(read.arrival_s, start_s, end_s)
        dropped["outside_window"] = int((keep & ~in_window).sum())
        keep &= in_window
        report["window"] = {
            "start_h": opt.start_h,
            "end_h": opt.end_h,
            "hours_after": read.origin or "the earliest arrival",
        }
    return keep


def _compute_times(
    read: _Read, rows: np.ndarray, models: np.ndarray, gpus: np.ndarray, opt: ImportOptions, duration: np.ndarray
) -> np.ndarray:
    """The kept jobs' compute-only times from their recorded durations, as ``opt.durations``
    reads them (reported)."""
    report = read.report
    report["durations"] = opt.durations
    if opt.durations == "wall":
        latency = get_latency_model(opt.latency) if isinstance(opt.latency, str) else opt.latency
        speed, tiers = best_speed_factors(models, gpus, opt.cluster, latency)
        compute_s = duration * speed
        report["duration_reading"] = (
            "recorded duration = wall time alone on the cluster at the "
            "most consolidated placement; compute-only time = "
            "duration x s_best"
        )
        report["latency"] = latency.name
        report["best_tier"] = {t.label: int((tiers == int(t)).sum()) for t in Tier}
    else:
        compute_s = duration
        report["duration_reading"] = "recorded duration = compute-only time (s = 1)"
    return compute_s


def _iterations(read: _Read, rows: np.ndarray, models: np.ndarray, compute_s: np.ndarray) -> np.ndarray:
    """The kept jobs' iteration counts: the file's, or compute-only time / the model's
    iteration time (reported)."""
    report = read.report
    if read.iterations is not None:
        iterations = read.iterations[rows]
        report["iteration_time"] = "compute-only time / iterations from the file"
    else:
        table = np.array([ITER_TIME_S.get(m, np.nan) for m in models.tolist()])
        if np.isnan(table).any():
            missing = sorted({m for m in models.tolist() if m not in ITER_TIME_S})
            raise TraceError(
                f"no iteration time for model(s) {', '.join(missing)}; ITER_TIME_S covers {', '.join(ITER_TIME_S)}"
            )
        iterations = np.maximum(1, np.rint(compute_s / table)).astype(np.int64)
        report["iteration_time"] = (
            "round(compute-only time / ITER_TIME_S[model]) iterations of compute-only time / iterations"
        )
    return iterations


# The canonical trace bounds arrivals, run times and iteration times (MAX_TIME_S,
# MIN_ITER_TIME_S). An imported job outside them is reported here, against the file's own
# column and line, before numbers derived from it (iterations, iteration times) can overflow
# or wrap, and before validate_trace would name a canonical column the file does not have.

_YEARS = "about 31.7 years"


def _check_arrivals(read: _Read, rows: np.ndarray, where: RowLocator) -> None:
    arrival = read.arrival_s[rows]
    with np.errstate(invalid="ignore", over="ignore"):
        late = ~(arrival - arrival.min() <= MAX_TIME_S)
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise TraceError(
            f"{where.at(i, read.arrival_column)}: out of range: arrives "
            f"{arrival[i] - arrival.min():g} s after the earliest job, more than "
            f"{MAX_TIME_S:g} s ({_YEARS})"
        )


def _check_run_times(compute_s: np.ndarray, read: _Read, where: RowLocator) -> None:
    long = ~(compute_s <= MAX_TIME_S)
    if long.any():
        i = int(np.flatnonzero(long)[0])
        raise TraceError(
            f"{where.at(i, read.duration_column)}: out of range: a compute-only run time of "
            f"{compute_s[i]:g} s, more than {MAX_TIME_S:g} s ({_YEARS}){_count(long)}"
        )


def _check_iteration_times(compute_s: np.ndarray, iterations: np.ndarray, read: _Read, where: RowLocator) -> None:
    with np.errstate(invalid="ignore", divide="ignore"):
        short = ~(compute_s / iterations >= MIN_ITER_TIME_S)
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise TraceError(
            f"{where.at(i, read.duration_column)}: out of range: {compute_s[i]:g} s of compute "
            f"over {int(iterations[i])} iteration(s) is less than {MIN_ITER_TIME_S:g} s an "
            f"iteration{_count(short)}"
        )


def _count(bad: np.ndarray) -> str:
    more = int(bad.sum()) - 1
    return f" (and {more} more such row{'s' if more != 1 else ''})" if more else ""


def _dropped_words(dropped: dict) -> str:
    items = [f"{k} {v}" for k, v in dropped.items() if v]
    return ", ".join(items) if items else "none"


# ----------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------


def _parse_times(values: pd.Series, column: str, where: RowLocator) -> tuple[np.ndarray, pd.Series | None]:
    """Seconds after the earliest value, from numbers (seconds) or date-time strings, and the
    parsed date-times (None for numbers)."""
    values = values.reset_index(drop=True)
    missing = values.isna().to_numpy() | (values.astype(str).str.strip() == "").to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise TraceError(f"{where.at(i, column)}: missing value (empty)")
    if _all_numbers(values):
        seconds = parse_numbers(values, column, where, integer=False, minimum=-np.inf)
        with np.errstate(over="ignore"):  # out of range spans are reported by _build
            return seconds - seconds.min(), None
    text = values.astype(str).str.strip()
    try:
        stamps = pd.to_datetime(text, errors="coerce", format="ISO8601")
        if stamps.isna().any():
            stamps = pd.to_datetime(text, errors="coerce", format="mixed")
    except (ValueError, TypeError) as exc:
        # Mixed time zones (or naive mixed with aware) cannot be put on one axis.
        i = _first_other_zone(text.tolist())
        at = where.at(i, column) if i is not None else f"{where.source}, column {column}"
        raise TraceError(
            f"{at}: inconsistent timestamps: a time zone unlike the first row's ({str(exc).split('.')[0]})"
        ) from None
    bad = stamps.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{where.at(i, column)}: expected seconds or a date-time, got {show_value(values.iloc[i])}")
    try:
        offsets = (stamps - stamps.min()) / pd.Timedelta(seconds=1)
    except (OverflowError, pd.errors.OutOfBoundsTimedelta):
        latest = int(np.argmax(stamps.to_numpy()))
        raise TraceError(
            f"{where.at(latest, column)}: out of range: the date-times span more "
            f"than pandas can represent (about 292 years)"
        ) from None
    return offsets.to_numpy(dtype=np.float64), stamps


def _first_other_zone(texts: list[str]) -> int | None:
    """Position of the first date-time whose UTC offset (or lack of one) differs from the
    first parseable one's; None if there is none."""
    first = None
    for i, text in enumerate(texts):
        try:
            offset = pd.Timestamp(text).utcoffset()
        except (ValueError, TypeError, OverflowError):
            continue
        if first is None:
            first = (offset,)
        elif offset != first[0]:
            return i
    return None


def _all_numbers(values: pd.Series) -> bool:
    try:
        return bool(pd.to_numeric(values, errors="coerce").notna().all())
    except (ValueError, TypeError, OverflowError):
        # Integers too large for a float64: numbers still, reported as out of range later.
        return bool(values.astype(str).str.strip().str.fullmatch(r"[+-]?\d+").all())


def _base_report(fmt: str, source: str, seed: int, rows_read: int) -> dict:
    return {"format": fmt, "source": source, "seed": seed, "rows_read": rows_read, "rows_kept": 0, "dropped": {}}


def _read_tiresias(path: str | Path, opt: ImportOptions) -> _Read:
    raw, where = read_csv_raw(path, text_columns=("model_name",))
    require_columns(raw, _TIRESIAS_USED, where)
    if len(raw) == 0:
        raise TraceError(f"{where.source}, line 2: the file has no jobs (nothing after the header line)")
    ids = parse_numbers(raw["job_id"], "job_id", where, integer=True, minimum=0)
    gpus = parse_numbers(raw["num_gpu"], "num_gpu", where, integer=True, minimum=1)
    submit = parse_numbers(raw["submit_time"], "submit_time", where, integer=False, minimum=0.0)
    iterations = parse_numbers(raw["iterations"], "iterations", where, integer=True, minimum=1)
    duration = parse_numbers(raw["duration"], "duration", where, integer=False, minimum=0.0, strict=True)
    names = parse_labels(raw["model_name"], "model_name", where)
    return _Read(
        where=where,
        arrival_s=submit - submit.min(),
        gpus=gpus,
        duration_s=duration,
        gpu_column="num_gpu",
        report=_base_report("tiresias", where.source, opt.seed, len(raw)),
        names=names,
        iterations=iterations,
        ids=ids,
        labels=ids,
        origin="the earliest submit_time",
    )


def _read_philly(path: str | Path, opt: ImportOptions) -> _Read:
    raw, where = read_csv_raw(path, text_columns=("timestamp", "cluster"))
    require_columns(raw, _PHILLY_USED + (("cluster",) if opt.vc is not None else ()), where)
    if len(raw) == 0:
        raise TraceError(f"{where.source}, line 2: the file has no jobs (nothing after the header line)")
    arrival, stamps = _parse_times(raw["timestamp"], "timestamp", where)
    duration = parse_numbers(raw["duration"], "duration", where, integer=False, minimum=0.0, strict=True)
    gpus = parse_numbers(raw["num_gpus"], "num_gpus", where, integer=True, minimum=1)
    vc = parse_labels(raw["cluster"], "cluster", where) if "cluster" in raw.columns else None
    origin = None if stamps is None else str(stamps.min())
    return _Read(
        where=where,
        arrival_s=arrival,
        gpus=gpus,
        duration_s=duration,
        gpu_column="num_gpus",
        arrival_column="timestamp",
        report=_base_report("philly", where.source, opt.seed, len(raw)),
        vc=vc,
        vc_column="cluster",
        stamps=stamps,
        origin=origin,
    )


def _read_helios(path: str | Path, opt: ImportOptions) -> _Read:
    raw, where = read_csv_raw(path, text_columns=("job_id", "state", "submit_time", "vc"))
    require_columns(raw, _HELIOS_USED + (("vc",) if opt.vc is not None else ()), where)
    if len(raw) == 0:
        raise TraceError(f"{where.source}, line 2: the file has no jobs (nothing after the header line)")
    gpus_all = parse_numbers(raw["gpu_num"], "gpu_num", where, integer=True, minimum=0)
    state = raw["state"].astype(str).str.strip().to_numpy()
    completed = state == "COMPLETED"
    gpu_job = gpus_all > 0
    candidate = completed & gpu_job
    # Durations of the rows that can be kept must parse; the others are not read.
    cand_where = where.subset(candidate)
    cand_raw = raw.loc[candidate].reset_index(drop=True)
    duration_c = parse_numbers(cand_raw["duration"], "duration", cand_where, integer=False, minimum=0.0)
    positive = duration_c > 0
    keep = np.flatnonzero(candidate)[positive]
    if len(keep) == 0:
        raise TraceError(f"{where.source}: no completed GPU job with a positive duration ({len(raw)} rows read)")
    kept_raw = raw.iloc[keep].reset_index(drop=True)
    kept_where = where.subset(keep)
    original_ids = parse_labels(kept_raw["job_id"], "job_id", kept_where)
    dup = pd.Series(original_ids).duplicated().to_numpy()
    if dup.any():
        j = int(np.flatnonzero(dup)[0])
        i = int(np.flatnonzero(original_ids == original_ids[j])[0])
        raise TraceError(
            f"{kept_where.at(j, 'job_id')}: duplicate job_id "
            f"{show_value(original_ids[j])} on {kept_where.row(i)} and "
            f"{kept_where.row(j)}"
        )
    arrival, stamps = _parse_times(kept_raw["submit_time"], "submit_time", kept_where)
    vc = parse_labels(kept_raw["vc"], "vc", kept_where) if "vc" in raw.columns else None
    report = _base_report("helios", where.source, opt.seed, len(raw))
    report["dropped"] = {
        "not_completed": int((~completed).sum()),
        "no_gpu": int((completed & ~gpu_job).sum()),
        "zero_duration": int((~positive).sum()),
    }
    return _Read(
        where=kept_where,
        arrival_s=arrival,
        gpus=gpus_all[keep],
        duration_s=duration_c[positive],
        gpu_column="gpu_num",
        report=report,
        labels=original_ids,
        vc=vc,
        vc_column="vc",
        stamps=stamps,
        origin=None if stamps is None else str(stamps.min()),
    )


# ----------------------------------------------------------------------------------------------
# Gavel
# ----------------------------------------------------------------------------------------------


def load_gavel_throughputs(path: str | Path, worker_type: str = "v100") -> dict[tuple[str, int], float]:
    """Gavel's ``simulation_throughputs.json`` for one worker type: ``{(job type, scale
    factor): steps per second}`` -- each entry's isolated rate (its ``"null"`` key: the job
    running alone, not co-located with another).

    Raises:
        TraceError: missing or malformed file, unknown worker type (listing the known ones), a
            key that is not ``"('job type', scale factor)"``, or a rate that is not > 0.
    """
    path = Path(path)
    if not _exists(path):
        raise TraceError(f"{path}: no such file (the Gavel throughput table)")
    data = _read_bytes(path, kind="JSON")
    text = _decode(path, data, kind="JSON", sep=None, header=False)
    try:
        table = json.loads(text.removeprefix("\ufeff"))
    except RecursionError:
        raise TraceError(f"{path}: not a JSON throughput table (nested too deeply)") from None
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path}, line {exc.lineno}, column {exc.colno}: not a JSON throughput table ({exc.msg})"
        ) from None
    except ValueError as exc:
        # Not a syntax error: a number json refuses to convert (more than 4,300 digits).
        raise TraceError(f"{path}: not a JSON throughput table ({exc})") from None
    if not isinstance(table, dict):
        raise TraceError(f"{path}: expected a JSON object of worker types, got {_json_kind(table)}")
    if worker_type not in table:
        raise TraceError(
            f"{path}: no worker type {clip(str(worker_type))}; the table has {show_names(sorted(table)) or 'none'}"
        )
    entries = table[worker_type]
    at = f"{path}, worker type {show_name(worker_type)}"
    if not isinstance(entries, dict):
        raise TraceError(f"{at}: expected an object of \"('job type', scale factor)\" keys, got {_json_kind(entries)}")
    rates: dict[tuple[str, int], float] = {}
    for key, entry in entries.items():
        here = f"{at}, key {clip(key)}"
        job_type, scale = _gavel_key(key, here)
        if not isinstance(entry, dict) or "null" not in entry:
            raise TraceError(f"{here}: expected an object with an isolated ('null') rate, got {_json_kind(entry)}")
        rates[(job_type, scale)] = _gavel_rate(entry["null"], f"{here}, key 'null'")
    return rates


def _json_kind(value: object) -> str:
    """A JSON value as a message names it: its kind, and the value itself when short."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    kind = kinds.get(type(value), "a number")
    return kind if isinstance(value, (dict, list, type(None))) else f"{kind} {show_value(value)}"


def _gavel_key(key: str, here: str) -> tuple[str, int]:
    """``"('ResNet-50', 4)"`` -> ``("ResNet-50", 4)``; TraceError ``here`` otherwise."""
    expected = f"{here}: expected \"('job type', scale factor)\" with a whole scale factor >= 1"
    # No real key is long; a long one is refused before the parser sees it (deep nesting
    # would exhaust the parser's stack).
    if len(key) > 1000:
        raise TraceError(expected)
    try:
        parsed = ast.literal_eval(key)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise TraceError(expected) from None
    if not (isinstance(parsed, tuple) and len(parsed) == 2 and isinstance(parsed[0], str)):
        raise TraceError(expected)
    job_type, scale = parsed
    if isinstance(scale, float) and scale.is_integer():
        scale = int(scale)
    if not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= 2**53:
        raise TraceError(f"{expected}, got scale factor {show_value(scale)}")
    return job_type, scale


def _gavel_rate(rate: object, here: str) -> float:
    value = None
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        try:
            value = float(rate)
        except OverflowError:  # an integer beyond float64
            value = None
    if value is None or not (np.isfinite(value) and value > 0):
        raise TraceError(f"{here}: rate must be > 0 steps/s, got {_json_kind(rate)}")
    return value


def _read_gavel_lines(path: Path) -> tuple[list[list[str]], int]:
    source = str(path)
    text = _decode(path, _read_bytes(path, kind="Gavel trace"), kind="Gavel trace", sep="\t", header=False)
    lines = text.removeprefix("\ufeff").split("\n")
    while lines and lines[-1].strip() == "":
        lines.pop()
    if not lines:
        raise TraceError(f"{source}, line 1: the file has no jobs")
    rows = []
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if line.strip() == "":
            raise TraceError(f"{source}, line {number}: blank line inside the data")
        fields = line.split("\t")
        if len(fields) not in (7, 10):
            raise TraceError(
                f"{source}, line {number}: {len(fields)} tab-separated fields; a Gavel trace "
                f"line has 7 ({', '.join(GAVEL_FIELDS_7)}) or 10 ({', '.join(GAVEL_FIELDS_10)})"
            )
        layout = GAVEL_FIELDS_7 if len(fields) == 7 else GAVEL_FIELDS_10
        rows.append(dict(zip(layout, fields)))
    return rows, len(lines)


def _read_gavel(
    path: str | Path, throughputs: str | Path, worker_type: str, missing_throughput: str, opt: ImportOptions
) -> _Read:
    if missing_throughput not in ("scale", "error"):
        raise TraceError(f"missing_throughput must be 'scale' or 'error', got {missing_throughput!r}")
    rates_table = load_gavel_throughputs(throughputs, worker_type)
    path = Path(path)
    rows, count = _read_gavel_lines(path)
    where = RowLocator(str(path), first_line=1)
    column = {
        name: pd.Series([r[name] for r in rows], dtype=object)
        for name in ("job_type", "total_steps", "arrival_time", "scale_factor")
    }
    job_type = parse_labels(column["job_type"], "job_type", where)
    steps = parse_numbers(column["total_steps"], "total_steps", where, integer=True, minimum=1)
    arrival = parse_numbers(column["arrival_time"], "arrival_time", where, integer=False, minimum=0.0)
    scale = parse_numbers(column["scale_factor"], "scale_factor", where, integer=True, minimum=1)

    rate = np.empty(count, dtype=np.float64)
    fallback: dict[str, int] = {}
    for i, (t, k) in enumerate(zip(job_type.tolist(), scale.tolist())):
        if (t, k) in rates_table:
            rate[i] = rates_table[(t, k)]
            continue
        if missing_throughput == "error" or (t, 1) not in rates_table:
            also = "" if (t, 1) in rates_table else " and no 1-GPU rate to scale"
            raise TraceError(
                f"{where.at(i, 'job_type')}: no {show_name(worker_type)} throughput for "
                f"{show_value(t)} at scale factor {k} in {throughputs}{also}"
                + (
                    "; missing_throughput='scale' (--missing-throughput scale) uses the 1-GPU rate x scale factor"
                    if not also
                    else ""
                )
            )
        # Fallback: the job's k workers each run at the 1-GPU rate (linear scaling).
        with np.errstate(over="ignore"):  # an infinite rate gives a 0 s run, refused later
            rate[i] = np.float64(rates_table[(t, 1)]) * k
        label = f"{t} x{k}"
        fallback[label] = fallback.get(label, 0) + 1
    report = _base_report("gavel", where.source, opt.seed, count)
    report["throughputs"] = {
        "table": str(throughputs),
        "worker_type": worker_type,
        "from_table": int(count - sum(fallback.values())),
        "fallback_1gpu_rate_x_scale": int(sum(fallback.values())),
        "fallback_pairs": dict(sorted(fallback.items())),
    }
    report["layout"] = {"7_fields": sum(len(r) == 7 for r in rows), "10_fields": sum(len(r) == 10 for r in rows)}
    with np.errstate(over="ignore"):  # a tiny rate's infinite run time is refused by _build
        duration = steps / rate
        arrival = arrival - arrival.min()
    return _Read(
        where=where,
        arrival_s=arrival,
        gpus=scale,
        duration_s=duration,
        gpu_column="scale_factor",
        report=report,
        arrival_column="arrival_time",
        duration_column="total_steps",
        names=job_type,
        name_column="job_type",
        iterations=steps,
        origin="the earliest arrival_time",
    )


# ----------------------------------------------------------------------------------------------
# Public importers
# ----------------------------------------------------------------------------------------------


def import_tiresias(path: str | Path, seed: int = 0, **options) -> pd.DataFrame:
    """Import a Tiresias-simulator CSV (``job_id,num_gpu,submit_time,iterations,model_name,
    duration,interval``).

    ``submit_time`` (seconds) is the arrival; ``duration`` is seconds; ``iterations`` the
    iteration count, kept; ``interval`` is not used. ``job_id`` must be a unique non-negative
    integer and is kept. ``model_name`` goes through ``model_map``, spellings, family aliases
    and the seeded draw. Other options: :class:`ImportOptions`.

    Returns:
        The canonical frame; ``attrs["import_report"]`` (see the module doc).
    """
    opt = ImportOptions(seed=seed, **options)
    return _build(_read_tiresias(path, opt), opt)


def import_philly(path: str | Path, seed: int = 0, **options) -> pd.DataFrame:
    """Import a Philly-derived CSV (``timestamp,duration,num_gpus,gpu_time,cluster``).

    ``timestamp`` may be seconds or date-time strings (ISO 8601 or anything pandas parses;
    time-zone offsets are honoured, abbreviations like ``PST`` are not). ``duration`` is
    seconds (> 0), ``num_gpus`` >= 1; ``gpu_time`` is not used; ``cluster`` is the virtual
    cluster (filter with ``vc``). Every job's model is drawn (seeded); job ids are 0, 1, ...
    in arrival order (ties in file order). Other options: :class:`ImportOptions`.
    """
    opt = ImportOptions(seed=seed, **options)
    return _build(_read_philly(path, opt), opt)


def import_helios(path: str | Path, seed: int = 0, **options) -> pd.DataFrame:
    """Import a Helios / SenseTime ``cluster_log.csv``.

    Columns ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,
    duration,queue`` (``job_id, gpu_num, state, submit_time, duration`` are used, and ``vc``
    to filter by virtual cluster). Kept: jobs with ``state == "COMPLETED"`` and
    ``gpu_num > 0`` (the trace also logs CPU jobs and failed or cancelled ones, which ran no
    full training) and ``duration > 0`` (the log counts whole seconds, so a sub-second job has
    duration 0 and no run time to replay); the counts are in ``report["dropped"]``.

    ``submit_time`` is date-time strings or seconds; ``duration`` is seconds. Job ids (often
    strings) are replaced by 0, 1, ... in arrival order (ties in file order);
    ``attrs["job_id_map"][new_id]`` is the original id. Models are drawn (seeded). Other
    options: :class:`ImportOptions`.
    """
    opt = ImportOptions(seed=seed, **options)
    return _build(_read_helios(path, opt), opt)


def import_gavel(
    path: str | Path,
    throughputs: str | Path | None = None,
    seed: int = 0,
    worker_type: str = "v100",
    missing_throughput: str = "scale",
    **options,
) -> pd.DataFrame:
    """Import a Gavel trace (no header, tab-separated; 7- or 10-field lines, see
    :data:`GAVEL_FIELDS_7` and :data:`GAVEL_FIELDS_10`).

    A job's duration is ``total_steps / rate`` seconds, ``rate`` being the steps per second of
    its ``(job_type, scale_factor)`` on ``worker_type`` in Gavel's throughput table
    (:func:`load_gavel_throughputs`). Where the table has no entry for that pair,
    ``missing_throughput="scale"`` uses the 1-GPU rate x ``scale_factor`` (linear scaling) and
    counts it in ``report["throughputs"]``; ``"error"`` refuses. ``scale_factor`` is the GPU
    count, ``total_steps`` the iteration count, ``arrival_time`` seconds. ``job_type`` names
    the model: ``ResNet-18``/``ResNet-50`` become resnet18/resnet50 and ``Transformer``
    bert_large (:data:`FAMILY_ALIASES`); LM, Recommendation, A3C and CycleGAN have no profiled
    counterpart and are drawn unless ``model_map`` names them. Job ids are 0, 1, ... in arrival
    order. Other options: :class:`ImportOptions`.
    """
    if throughputs is None:
        raise TraceError(
            "a Gavel import needs the throughput table (throughputs=..., --throughputs simulation_throughputs.json)"
        )
    opt = ImportOptions(seed=seed, **options)
    return _build(_read_gavel(path, throughputs, worker_type, missing_throughput, opt), opt)


#: Importers by format name (the CLI's ``dallygym trace import FORMAT``).
IMPORTERS = {
    "tiresias": import_tiresias,
    "philly": import_philly,
    "helios": import_helios,
    "gavel": import_gavel,
}


def import_trace(fmt: str, path: str | Path, **kwargs) -> pd.DataFrame:
    """Import ``path`` in format ``fmt`` (``tiresias``, ``philly``, ``helios`` or ``gavel``).

    Keyword arguments go to the importer (``seed``, ``model_map``, ``cluster``, ``durations``,
    ``start_h``, ``vc``, ``max_jobs``, ``oversize``, ...; Gavel also ``throughputs``,
    ``worker_type``, ``missing_throughput``).
    """
    try:
        importer = IMPORTERS[fmt]
    except KeyError:
        raise TraceError(f"unknown trace format {fmt!r}; known formats: {', '.join(IMPORTERS)}") from None
    return importer(path, **kwargs)


def report_lines(report: dict) -> list[str]:
    """A readable summary of an import report, a few lines (the CLI prints them)."""
    lines = [
        f"read {report['rows_read']} rows of {report['source']} ({report['format']}); "
        f"kept {report['rows_kept']}; dropped: {_dropped_words(report.get('dropped', {}))}"
    ]
    if report.get("window"):
        lines.append(f"window: {report['window']}")
    if report.get("virtual_clusters"):
        lines.append(f"virtual clusters: {', '.join(report['virtual_clusters'])}")
    over = report.get("oversize", {})
    if over.get("rows"):
        lines.append(f"larger than the cluster: {len(over['rows'])} row(s), {over['mode']}")
    if "throughputs" in report:
        t = report["throughputs"]
        lines.append(
            f"throughputs ({t['worker_type']}): {t['from_table']} from the table, "
            f"{t['fallback_1gpu_rate_x_scale']} by the 1-GPU rate x scale factor "
            f"{t['fallback_pairs'] or ''}".rstrip()
        )
    c = report.get("cluster")
    where = f" on {c['racks']}x{c['machines_per_rack']}x{c['gpus_per_machine']}" if c else ""
    if report["durations"] == "wall":
        lines.append(
            f"durations: wall (run time alone at the best placement{where}, latency "
            f"{report['latency']}); best tier: " + ", ".join(f"{k} {v}" for k, v in report["best_tier"].items())
        )
    else:
        lines.append("durations: compute (recorded duration = compute-only time)")
    m = report["models"]
    lines.append("models: " + ", ".join(f"{k} {v}" for k, v in m.items() if v) + f" (seed {report['seed']})")
    for name, e in report.get("model_names", {}).items():
        lines.append(f"  {name!r}: {e['jobs']} job(s) {e['how']} -> {e['model']}")
    return lines


__all__ = [
    "DEFAULT_IMPORT_CLUSTER",
    "DURATION_READINGS",
    "FAMILY_ALIASES",
    "GAVEL_FIELDS_10",
    "GAVEL_FIELDS_7",
    "HELIOS_COLUMNS",
    "IMPORTERS",
    "MODEL_ALIASES",
    "PHILLY_COLUMNS",
    "TIRESIAS_COLUMNS",
    "ImportOptions",
    "best_placement_shape",
    "best_speed_factors",
    "import_gavel",
    "import_helios",
    "import_philly",
    "import_tiresias",
    "import_trace",
    "load_gavel_throughputs",
    "report_lines",
]
