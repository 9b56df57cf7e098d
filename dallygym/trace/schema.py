"""The canonical trace format: schema, the one validating loader, the writer, shipped files.

A trace is a table of jobs with exactly the columns of :data:`TRACE_COLUMNS`:

========================  =========  ==============================================================
column                    dtype      meaning
========================  =========  ==============================================================
``job_id``                int64      unique, 0 <= id <= 2**53
``arrival_s``             float64    arrival time in seconds, 0 <= t <= 1e9
``num_gpus``              int64      gang size (all or nothing), 1 <= g <= 2**53
``model``                 object     one of the known model identifiers (``dallygym.models``)
``total_iterations``      int64      iterations the job must run, 1 <= n <= 2**53
``iter_time_s``           float64    compute-only seconds per iteration at speed factor 1, >= 1e-6
========================  =========  ==============================================================

The ideal (contention- and communication-free) run time of a job is
``total_iterations * iter_time_s`` seconds, at most 1e9 (:data:`MAX_TIME_S`). Whole numbers
stop at 2**53 because the engine computes with float64; the time bounds keep its clock finer
than a microsecond and every sum of times finite.

Every way of obtaining a trace (a shipped name, a CSV path, a DataFrame, a generator, an
importer) ends in :func:`validate_trace`, so there is one definition of "a valid trace".
"""

from __future__ import annotations

import csv
import hashlib
import math
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from dallygym.cluster import ClusterSpec
from dallygym.models import MODEL_NAMES

#: Columns of the canonical trace format, in their canonical order.
TRACE_COLUMNS: tuple[str, ...] = (
    "job_id",
    "arrival_s",
    "num_gpus",
    "model",
    "total_iterations",
    "iter_time_s",
)

#: dtype of each canonical column in a validated frame.
TRACE_DTYPES: dict[str, str] = {
    "job_id": "int64",
    "arrival_s": "float64",
    "num_gpus": "int64",
    "model": "object",
    "total_iterations": "int64",
    "iter_time_s": "float64",
}

# Integers above 2**53 cannot pass through float64 unchanged (the engine keeps progress in
# floats); no real trace needs them.
_MAX_EXACT_INT = 2**53

#: Largest arrival time and largest ideal run time (total_iterations x iter_time_s) a trace may
#: have, seconds (about 31.7 years). Far beyond any real job, and small enough that the engine's
#: float64 clock keeps a resolution finer than a microsecond (its spacing at 1e9 s is 1.2e-7 s)
#: and that no sum of times can overflow. Without a bound, an arrival of 1e18 s swallows an
#: 18 s job (1e18 + 18 == 1e18) and an iteration time of 1e308 s overflows to infinity.
MAX_TIME_S = 1e9

#: Smallest iteration time, seconds. The engine runs a job at 1 / iter_time_s iterations per
#: second, which must stay a finite, well-behaved number; no training iteration takes less
#: than a microsecond.
MIN_ITER_TIME_S = 1e-6


class TraceError(ValueError):
    """An invalid trace or trace file. The message names the file, the line and the column."""


# ----------------------------------------------------------------------------------------------
# Locating rows in messages
# ----------------------------------------------------------------------------------------------


class RowLocator:
    """Turns a row position of a parsed table into the words an error message uses.

    For a file, row ``i`` of the parsed table (0-based) is reported as ``line first_line + i``
    -- with the header on line 1 the first data row is line 2, as a text editor shows it. For
    an in-memory frame, rows are reported by 0-based position. ``positions`` maps the rows of
    a filtered table back to the rows of the table that was read.
    """

    def __init__(
        self, source: str, first_line: int | None = None, positions: np.ndarray | None = None
    ) -> None:
        self.source = source
        self.first_line = first_line
        self.positions = positions

    def row(self, i: int) -> str:
        pos = int(self.positions[i]) if self.positions is not None else int(i)
        if self.first_line is None:
            return f"row {pos} (0-based position)"
        return f"line {self.first_line + pos}"

    def at(self, i: int, column: str | None = None) -> str:
        where = f"{self.source}, {self.row(i)}"
        return f"{where}, column {column}" if column else where

    def subset(self, keep: np.ndarray) -> RowLocator:
        """Locator for the rows ``keep`` (a boolean mask or positions) of this table."""
        base = self.positions if self.positions is not None else None
        idx = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep)
        return RowLocator(self.source, self.first_line, idx if base is None else base[idx])


def _more(count: int) -> str:
    return f" (and {count} more such row{'s' if count != 1 else ''})" if count else ""


# ----------------------------------------------------------------------------------------------
# Reading CSV files without coercion
# ----------------------------------------------------------------------------------------------


def read_csv_raw(
    path: str | Path, text_columns: Iterable[str] = ()
) -> tuple[pd.DataFrame, RowLocator]:
    """Read a CSV file for validation: nothing dropped, nothing coerced.

    Columns in ``text_columns`` are read as text, verbatim. Other columns are parsed by
    pandas' C parser when every field is a number (exactly: parsing a written float gives it
    back bit for bit); a column with any other field stays text, so the checks can name the
    offending field. Empty fields are NaN; no other spelling ("NA", "null", "nan") is turned
    into a missing value by the reader.

    Returns the table and a locator whose line numbers match the file (header = line 1, the
    first data row = line 2). A blank line inside the data is an error; blank lines at the
    very end of the file are ignored. Lines are assumed to hold one record each (no quoted
    line breaks).

    Raises:
        TraceError: missing file, empty file, duplicate header names, a blank line inside the
            data, or a line with more fields than the header. (A line with fewer fields reads
            as missing values in its last columns, reported at that line.)
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    header = _read_header(path)
    dupes = sorted({name for name in header if header.count(name) > 1})
    if dupes:
        raise TraceError(f"{source}, line 1: duplicate column name(s) {', '.join(dupes)}")
    try:
        with warnings.catch_warnings():
            # pandas only warns when the first data line is longer than the header; promote it.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                path,
                dtype={name: str for name in text_columns},
                keep_default_na=False,
                na_values=[""],
                skip_blank_lines=False,
                index_col=False,
                low_memory=False,
                encoding="utf-8-sig",
            )
    except (pd.errors.ParserError, pd.errors.ParserWarning):
        raise TraceError(_field_count_problem(path, len(header))) from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{source}: not UTF-8 text ({exc.reason})") from None
    frame = _drop_trailing_blank_rows(frame)
    blank = _blank_rows(frame)
    if len(blank):
        raise TraceError(f"{source}, line {2 + int(blank[0])}: blank line inside the data")
    return frame, RowLocator(source, first_line=2)


def _read_header(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        try:
            first = next(reader)
            second = next(reader, None)
        except StopIteration:
            raise TraceError(f"{path}: the file is empty (a header line is required)") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}: not UTF-8 text ({exc.reason})") from None
        except csv.Error as exc:
            raise TraceError(f"{path}, line {reader.line_num}: {exc}") from None
        if not any(name.strip() for name in first):
            raise TraceError(f"{path}, line 1: the header line is blank")
        # pandas reads a first data line with one field more than the header as if that field
        # were an index column (with index_col=False it drops it, silently when it is empty:
        # a trailing comma); later lines with extra fields are parser errors. So check the
        # first data line here.
    if second is not None and len(second) > len(first):
        raise TraceError(f"{path}, line 2: {len(second)} fields, but the header has {len(first)}")
    return first


def _field_count_problem(path: Path, width: int) -> str:
    """Slow path, run only after a failure: find the first line with too many fields."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for number, fields in enumerate(csv.reader(handle), start=1):
            if number > 1 and len(fields) > width:
                return f"{path}, line {number}: {len(fields)} fields, but the header has {width}"
    return f"{path}: a line has more fields than the header ({width})"


def _blank_rows(frame: pd.DataFrame) -> np.ndarray:
    """Positions of rows whose fields are all empty (a blank line, as pandas reads it)."""
    if len(frame) == 0 or frame.shape[1] == 0:
        return np.zeros(0, dtype=np.int64)
    # Check the first column everywhere, the whole row only where that one is empty.
    rows = np.flatnonzero(frame.iloc[:, 0].isna().to_numpy())
    if len(rows) == 0:
        return rows
    return rows[frame.iloc[rows].isna().all(axis=1).to_numpy()]


def _drop_trailing_blank_rows(frame: pd.DataFrame) -> pd.DataFrame:
    blank = set(_blank_rows(frame).tolist())
    end = len(frame)
    while end > 0 and (end - 1) in blank:
        end -= 1
    return frame.iloc[:end]


# ----------------------------------------------------------------------------------------------
# Column parsers shared by the loader and the importers
# ----------------------------------------------------------------------------------------------


def _as_text(values: pd.Series) -> pd.Series | None:
    """The column as stripped strings if every value is a string, else None."""
    if pd.api.types.is_string_dtype(values.dtype) and not values.isna().any():
        if values.dtype != object or pd.api.types.infer_dtype(values, skipna=False) == "string":
            return values.astype(str).str.strip()
    return None


def _parse_clean_text(values: pd.Series) -> pd.Series | None:
    """Fast path for a column of text that is all numbers: parsed, else None (look closer)."""
    if not pd.api.types.is_string_dtype(values.dtype) or values.isna().any():
        return None
    try:
        parsed = pd.to_numeric(values)
    except (ValueError, TypeError):
        return None
    return None if parsed.isna().any() else parsed


def parse_numbers(
    values: pd.Series,
    column: str,
    where: RowLocator,
    *,
    integer: bool,
    minimum: float,
    strict: bool = False,
) -> np.ndarray:
    """Parse one column of numbers (strings or numeric), failing on the first bad row.

    Args:
        values: the raw column (strings as read from a file, or numbers).
        column: its name, for messages.
        where: locator of the rows.
        integer: require whole numbers (``4`` and ``4.0`` pass, ``4.5`` fails) -> int64.
        minimum: smallest allowed value.
        strict: if true the value must be strictly greater than ``minimum``.

    Returns:
        An int64 (``integer``) or float64 numpy array.

    Raises:
        TraceError naming the file, the line and the column, and the offending value.
    """
    values = values.reset_index(drop=True)
    if pd.api.types.is_bool_dtype(values.dtype):
        raise TraceError(
            f"{where.at(0, column)}: expected a number, got {show_value(values.iloc[0])}"
        )
    parsed = _parse_clean_text(values)
    if parsed is not None:
        missing = np.zeros(len(values), dtype=bool)
    elif (text := _as_text(values)) is not None:
        # Text as read from a file: blank and "nan" are missing values, anything else that
        # does not parse is not a number.
        missing = ((text == "") | (text.str.lower() == "nan")).to_numpy()
        parsed = pd.to_numeric(text.where(~missing, "0"), errors="coerce")
        _fail_first(parsed.isna().to_numpy() & ~missing, values, column, where,
                    "expected a number")
    elif pd.api.types.is_numeric_dtype(values.dtype):
        parsed = values
        missing = values.isna().to_numpy()
    else:
        # Mixed Python objects (an in-memory frame): rare, so an element-wise pass is fine.
        missing = values.map(
            lambda v: v is None or (isinstance(v, float) and math.isnan(v))
            or (isinstance(v, str) and v.strip().lower() in ("", "nan"))
        ).to_numpy(bool)
        is_bool = values.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(bool)
        parsed = pd.to_numeric(values.where(~missing & ~is_bool, 0), errors="coerce")
        _fail_first((parsed.isna().to_numpy() | is_bool) & ~missing, values, column, where,
                    "expected a number")
    _fail_first(missing, values, column, where, "missing value (empty or NaN)")
    if integer and parsed.dtype.kind in "iu":
        # Check the size before any conversion: a uint64 above 2**63 would wrap to a negative
        # int64, and integers above 2**53 do not survive the engine's float arithmetic.
        raw = parsed.to_numpy()
        big = raw > _MAX_EXACT_INT if raw.dtype.kind == "u" else np.abs(raw) > _MAX_EXACT_INT
        _fail_first(big, values, column, where, _TOO_LARGE)
        ints = raw.astype(np.int64)
        low = ints <= minimum if strict else ints < minimum
        _fail_first(low, values, column, where, _bound_words(minimum, strict, integer))
        return ints
    floats = parsed.to_numpy(dtype=np.float64)
    _fail_first(~np.isfinite(floats), values, column, where, "expected a finite number")
    if integer:
        _fail_first(floats != np.floor(floats), values, column, where, "expected a whole number")
        _fail_first(np.abs(floats) > _MAX_EXACT_INT, values, column, where, _TOO_LARGE)
    low = floats <= minimum if strict else floats < minimum
    _fail_first(low, values, column, where, _bound_words(minimum, strict, integer))
    return floats.astype(np.int64) if integer else floats


_TOO_LARGE = f"whole number too large (the limit is 2**53 = {_MAX_EXACT_INT})"


def _bound_words(minimum: float, strict: bool, integer: bool) -> str:
    shown = int(minimum) if float(minimum).is_integer() else minimum
    if integer and not strict and minimum == 1:
        return "must be at least 1"
    return f"must be {'>' if strict else '>='} {shown}"


def _fail_first(bad: np.ndarray, values: pd.Series, column: str, where: RowLocator, what: str):
    if not bad.any():
        return
    rows = np.flatnonzero(bad)
    first = int(rows[0])
    # A missing value has nothing worth quoting (an empty field reads as NaN).
    got = "" if what.startswith("missing") else f", got {show_value(values.iloc[first])}"
    raise TraceError(f"{where.at(first, column)}: {what}{got}{_more(len(rows) - 1)}")


def show_value(value: object) -> str:
    """A raw value as a message shows it: strings quoted, numpy scalars as plain numbers."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def parse_labels(values: pd.Series, column: str, where: RowLocator) -> np.ndarray:
    """A column of non-empty strings, returned as an object array (values unchanged)."""
    values = values.reset_index(drop=True)
    if pd.api.types.is_string_dtype(values.dtype) and not values.isna().any():
        # Whitespace-only names are not caught here; they fail the caller's name checks.
        bad = (values.astype(str) == "").to_numpy()
    else:
        bad = values.map(lambda v: not isinstance(v, str) or v.strip() == "").to_numpy(bool)
    _fail_first(bad, values, column, where, "expected a non-empty name")
    return values.astype(object).to_numpy()


def require_columns(
    frame: pd.DataFrame, required: Iterable[str], where: RowLocator, exact: bool = False
) -> None:
    """Fail if columns are missing (or, with ``exact``, if there are unexpected ones)."""
    required = list(required)
    present = [str(c) for c in frame.columns]
    missing = [c for c in required if c not in present]
    extra = [c for c in present if c not in required] if exact else []
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected column(s) {', '.join(extra)}")
    if problems:
        head = f"{where.source}, line 1" if where.first_line is not None else where.source
        raise TraceError(f"{head}: {'; '.join(problems)}; expected {', '.join(required)}")


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------


def validate_trace(
    frame: pd.DataFrame,
    source: str = "<frame>",
    cluster: ClusterSpec | None = None,
    models: Iterable[str] = MODEL_NAMES,
    *,
    locator: RowLocator | None = None,
) -> pd.DataFrame:
    """Check a table of jobs against the canonical schema and return the canonical frame.

    Args:
        frame: a table with exactly the columns of :data:`TRACE_COLUMNS` (any order), values
            as numbers or as strings.
        source: how messages name the table (a file path, or ``"<frame>"``).
        cluster: if given, every job must fit on it (:func:`check_trace_fits`).
        models: the known model identifiers.
        locator: how messages name rows (default: 0-based positions in ``frame``); the loader
            passes one that counts file lines.

    Returns:
        A new DataFrame with the canonical columns in canonical order and dtypes
        (:data:`TRACE_DTYPES`), rows sorted by ``(arrival_s, job_id)``, a fresh RangeIndex.
        Sorting is the only change: no value is dropped, rounded or converted except for
        reading whole numbers as int64.

    Raises:
        TraceError: the first problem found, naming the source, row and column.
    """
    where = locator or RowLocator(source)
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(frame).__name__}")
    require_columns(frame, TRACE_COLUMNS, where, exact=True)
    if len(frame) == 0:
        raise TraceError(f"{where.source}: the trace has no jobs")
    known = tuple(models)

    ids = parse_numbers(frame["job_id"], "job_id", where, integer=True, minimum=0)
    arrival = parse_numbers(frame["arrival_s"], "arrival_s", where, integer=False, minimum=0.0)
    gpus = parse_numbers(frame["num_gpus"], "num_gpus", where, integer=True, minimum=1)
    model = parse_labels(frame["model"], "model", where)
    # Exact string comparison: numpy's fixed-width str arrays drop trailing NUL characters,
    # so np.isin would take "resnet50\x00" for "resnet50".
    known_set = set(known)
    unknown = np.fromiter((m not in known_set for m in model), dtype=bool, count=len(model))
    if unknown.any():
        rows = np.flatnonzero(unknown)
        raise TraceError(
            f"{where.at(int(rows[0]), 'model')}: unknown model {model[rows[0]]!r}"
            f"{_more(len(rows) - 1)}; known models: {', '.join(known)}"
        )
    iterations = parse_numbers(
        frame["total_iterations"], "total_iterations", where, integer=True, minimum=1
    )
    iter_time = parse_numbers(
        frame["iter_time_s"], "iter_time_s", where, integer=False, minimum=0.0, strict=True
    )
    _check_unique_ids(ids, where)
    _check_times(arrival, iterations, iter_time, frame, where)

    out = pd.DataFrame(
        {
            "job_id": ids.astype(np.int64),
            "arrival_s": arrival.astype(np.float64),
            "num_gpus": gpus.astype(np.int64),
            "model": pd.array(model, dtype=object),
            "total_iterations": iterations.astype(np.int64),
            "iter_time_s": iter_time.astype(np.float64),
        }
    )
    if cluster is not None:
        _check_fits(out, cluster, where)
    out = out.sort_values(["arrival_s", "job_id"], kind="stable").reset_index(drop=True)
    out["model"] = out["model"].astype(object)
    out.attrs["source"] = where.source
    return out


def canonical_frame(*, job_id: np.ndarray, arrival_s: np.ndarray, num_gpus: np.ndarray, model: np.ndarray,
                    total_iterations: np.ndarray, iter_time_s: np.ndarray, source: str) -> pd.DataFrame:
    """The canonical frame of columns that are canonical by construction (a generator's output):
    int64 / float64 arrays, unique ids, known models, counts of at least 1, rows already in
    ``(arrival_s, job_id)`` order. What :func:`validate_trace` does for a file -- parsing,
    the unique-id and model checks, sorting -- is skipped; the time ranges are still checked
    (a long enough draw can pass them). The result equals ``validate_trace`` of the same
    columns."""
    where = RowLocator(source)
    out = pd.DataFrame(
        {
            "job_id": job_id,
            "arrival_s": arrival_s,
            "num_gpus": num_gpus,
            "model": pd.array(model, dtype=object),
            "total_iterations": total_iterations,
            "iter_time_s": iter_time_s,
        }
    )
    _check_times(arrival_s, total_iterations, iter_time_s, out, where)
    out["model"] = out["model"].astype(object)
    out.attrs["source"] = where.source
    return out


def _check_times(arrival: np.ndarray, iterations: np.ndarray, iter_time: np.ndarray,
                 frame: pd.DataFrame, where: RowLocator) -> None:
    """Times the engine's float64 clock can represent finely (see :data:`MAX_TIME_S`)."""
    _fail_first(arrival > MAX_TIME_S, frame["arrival_s"].reset_index(drop=True), "arrival_s", where,
                f"must be at most {MAX_TIME_S:g} s (about 31.7 years)")
    _fail_first(iter_time < MIN_ITER_TIME_S, frame["iter_time_s"].reset_index(drop=True), "iter_time_s",
                where, f"must be at least {MIN_ITER_TIME_S:g} s")
    # The product of two in-range numbers can overflow to inf; inf > MAX_TIME_S catches it.
    with np.errstate(over="ignore"):
        ideal = iterations.astype(np.float64) * iter_time
    long = ideal > MAX_TIME_S
    if long.any():
        rows = np.flatnonzero(long)
        i = int(rows[0])
        raise TraceError(
            f"{where.at(i, 'iter_time_s')}: ideal run time total_iterations x iter_time_s = "
            f"{int(iterations[i])} x {show_value(iter_time[i])} = {ideal[i]:g} s is more than "
            f"{MAX_TIME_S:g} s (about 31.7 years){_more(len(rows) - 1)}"
        )


def _check_unique_ids(ids: np.ndarray, where: RowLocator) -> None:
    dup = pd.Series(ids).duplicated(keep="first").to_numpy()
    if not dup.any():
        return
    second = int(np.flatnonzero(dup)[0])
    first = int(np.flatnonzero(ids == ids[second])[0])
    raise TraceError(
        f"{where.source}: duplicate job_id {int(ids[second])} on {where.row(first)} and "
        f"{where.row(second)} (column job_id){_more(int(dup.sum()) - 1)}"
    )


def check_trace_fits(frame: pd.DataFrame, cluster: ClusterSpec, source: str = "<frame>") -> None:
    """Fail if a job of ``frame`` (a validated trace) needs more GPUs than ``cluster`` has.

    Rows are named by their 0-based position in ``frame``.
    """
    _check_fits(frame, cluster, RowLocator(source))


def _check_fits(frame: pd.DataFrame, cluster: ClusterSpec, where: RowLocator) -> None:
    gpus = frame["num_gpus"].to_numpy()
    too_big = gpus > cluster.num_gpus
    if not too_big.any():
        return
    rows = np.flatnonzero(too_big)
    i = int(rows[0])
    raise TraceError(
        f"{where.at(i, 'num_gpus')}: job {int(frame['job_id'].iloc[i])} needs {int(gpus[i])} "
        f"GPUs, more than the cluster's {cluster.num_gpus} (racks={cluster.racks}, "
        f"machines_per_rack={cluster.machines_per_rack}, "
        f"gpus_per_machine={cluster.gpus_per_machine})"
        f"{_more(len(rows) - 1)}"
    )


# ----------------------------------------------------------------------------------------------
# Shipped traces
# ----------------------------------------------------------------------------------------------


def _trace_dirs() -> list[Path]:
    here = Path(__file__).resolve()
    # A built wheel carries the repository's traces/ as dallygym/_traces (hatch force-include);
    # an editable install or a source checkout reads traces/ next to the package.
    return [here.parents[1] / "_traces", here.parents[2] / "traces"]


def shipped_trace_dir() -> Path | None:
    """The directory the shipped traces are read from, or None if there is none."""
    for directory in _trace_dirs():
        if directory.is_dir() and any(directory.glob("*.csv")):
            return directory
    return None


def shipped_traces() -> list[str]:
    """Names of the shipped traces (file stems of ``traces/*.csv``), sorted."""
    directory = shipped_trace_dir()
    return sorted(p.stem for p in directory.glob("*.csv")) if directory else []


def shipped_trace_path(name: str) -> Path:
    """Path of the shipped trace ``name``; TraceError listing the shipped names if unknown."""
    directory = shipped_trace_dir()
    if directory is not None:
        path = directory / f"{name}.csv"
        if path.is_file():
            return path
    names = shipped_traces()
    listing = ", ".join(names) if names else "none found in " + ", ".join(map(str, _trace_dirs()))
    raise TraceError(f"unknown trace {name!r}: not a file, and not a shipped trace ({listing})")


# ----------------------------------------------------------------------------------------------
# Loading and writing
# ----------------------------------------------------------------------------------------------


def load_trace(
    source: str | Path | pd.DataFrame,
    cluster: ClusterSpec | None = None,
    models: Iterable[str] = MODEL_NAMES,
    *,
    start_h: float | None = None,
    end_h: float | None = None,
    max_jobs: int | None = None,
    oversize: str = "error",
) -> pd.DataFrame:
    """Load and validate a trace: the one way into the simulator.

    Args:
        source: a shipped trace name (see :func:`shipped_traces`), a path to a canonical CSV
            file, or a DataFrame. A string that is a shipped name means the shipped trace,
            even if a file of that name exists in the working directory; pass a ``Path`` to
            mean the file.
        cluster: if given, fail when a job needs more GPUs than the cluster has.
        models: the known model identifiers.
        start_h, end_h, max_jobs, oversize: optional filters, the same as the importers'
            (:func:`dallygym.trace.filters.filter_trace`): jobs arriving in ``[start_h, end_h)``
            hours after the earliest arrival (then shifted so the first arrives at 0 s), the
            first ``max_jobs`` of them, and jobs larger than ``cluster`` refused (``"error"``,
            the default), dropped (``"drop"``) or cut to the cluster (``"clamp"``). What they
            removed or changed is in ``frame.attrs["load_report"]``.

    Returns:
        The validated canonical frame (see :func:`validate_trace`): rows sorted by
        ``(arrival_s, job_id)``, fresh RangeIndex; ``frame.attrs["source"]`` names the source.

    Raises:
        TraceError: unknown shipped name (listing the shipped names), missing file (naming the
            path), or any schema violation (naming file, line and column; the header is line 1).
    """
    filtered = (start_h, end_h, max_jobs) != (None, None, None) or oversize != "error"
    if isinstance(source, pd.DataFrame):
        if filtered:
            return _load_filtered(source, RowLocator("<frame>"), cluster, models,
                                  start_h, end_h, max_jobs, oversize)
        return validate_trace(source, "<frame>", cluster, models)
    if isinstance(source, str) and source in shipped_traces():
        path = shipped_trace_path(source)
    elif isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            if isinstance(source, str) and not _looks_like_path(source):
                shipped_trace_path(source)  # raises, listing the shipped names
            raise TraceError(
                f"{path}: no such file (shipped trace names: {', '.join(shipped_traces())})"
            )
    else:
        raise TypeError(
            f"a trace source is a shipped name, a path or a DataFrame, not {type(source).__name__}"
        )
    raw, where = read_csv_raw(path, text_columns=("model",))
    if filtered:
        return _load_filtered(raw, where, cluster, models, start_h, end_h, max_jobs, oversize)
    return validate_trace(raw, str(path), cluster, models, locator=where)


def _load_filtered(raw, where, cluster, models, start_h, end_h, max_jobs, oversize):
    """load_trace with filters: validate, filter (naming source rows), validate again."""
    from dallygym.trace.filters import filter_trace  # filters imports this module

    frame = validate_trace(raw, where.source, None, models, locator=where)
    frame, report = filter_trace(frame, where, raw["job_id"], cluster, start_h, end_h,
                                 max_jobs, oversize)
    out = validate_trace(frame, where.source, cluster, models)
    out.attrs["load_report"] = report
    return out


def _looks_like_path(text: str) -> bool:
    return any(sep in text for sep in ("/", "\\")) or Path(text).suffix != ""


def write_trace(frame: pd.DataFrame, path: str | Path) -> Path:
    """Validate ``frame`` and write it as a canonical CSV; returns the path.

    Floats are written with Python's shortest round-trip representation, so
    ``load_trace(path)`` gives back exactly the same values. Lines end in ``\\n`` and the
    bytes depend only on the values (the committed traces are compared by sha256).
    """
    canonical = validate_trace(frame, source=str(frame.attrs.get("source", "<frame>")))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = canonical.to_csv(index=False, lineterminator="\n")
    path.write_bytes(text.encode("utf-8"))
    return path


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ----------------------------------------------------------------------------------------------
# Summary statistics
# ----------------------------------------------------------------------------------------------


def trace_stats(frame: pd.DataFrame) -> dict:
    """Summary statistics of a validated trace (durations are ideal run times in seconds).

    Quantiles use linear interpolation between order statistics (numpy's default).
    """
    duration = frame["total_iterations"].to_numpy() * frame["iter_time_s"].to_numpy()
    gpus = frame["num_gpus"].to_numpy()
    arrival = np.sort(frame["arrival_s"].to_numpy())
    p10, p50, p90, p99 = np.percentile(duration, [10, 50, 90, 99])
    span = float(arrival[-1] - arrival[0])
    return {
        "jobs": len(frame),
        "gpu_counts": {int(k): int(v) for k, v in sorted(pd.Series(gpus).value_counts().items())},
        "model_counts": {
            str(k): int(v) for k, v in sorted(frame["model"].value_counts().items())
        },
        "total_gpus": int(gpus.sum()),
        "duration_p10_s": float(p10),
        "duration_p50_s": float(p50),
        "duration_p90_s": float(p90),
        "duration_p99_s": float(p99),
        "duration_mean_s": float(duration.mean()),
        "duration_max_s": float(duration.max()),
        "gpu_hours": float((gpus * duration).sum() / 3600.0),
        "arrival_span_h": span / 3600.0,
        "mean_interarrival_s": span / (len(frame) - 1) if len(frame) > 1 else 0.0,
    }


__all__ = [
    "MAX_TIME_S",
    "MIN_ITER_TIME_S",
    "TRACE_COLUMNS",
    "TRACE_DTYPES",
    "RowLocator",
    "TraceError",
    "check_trace_fits",
    "load_trace",
    "read_csv_raw",
    "sha256_of",
    "shipped_trace_dir",
    "shipped_trace_path",
    "shipped_traces",
    "trace_stats",
    "validate_trace",
    "write_trace",
]
