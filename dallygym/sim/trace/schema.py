"""The canonical trace format: schema, the one validating loader, the writer, shipped files.

A trace is a table of jobs with exactly the columns of :data:`TRACE_COLUMNS`:

========================  =========  ==============================================================
column                    dtype      meaning
========================  =========  ==============================================================
``job_id``                int64      unique, 0 <= id <= 2**53
``arrival_s``             float64    arrival time in seconds, 0 <= t <= 1e9
``num_gpus``              int64      gang size (all or nothing), 1 <= g <= 2**53
``model``                 object     one of the known model identifiers (``dallygym.sim.models``)
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

import codecs
import csv
import hashlib
import io
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.models import MODEL_NAMES

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


#: How many characters of a value, name or path a message quotes before cutting it short.
SHOWN_CHARS = 60

#: Longest message a TraceError carries; longer ones are cut in the middle. The parts that can
#: be long (values, names, lists) are shortened where the message is made, so this only bounds
#: what slips through (a long path, say).
MAX_MESSAGE_CHARS = 600


class TraceError(ValueError):
    """An invalid trace or trace file. The message names the file, the line and the column.

    The message is always one printable line of bounded length: the command line prints it
    as is, so a control character, a NUL or a megabyte of field text in an input (or in a
    path) must not reach the terminal.
    """

    def __init__(self, message: object = "") -> None:
        super().__init__(printable_line(str(message), MAX_MESSAGE_CHARS))


def printable_line(text: str, limit: int) -> str:
    """``text`` with every non-printable character escaped (as ``repr`` does) and cut in the
    middle to at most about ``limit`` characters."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > limit:
        half = (limit - 30) // 2
        text = f"{text[:half]} … ({len(text) - 2 * half} characters cut) … {text[-half:]}"
    return text


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of a string, of its first ``limit`` characters and its length if longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def show_name(name: object) -> str:
    """A column name or other label as a message shows it: as is when short and plain,
    else quoted and shortened."""
    text = str(name)
    if text and len(text) <= SHOWN_CHARS and text.isprintable() and text.strip() == text:
        return text
    return clip(text)


def show_names(names: Iterable[object], limit: int = 8) -> str:
    """A comma-separated list of names, the first ``limit`` of them and a count of the rest."""
    names = list(names)
    shown = ", ".join(show_name(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


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

    def __init__(self, source: str, first_line: int | None = None, positions: np.ndarray | None = None) -> None:
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


#: Most columns a trace file may have. Every format has a dozen at most; parsing a table
#: a hundred thousand columns wide takes pandas minutes, so such a file is refused first.
MAX_CSV_COLUMNS = 1000


def read_csv_raw(
    path: str | Path, text_columns: Iterable[str] = (), exact_columns: Iterable[str] | None = None
) -> tuple[pd.DataFrame, RowLocator]:
    """Read a CSV file for validation: nothing dropped, nothing coerced.

    Columns in ``text_columns`` are read as text, verbatim. Other columns are parsed by
    pandas' C parser when every field is a number (exactly: parsing a written float gives it
    back bit for bit); a column with any other field stays text, so the checks can name the
    offending field. Empty fields are NaN; no other spelling ("NA", "null", "nan") is turned
    into a missing value by the reader.

    ``exact_columns``, if given, are the only columns allowed (any order); the header is
    checked against them before the data is parsed (:func:`require_columns`).

    Returns the table and a locator whose line numbers match the file (header = line 1, the
    first data row = line 2). A blank line inside the data is an error; blank lines at the
    very end of the file are ignored. Each line holds one record: a quoted field running over
    a line break is an error (it would shift every later line number).

    Raises:
        TraceError: missing or unreadable file, a directory, a file that is not UTF-8 text
            (UTF-16, binary), empty file, blank or duplicate header names, a blank line inside
            the data, a line with more fields than the header, a quoted line break. (A line
            with fewer fields reads as missing values in its last columns, reported at that
            line.)
    """
    path = Path(path)
    source = str(path)
    data = _read_bytes(path)
    text = _decode(path, data)
    if text.startswith("\ufeff"):
        data, text = data[len(codecs.BOM_UTF8) :], text[1:]
    header = _read_header(source, text)
    if exact_columns is not None:
        # Named as pandas names them, so both checks word a problem the same way.
        names = [name if name else f"Unnamed: {i}" for i, name in enumerate(header)]
        require_columns(pd.DataFrame(columns=names), exact_columns, RowLocator(source, first_line=2), exact=True)
    if len(header) > MAX_CSV_COLUMNS:
        raise TraceError(
            f"{source}, line 1: {len(header)} columns, more than the {MAX_CSV_COLUMNS} a trace file may have"
        )
    try:
        with warnings.catch_warnings():
            # pandas only warns when the first data line is longer than the header; promote it.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                io.BytesIO(data),
                dtype={name: str for name in text_columns},
                keep_default_na=False,
                na_values=[""],
                skip_blank_lines=False,
                index_col=False,
                low_memory=False,
                encoding="utf-8",
            )
    except (pd.errors.ParserError, pd.errors.ParserWarning) as exc:
        raise TraceError(_structure_problem(source, text, header, exc)) from None
    frame = _drop_trailing_blank_rows(frame)
    blank = _blank_rows(frame)
    if len(blank):
        raise TraceError(f"{source}, line {2 + int(blank[0])}: blank line inside the data")
    if '"' in text:  # only a quoted field can hold a line break
        _check_one_line_records(frame, source)
    return frame, RowLocator(source, first_line=2)


def _read_bytes(path: Path, kind: str = "CSV") -> bytes:
    """The bytes of the file ``path`` (a ``kind`` file, for messages)."""
    source = str(path)
    try:
        if path.is_dir():
            raise TraceError(f"{source}: is a directory, expected a {kind} file")
        if not path.exists():
            raise TraceError(f"{source}: no such file")
        if not path.is_file():
            # A FIFO or a device: reading it could block forever.
            raise TraceError(f"{source}: not a regular file, expected a {kind} file")
        return path.read_bytes()
    except (OSError, ValueError) as exc:
        if isinstance(exc, TraceError):
            raise
        # An unreadable file, a path too long or with a NUL byte in it.
        reason = getattr(exc, "strerror", None) or str(exc)
        raise TraceError(f"{source}: cannot read the file ({reason})") from None


_UTF16_OR_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _decode(path: Path | str, data: bytes, kind: str = "CSV", sep: str | None = ",", header: bool = True) -> str:
    """The file's text, refusing what is not UTF-8 with the line and column of the first bad
    byte. A NUL byte on the first line means UTF-16/32 or binary data: a header never has one
    (a NUL inside a data field is left to the value checks, which show it escaped). ``kind``
    names the expected format in messages; ``sep`` and ``header`` say how to name the field
    of a bad byte (by the header's column name, else by position; with no ``sep``, by its
    character position in the line)."""
    first_line = data[: data.find(b"\n")] if b"\n" in data[:65536] else data[:65536]
    if data.startswith(_UTF16_OR_32_BOMS) or b"\x00" in first_line:
        raise TraceError(f"{path}, line 1: file is UTF-16 (or binary), expected UTF-8 {kind}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        before = data[start : exc.start].decode("utf-8", "replace")
        if sep is None:
            column = f", column {len(before) + 1}"
        else:
            names = first_line.decode("utf-8", "replace").rstrip("\r").split(sep)
            # Separators before the byte (quotes aside) tell the field it is in.
            index = before.count(sep)
            column = (
                f", column {show_name(names[index])}"
                if header and line > 1 and index < len(names)
                else f", field {index + 1}"
            )
        raise TraceError(
            f"{path}, line {line}{column}: not UTF-8 text (byte {data[exc.start]:#04x}: "
            f"{exc.reason}); expected a UTF-8 {kind} file"
        ) from None


def _read_header(source: str, text: str) -> list[str]:
    if text == "":
        raise TraceError(f"{source}, line 1: the file is empty (a header line is required)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        first = next(reader)
        first_end = reader.line_num
        second = next(reader, None)
    except csv.Error as exc:
        raise TraceError(f"{source}, line {reader.line_num}: {_csv_words(exc)}") from None
    if not any(name.strip() for name in first):
        raise TraceError(f"{source}, line 1: the header line is blank")
    if first_end > 1:
        raise TraceError(
            f"{source}, line 1: a quoted column name runs over the end of the line (an unterminated quote?)"
        )
    dupes = sorted(name for name, n in Counter(first).items() if n > 1)
    if dupes:
        raise TraceError(f"{source}, line 1: duplicate column name(s) {show_names(dupes)}")
    # pandas reads a first data line with one field more than the header as if that field
    # were an index column (with index_col=False it drops it, silently when it is empty: a
    # trailing comma); later lines with extra fields are parser errors. So check the first
    # data line here.
    if second is not None and len(second) > len(first):
        raise TraceError(f"{source}, line 2: {len(second)} fields, but the header has {len(first)}")
    return first


def _csv_words(exc: csv.Error) -> str:
    text = str(exc)
    if "field limit" in text:
        return f"a field longer than {csv.field_size_limit()} characters"
    return printable_line(text, 120)


def _structure_problem(source: str, text: str, header: list[str], exc: Exception) -> str:
    """Slow path, run only after pandas failed: find the first line that is not one record
    of at most the header's width."""
    width = len(header)
    reader = csv.reader(io.StringIO(text, newline=""))
    end = 0
    try:
        for fields in reader:
            start, end = end + 1, reader.line_num
            if start == 1:
                continue
            if end > start:
                return _multi_line_problem(source, start, header, fields)
            if len(fields) > width:
                return f"{source}, line {start}: {len(fields)} fields, but the header has {width}"
    except csv.Error as error:
        return f"{source}, line {end + 1}: {_csv_words(error)}"
    # A quote left open on the last line reads to the end of the file without spanning lines.
    found = re.search(r"(?:row|line) (\d+)", str(exc))
    if found and "EOF inside string" in str(exc):
        return f"{source}, line {end}: a quoted field is not closed before the end of the file (an unterminated quote?)"
    line = f", line {int(found.group(1))}" if found else ""
    return f"{source}{line}: cannot parse the CSV ({printable_line(str(exc), 120)})"


def _multi_line_problem(source: str, line: int, header: list[str], fields: list[str]) -> str:
    at = next((j for j, f in enumerate(fields) if "\n" in f or "\r" in f), None)
    column = f", column {show_name(header[at])}" if at is not None and at < len(header) else ""
    return (
        f"{source}, line {line}{column}: a quoted field runs over the end of the line (an "
        f"unterminated quote?); a trace has one job per line"
    )


def _check_one_line_records(frame: pd.DataFrame, source: str) -> None:
    """A quoted line break inside a field makes a record span lines, and every later line
    number in a message would be off: refuse it at the (still correctly numbered) first."""
    first: tuple[int, int] | None = None
    for j in range(frame.shape[1]):
        column = frame.iloc[:, j]
        if column.dtype != object and not pd.api.types.is_string_dtype(column.dtype):
            continue
        try:
            hit = column.str.contains("[\r\n]", regex=True, na=False)
        except AttributeError:  # no strings at all (huge integers read as Python ints)
            continue
        rows = np.flatnonzero(hit.to_numpy(dtype=bool, na_value=False))
        if len(rows) and (first is None or rows[0] < first[0]):
            first = (int(rows[0]), j)
    if first is not None:
        i, j = first
        raise TraceError(_multi_line_problem(source, 2 + i, [str(c) for c in frame.columns], [""] * j + ["\n"]))


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
    # An object column counts as text only if it holds nothing but strings: pd.to_numeric
    # would take a True among numbers for 1.
    if values.dtype == object and pd.api.types.infer_dtype(values, skipna=False) != "string":
        return None
    try:
        parsed = pd.to_numeric(values)
    except (ValueError, TypeError, OverflowError):
        return None
    # Integers beyond 64 bits come back as Python ints in an object column; complex numbers
    # ("1+2j") as complex: neither is a plain number here.
    if parsed.dtype.kind not in "iuf":
        return None
    return None if parsed.isna().any() else parsed


def _to_numbers(values: pd.Series) -> pd.Series:
    """``pd.to_numeric(values, errors="coerce")`` that never raises: a Python int too large
    for a float64 reads as infinity (reported as too large), anything else unreadable as
    NaN (reported as not a number)."""
    try:
        parsed = pd.to_numeric(values, errors="coerce")
        if parsed.dtype.kind in "iuf":
            return parsed
    except (ValueError, TypeError, OverflowError):
        pass
    return pd.Series([_one_number(v) for v in values.tolist()], dtype=np.float64)


def _one_number(value: object) -> float:
    if isinstance(value, (bool, np.bool_, complex, np.complexfloating)):
        return math.nan
    if isinstance(value, (int, np.integer)):
        if abs(int(value)) >= 2**1023:
            return math.inf if value > 0 else -math.inf
        return float(value)
    if isinstance(value, str) and "_" in value:
        return math.nan  # float() reads "1_000"; a trace does not
    try:
        return float(value)
    except (ValueError, TypeError, OverflowError):
        return math.nan


def _spelled_non_finite(values: pd.Series) -> np.ndarray:
    """Which raw values are written as infinity or NaN (rather than overflowing)."""
    if pd.api.types.is_numeric_dtype(values.dtype):
        return np.ones(len(values), dtype=bool)

    def spelled(value: object) -> bool:
        if isinstance(value, str):
            return "inf" in value.lower() or "nan" in value.lower()
        return not isinstance(value, (int, np.integer))

    return values.map(spelled).to_numpy(bool)


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
        raise TraceError(f"{where.at(0, column)}: expected a number, got {show_value(values.iloc[0])}")
    if values.dtype.kind == "c":
        raise TraceError(f"{where.at(0, column)}: expected a real number, got {show_value(values.iloc[0])}")
    parsed = _parse_clean_text(values)
    if parsed is not None:
        missing = np.zeros(len(values), dtype=bool)
    elif (text := _as_text(values)) is not None:
        # Text as read from a file: blank and "nan" are missing values, anything else that
        # does not parse is not a number.
        missing = ((text == "") | (text.str.lower() == "nan")).to_numpy()
        parsed = _to_numbers(text.where(~missing, "0"))
        _fail_first(parsed.isna().to_numpy() & ~missing, values, column, where, "expected a number")
    elif pd.api.types.is_numeric_dtype(values.dtype):
        parsed = values
        missing = values.isna().to_numpy()
    else:
        # Mixed Python objects (an in-memory frame): rare, so an element-wise pass is fine.
        missing = values.map(
            lambda v: (
                v is None
                or (isinstance(v, float) and math.isnan(v))
                or (isinstance(v, str) and v.strip().lower() in ("", "nan"))
            )
        ).to_numpy(bool)
        is_bool = values.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(bool)
        parsed = _to_numbers(values.where(~missing & ~is_bool, 0))
        _fail_first((parsed.isna().to_numpy() | is_bool) & ~missing, values, column, where, "expected a number")
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
    finite = np.isfinite(floats)
    if not finite.all():
        # A number too large for a float64 ("1e400", 400 digits) reads as infinity: say so,
        # rather than that it is not finite.
        overflow = ~finite & ~np.isnan(floats) & ~_spelled_non_finite(values)
        _fail_first(overflow, values, column, where, _TOO_LARGE if integer else "number out of range (too large)")
    _fail_first(~finite, values, column, where, "expected a finite number")
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


def _fail_first(bad: np.ndarray, values: pd.Series, column: str, where: RowLocator, what: str, quote: bool = True):
    if not bad.any():
        return
    rows = np.flatnonzero(bad)
    first = int(rows[0])
    # A missing value has nothing worth quoting (an empty field reads as NaN).
    quote = quote and not what.startswith("missing")
    got = f", got {show_value(values.iloc[first])}" if quote else ""
    raise TraceError(f"{where.at(first, column)}: {what}{got}{_more(len(rows) - 1)}")


def show_value(value: object) -> str:
    """A raw value as a message shows it: strings quoted (control characters escaped, long
    ones cut to their first characters and their length), numpy scalars as plain numbers."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOWN_CHARS:
        digits = str(value)
        return f"{digits[:SHOWN_CHARS]}… ({len(digits)} characters)"
    return printable_line(repr(value), SHOWN_CHARS * 2)


def parse_labels(values: pd.Series, column: str, where: RowLocator) -> np.ndarray:
    """A column of non-empty strings, returned as an object array (values unchanged)."""
    values = values.reset_index(drop=True)
    # An empty field reads as NaN: say it is empty rather than show "nan".
    _fail_first(
        values.isna().to_numpy(), values, column, where, "expected a non-empty name, got an empty field", quote=False
    )
    if pd.api.types.is_string_dtype(values.dtype):
        # Whitespace-only names are not caught here; they fail the caller's name checks.
        bad = (values.astype(str) == "").to_numpy()
    else:
        bad = values.map(lambda v: not isinstance(v, str) or v.strip() == "").to_numpy(bool)
    _fail_first(bad, values, column, where, "expected a non-empty name")
    return values.astype(object).to_numpy()


def require_columns(frame: pd.DataFrame, required: Iterable[str], where: RowLocator, exact: bool = False) -> None:
    """Fail if columns are missing (or, with ``exact``, if there are unexpected ones)."""
    required = list(required)
    head = f"{where.source}, line 1" if where.first_line is not None else where.source
    present = [str(c) for c in frame.columns]
    dupes = sorted(name for name, n in Counter(present).items() if n > 1)
    if dupes:
        # frame[name] of a duplicated name is a table, not a column.
        raise TraceError(f"{head}: duplicate column name(s) {show_names(dupes)}")
    missing = [c for c in required if c not in present]
    # One column name holding all the others: the file is not comma-separated.
    other = [sep for sep in (";", "\t", "|") if len(present) == 1 and sep in present[0]]
    if missing and other:
        raise TraceError(
            f"{head}: the header is one column, {show_name(present[0])}: "
            f"separated by {other[0]!r} instead of ','? expected "
            f"{', '.join(required)}"
        )
    wanted = set(required)
    extra = [c for c in present if c not in wanted] if exact else []
    problems = []
    if missing:
        problems.append(f"missing column(s) {show_names(missing)}")
    if extra:
        # pandas names a column whose header field is empty "Unnamed: <position>".
        unnamed = any(c.startswith("Unnamed: ") for c in extra)
        problems.append(
            f"unexpected column(s) {show_names(extra, 4)}"
            + (" (an empty column name: a trailing comma?)" if unnamed else "")
        )
    if problems:
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
        if where.first_line is not None:
            raise TraceError(
                f"{where.source}, line {where.first_line}: the trace has no jobs (nothing after the header line)"
            )
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
            f"{where.at(int(rows[0]), 'model')}: unknown model {show_value(model[rows[0]])}"
            f"{_more(len(rows) - 1)}; known models: {', '.join(known)}"
        )
    iterations = parse_numbers(frame["total_iterations"], "total_iterations", where, integer=True, minimum=1)
    iter_time = parse_numbers(frame["iter_time_s"], "iter_time_s", where, integer=False, minimum=0.0, strict=True)
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


def canonical_frame(
    *,
    job_id: np.ndarray,
    arrival_s: np.ndarray,
    num_gpus: np.ndarray,
    model: np.ndarray,
    total_iterations: np.ndarray,
    iter_time_s: np.ndarray,
    source: str,
) -> pd.DataFrame:
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


def _check_times(
    arrival: np.ndarray, iterations: np.ndarray, iter_time: np.ndarray, frame: pd.DataFrame, where: RowLocator
) -> None:
    """Times the engine's float64 clock can represent finely (see :data:`MAX_TIME_S`)."""
    _fail_first(
        arrival > MAX_TIME_S,
        frame["arrival_s"].reset_index(drop=True),
        "arrival_s",
        where,
        f"must be at most {MAX_TIME_S:g} s (about 31.7 years)",
    )
    _fail_first(
        iter_time < MIN_ITER_TIME_S,
        frame["iter_time_s"].reset_index(drop=True),
        "iter_time_s",
        where,
        f"must be at least {MIN_ITER_TIME_S:g} s",
    )
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
        f"{where.at(second, 'job_id')}: duplicate job_id {int(ids[second])} on "
        f"{where.row(first)} and {where.row(second)}{_more(int(dup.sum()) - 1)}"
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
    return [here.parents[2] / "_traces", here.parents[3] / "traces"]


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
            (:func:`dallygym.sim.trace.filters.filter_trace`): jobs arriving in ``[start_h, end_h)``
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
            return _load_filtered(source, RowLocator("<frame>"), cluster, models, start_h, end_h, max_jobs, oversize)
        return validate_trace(source, "<frame>", cluster, models)
    if isinstance(source, str) and source in shipped_traces():
        path = shipped_trace_path(source)
    elif isinstance(source, (str, Path)):
        path = Path(source)
        if not _exists(path):
            if isinstance(source, str) and not _looks_like_path(source):
                shipped_trace_path(source)  # raises, listing the shipped names
            raise TraceError(f"{path}: no such file (shipped trace names: {', '.join(shipped_traces())})")
    else:
        raise TypeError(f"a trace source is a shipped name, a path or a DataFrame, not {type(source).__name__}")
    raw, where = read_csv_raw(path, text_columns=("model",), exact_columns=TRACE_COLUMNS)
    if filtered:
        return _load_filtered(raw, where, cluster, models, start_h, end_h, max_jobs, oversize)
    return validate_trace(raw, str(path), cluster, models, locator=where)


def _load_filtered(raw, where, cluster, models, start_h, end_h, max_jobs, oversize):
    """load_trace with filters: validate, filter (naming source rows), validate again."""
    from dallygym.sim.trace.filters import filter_trace  # filters imports this module

    frame = validate_trace(raw, where.source, None, models, locator=where)
    frame, report = filter_trace(frame, where, raw["job_id"], cluster, start_h, end_h, max_jobs, oversize)
    out = validate_trace(frame, where.source, cluster, models)
    out.attrs["load_report"] = report
    return out


def _exists(path: Path) -> bool:
    # A name too long for the file system, or with a NUL byte in it, is no file either; the
    # reader then says why it cannot be read.
    try:
        return path.exists()
    except (OSError, ValueError):
        return True


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
        "model_counts": {str(k): int(v) for k, v in sorted(frame["model"].value_counts().items())},
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
