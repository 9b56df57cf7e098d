"""Importers from public trace formats into the canonical trace (SPEC §3).

Each importer reads one file, checks the columns it uses (errors name the file, the line --
header = line 1 -- and the column), fills what the format lacks by an explicit rule, and
returns a validated canonical frame. ``frame.attrs["import_report"]`` (a small dict of
counts) records what was read, what was filtered out and why, and how each missing field was
filled; Philly and Helios imports also map new job ids back to the file
(``attrs["source_line"]``, ``attrs["job_id_map"]``). Filtering happens only
where the format calls for it (Helios: jobs that did not complete or used no GPU; sub-second
durations); everything else that does not fit the canonical schema is an error.

Filling rules:

* **model** -- Tiresias files name a model: known identifiers (and a few spellings of them,
  :data:`MODEL_ALIASES`) are kept; other names go through the user's ``model_map``; names
  still unknown are drawn (``unknown_models="draw"``) or rejected (``"error"``). Philly and
  Helios files name no model: every job's model is drawn. Draws are
  ``numpy.random.default_rng(seed).choice`` over the model mix (default: the paper's,
  :func:`~dallygym.trace.generators.paper_model_mix`), one per job in file order.
* **iterations** -- Tiresias files give the count, so ``iter_time_s = duration / iterations``.
  Philly and Helios files give only the duration: the job gets
  ``round(duration / ITER_TIME_S[model])`` iterations (at least 1) and
  ``iter_time_s = duration / total_iterations``, within half an iteration of the table value,
  so that the ideal run time equals the recorded duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from dallygym.cluster import ClusterSpec
from dallygym.models import MODEL_NAMES
from dallygym.trace.generators import ITER_TIME_S, paper_model_mix
from dallygym.trace.schema import (
    RowLocator,
    TraceError,
    parse_labels,
    parse_numbers,
    read_csv_raw,
    require_columns,
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

TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration",
                    "interval")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state",
                  "submit_time", "start_time", "end_time", "duration", "queue")

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


def _normalise(name: str) -> str:
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    return MODEL_ALIASES.get(key, key)


def _mix(model_mix: Mapping[str, float] | None, models: tuple[str, ...]) -> dict[str, float]:
    mix = dict(paper_model_mix() if model_mix is None else model_mix)
    unknown = [m for m in mix if m not in models]
    if unknown:
        raise TraceError(f"model_mix names unknown model(s) {', '.join(unknown)}; "
                         f"known models: {', '.join(models)}")
    weights = np.array([float(w) for w in mix.values()])
    if not len(weights) or (weights < 0).any() or weights.sum() <= 0:
        raise TraceError("model_mix needs non-negative weights with a positive sum")
    return mix


def _draw_models(rng: np.random.Generator, count: int, mix: Mapping[str, float]) -> np.ndarray:
    names = np.array(list(mix), dtype=object)
    weights = np.array([float(w) for w in mix.values()])
    return rng.choice(names, size=count, p=weights / weights.sum()) if count else names[:0]


def _iterations_from_table(
    durations: np.ndarray, models: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Iterations from the per-model table, and the iteration time that keeps the duration."""
    table = np.array([ITER_TIME_S.get(m, np.nan) for m in models])
    if np.isnan(table).any():
        missing = sorted({m for m in models if m not in ITER_TIME_S})
        raise TraceError(f"no iteration time for model(s) {', '.join(missing)}; "
                         f"ITER_TIME_S covers {', '.join(ITER_TIME_S)}")
    iterations = np.maximum(1, np.rint(durations / table)).astype(np.int64)
    return iterations, durations / iterations


def _parse_times(values: pd.Series, column: str, where: RowLocator) -> np.ndarray:
    """Seconds relative to the earliest value, from numbers (seconds) or date-time strings."""
    values = values.reset_index(drop=True)
    missing = values.isna().to_numpy() | (values.astype(str).str.strip() == "").to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise TraceError(f"{where.at(i, column)}: missing value (empty), got ''")
    if pd.to_numeric(values, errors="coerce").notna().all():
        seconds = parse_numbers(values, column, where, integer=False, minimum=-np.inf)
        return seconds - seconds.min()
    text = values.astype(str).str.strip()
    try:
        stamps = pd.to_datetime(text, errors="coerce", format="ISO8601")
        if stamps.isna().any():
            stamps = pd.to_datetime(text, errors="coerce", format="mixed")
    except (ValueError, TypeError) as exc:
        # Mixed time zones (or naive mixed with aware) cannot be put on one axis.
        raise TraceError(
            f"{where.source}, column {column}: inconsistent timestamps ({exc})"
        ) from None
    bad = stamps.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"{where.at(i, column)}: expected seconds or a date-time, got "
            f"{show_value(values.iloc[i])}"
        )
    offsets = (stamps - stamps.min()) / pd.Timedelta(seconds=1)
    return offsets.to_numpy(dtype=np.float64)


def _arrival_order(arrival: np.ndarray) -> np.ndarray:
    """Row positions sorted by arrival, ties in file order."""
    return np.argsort(arrival, kind="stable")


def _finish(
    frame: pd.DataFrame,
    where: RowLocator,
    cluster: ClusterSpec | None,
    models: Iterable[str],
    report: dict,
) -> pd.DataFrame:
    out = validate_trace(frame, where.source, cluster, models, locator=where)
    out.attrs["import_report"] = report
    return out


def import_tiresias(
    path: str | Path,
    seed: int = 0,
    model_map: Mapping[str, str] | None = None,
    unknown_models: str = "draw",
    model_mix: Mapping[str, float] | None = None,
    cluster: ClusterSpec | None = None,
    models: Iterable[str] = MODEL_NAMES,
) -> pd.DataFrame:
    """Import a Tiresias-simulator CSV (``job_id,num_gpu,submit_time,iterations,model_name,
    duration,interval``).

    ``submit_time`` (seconds) is the arrival, kept as is; ``duration`` (seconds) over
    ``iterations`` is the iteration time; ``interval`` is not used. ``job_id`` must be a unique
    non-negative integer and is kept.

    Args:
        path: the CSV file.
        seed: seed of the model draws.
        model_map: file model name -> known model identifier, applied before aliases.
        unknown_models: ``"draw"`` (seeded draw from ``model_mix``) or ``"error"``.
        model_mix: model -> weight for draws (default: the paper's mix).
        cluster: if given, every job must fit on it.
        models: the known model identifiers.

    Returns:
        The canonical frame; ``attrs["import_report"]`` counts kept, mapped, aliased and
        drawn models (and which file names were drawn for).
    """
    known = tuple(models)
    if unknown_models not in ("draw", "error"):
        raise ValueError(f"unknown_models must be 'draw' or 'error', got {unknown_models!r}")
    model_map = dict(model_map or {})
    bad_targets = {k: v for k, v in model_map.items() if v not in known}
    if bad_targets:
        raise TraceError(f"model_map maps to unknown model(s) {bad_targets}; "
                         f"known models: {', '.join(known)}")
    mix = _mix(model_mix, known)
    raw, where = read_csv_raw(path, text_columns=("model_name",))
    require_columns(raw, _TIRESIAS_USED, where)
    if len(raw) == 0:
        raise TraceError(f"{where.source}: the file has no jobs")

    ids = parse_numbers(raw["job_id"], "job_id", where, integer=True, minimum=0)
    gpus = parse_numbers(raw["num_gpu"], "num_gpu", where, integer=True, minimum=1)
    submit = parse_numbers(raw["submit_time"], "submit_time", where, integer=False, minimum=0.0)
    iterations = parse_numbers(raw["iterations"], "iterations", where, integer=True, minimum=1)
    duration = parse_numbers(raw["duration"], "duration", where, integer=False, minimum=0.0,
                             strict=True)
    names = parse_labels(raw["model_name"], "model_name", where)

    mapped = np.array([model_map.get(n, model_map.get(n.strip())) for n in names], dtype=object)
    aliased = np.array([_normalise(n) for n in names], dtype=object)
    by_map = np.array([m is not None for m in mapped])
    by_alias = ~by_map & np.isin(aliased.astype(str), np.array(known, dtype=str))
    resolved = np.where(by_map, mapped, np.where(by_alias, aliased, None))
    unresolved = np.flatnonzero(~by_map & ~by_alias)
    if len(unresolved) and unknown_models == "error":
        i = int(unresolved[0])
        raise TraceError(
            f"{where.at(i, 'model_name')}: unknown model {names[i]!r} (not in model_map); "
            f"known models: {', '.join(known)}"
        )
    rng = np.random.default_rng(seed)
    resolved[unresolved] = _draw_models(rng, len(unresolved), mix)
    as_is = np.array([n in known for n in names])

    frame = pd.DataFrame({
        "job_id": ids,
        "arrival_s": submit,
        "num_gpus": gpus,
        "model": resolved,
        "total_iterations": iterations,
        "iter_time_s": duration / iterations,
    })
    drawn_for: dict[str, int] = {}
    for n in names[unresolved]:
        drawn_for[n] = drawn_for.get(n, 0) + 1
    report = {
        "format": "tiresias",
        "source": where.source,
        "seed": seed,
        "rows_read": len(raw),
        "rows_kept": len(raw),
        "dropped": {},
        "models": {
            "as_is": int((as_is & ~by_map).sum()),
            "aliased": int((by_alias & ~as_is).sum()),
            "mapped": int(by_map.sum()),
            "drawn": len(unresolved),
        },
        "models_drawn_for": drawn_for,
        "iteration_time": "duration / iterations from the file",
    }
    return _finish(frame, where, cluster, known, report)


def _frame_from_durations(arrival, gpus, duration, seed, mix):
    """Canonical frame of a format that records durations but no model or iterations.

    Models are drawn (seeded) from ``mix``; iterations come from the per-model iteration-time
    table so that the ideal run time equals the recorded duration. Rows are put in arrival
    order and numbered from 0; returns the frame and the order (positions in the input).
    """
    model = _draw_models(np.random.default_rng(seed), len(duration), mix)
    iterations, iter_time = _iterations_from_table(duration, model)
    order = _arrival_order(arrival)
    frame = pd.DataFrame({
        "job_id": np.arange(len(duration), dtype=np.int64),
        "arrival_s": arrival[order],
        "num_gpus": gpus[order],
        "model": model[order],
        "total_iterations": iterations[order],
        "iter_time_s": iter_time[order],
    })
    return frame, order


def import_philly(
    path: str | Path,
    seed: int = 0,
    model_mix: Mapping[str, float] | None = None,
    cluster: ClusterSpec | None = None,
    models: Iterable[str] = MODEL_NAMES,
) -> pd.DataFrame:
    """Import a Philly-derived CSV (``timestamp,duration,num_gpus,gpu_time,cluster``).

    ``timestamp`` may be seconds or date-time strings (ISO 8601 or anything pandas parses;
    time-zone offsets are honoured, abbreviations like ``PST`` are not); arrival = timestamp -
    the earliest timestamp. ``duration`` is seconds (> 0), ``num_gpus`` >= 1; ``gpu_time``
    and ``cluster`` are not used. Every job's model is drawn (seeded); job ids are assigned
    0, 1, ... in arrival order (ties in file order), and ``attrs["source_line"][job_id]`` is
    the file line each job came from.
    """
    known = tuple(models)
    mix = _mix(model_mix, known)
    raw, where = read_csv_raw(path, text_columns=("timestamp",))
    require_columns(raw, _PHILLY_USED, where)
    if len(raw) == 0:
        raise TraceError(f"{where.source}: the file has no jobs")
    arrival = _parse_times(raw["timestamp"], "timestamp", where)
    duration = parse_numbers(raw["duration"], "duration", where, integer=False, minimum=0.0,
                             strict=True)
    gpus = parse_numbers(raw["num_gpus"], "num_gpus", where, integer=True, minimum=1)
    frame, order = _frame_from_durations(arrival, gpus, duration, seed, mix)
    report = {
        "format": "philly",
        "source": where.source,
        "seed": seed,
        "rows_read": len(raw),
        "rows_kept": len(raw),
        "dropped": {},
        "models": {"drawn": len(raw)},
        "iteration_time": "round(duration / ITER_TIME_S[model]) iterations",
    }
    out = _finish(frame, where.subset(order), cluster, known, report)
    out.attrs["source_line"] = SharedTuple(int(where.first_line + i) for i in order)
    return out


def import_helios(
    path: str | Path,
    seed: int = 0,
    model_mix: Mapping[str, float] | None = None,
    cluster: ClusterSpec | None = None,
    models: Iterable[str] = MODEL_NAMES,
) -> pd.DataFrame:
    """Import a Helios / SenseTime ``cluster_log.csv``.

    Columns ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,
    duration,queue`` (only ``job_id, gpu_num, state, submit_time, duration`` are used).
    Kept: jobs with ``state == "COMPLETED"`` and ``gpu_num > 0`` (the trace also logs CPU jobs
    and failed or cancelled ones, which ran no full training) and ``duration > 0`` (the log
    counts whole seconds, so a sub-second job has duration 0 and no run time to replay).
    The counts of dropped rows are in ``attrs["import_report"]["dropped"]``.

    Arrival = ``submit_time`` (date-time strings or seconds) - the earliest kept submit time.
    ``duration`` is seconds. Job ids (often strings) are replaced by 0, 1, ... in arrival
    order (ties in file order); ``attrs["job_id_map"][new_id]`` is the original id. Models
    are drawn (seeded), one per kept job in file order.
    """
    known = tuple(models)
    mix = _mix(model_mix, known)
    raw, where = read_csv_raw(path, text_columns=("job_id", "state", "submit_time"))
    require_columns(raw, _HELIOS_USED, where)
    if len(raw) == 0:
        raise TraceError(f"{where.source}: the file has no jobs")

    gpus_all = parse_numbers(raw["gpu_num"], "gpu_num", where, integer=True, minimum=0)
    state = raw["state"].astype(str).str.strip().to_numpy()
    completed = state == "COMPLETED"
    gpu_job = gpus_all > 0
    candidate = completed & gpu_job
    # Durations of the rows that can be kept must parse; the others are not read.
    cand_where = where.subset(candidate)
    cand_raw = raw.loc[candidate].reset_index(drop=True)
    duration_c = parse_numbers(cand_raw["duration"], "duration", cand_where, integer=False,
                               minimum=0.0)
    positive = duration_c > 0
    keep = np.flatnonzero(candidate)[positive]
    if len(keep) == 0:
        raise TraceError(f"{where.source}: no completed GPU job with a positive duration "
                         f"({len(raw)} rows read)")
    kept_raw = raw.iloc[keep].reset_index(drop=True)
    kept_where = where.subset(keep)
    original_ids = parse_labels(kept_raw["job_id"], "job_id", kept_where)
    dup = pd.Series(original_ids).duplicated().to_numpy()
    if dup.any():
        j = int(np.flatnonzero(dup)[0])
        i = int(np.flatnonzero(original_ids == original_ids[j])[0])
        raise TraceError(f"{where.source}: duplicate job_id {original_ids[j]!r} on "
                         f"{kept_where.row(i)} and {kept_where.row(j)} (column job_id)")
    arrival = _parse_times(kept_raw["submit_time"], "submit_time", kept_where)
    duration = duration_c[positive]
    gpus = gpus_all[keep]
    frame, order = _frame_from_durations(arrival, gpus, duration, seed, mix)
    report = {
        "format": "helios",
        "source": where.source,
        "seed": seed,
        "rows_read": len(raw),
        "rows_kept": len(keep),
        "dropped": {
            "not_completed": int((~completed).sum()),
            "no_gpu": int((completed & ~gpu_job).sum()),
            "zero_duration": int((~positive).sum()),
        },
        "models": {"drawn": len(keep)},
        "iteration_time": "round(duration / ITER_TIME_S[model]) iterations",
    }
    out = _finish(frame, kept_where.subset(order), cluster, known, report)
    out.attrs["job_id_map"] = SharedTuple(str(original_ids[i]) for i in order)
    return out


#: Importers by format name (the CLI's ``dallygym trace import FORMAT``).
IMPORTERS = {
    "tiresias": import_tiresias,
    "philly": import_philly,
    "helios": import_helios,
}


def import_trace(fmt: str, path: str | Path, **kwargs) -> pd.DataFrame:
    """Import ``path`` in format ``fmt`` (``tiresias``, ``philly`` or ``helios``).

    Keyword arguments go to the importer (``seed``, ``model_map``, ``cluster``, ...).
    """
    try:
        importer = IMPORTERS[fmt]
    except KeyError:
        raise TraceError(f"unknown trace format {fmt!r}; known formats: "
                         f"{', '.join(IMPORTERS)}") from None
    return importer(path, **kwargs)


__all__ = [
    "HELIOS_COLUMNS",
    "IMPORTERS",
    "MODEL_ALIASES",
    "PHILLY_COLUMNS",
    "TIRESIAS_COLUMNS",
    "import_helios",
    "import_philly",
    "import_tiresias",
    "import_trace",
]
