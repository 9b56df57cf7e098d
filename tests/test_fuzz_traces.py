"""The fuzz corpus (tests/data/fuzz/, written by tests/fuzz_corpus.py): damaged trace and
importer files are refused with one short printable line naming the file and the line (and
column, or JSON key) -- never another exception, a warning or a hang -- and the allowed
variations load.

The bulk runs in-process; a few cases go through the real command line to check what a user
sees: exit status 2 and a single ``dallygym: error:`` line on stderr.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dallygym
from dallygym.sim.trace import TRACE_COLUMNS, TraceError, import_gavel, import_trace, load_trace

REPO = Path(__file__).resolve().parents[1]
FUZZ = REPO / "tests" / "data" / "fuzz"
MANIFEST = json.loads((FUZZ / "manifest.json").read_text(encoding="utf-8"))
TRACES = MANIFEST["traces"]
IMPORTERS = MANIFEST["importers"]

#: Longest message allowed, not counting the paths it names (a path is as long as it is).
MAX_CHARS = 300


def run(entry: dict) -> pd.DataFrame:
    """Load or import one manifest entry, with every warning turned into an error."""
    path = FUZZ / entry["file"]
    fmt = entry["format"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if fmt == "canonical":
            return load_trace(path)
        if fmt == "gavel":
            return import_gavel(path, throughputs=FUZZ / entry["throughputs"])
        if fmt == "gavel_throughputs":
            return import_gavel(FUZZ / entry["trace"], throughputs=path)
        return import_trace(fmt, path)


def files_named(entry: dict) -> list[str]:
    """Paths a refusal of ``entry`` may name: the file, and for a throughput table whose
    entries make a trace line fail, that trace."""
    names = [str(FUZZ / entry["file"])]
    if entry["format"] == "gavel_throughputs":
        names.append(str(FUZZ / entry["trace"]))
    return names


def check_message(message: str, entry: dict) -> None:
    names = files_named(entry)
    assert message.isprintable(), f"not one printable line: {message!r}"
    bare = message
    for name in names:
        bare = bare.replace(name, "")
    assert len(bare) <= MAX_CHARS, f"{len(bare)} characters: {message[:400]!r}"
    assert any(message.startswith(name) for name in names), message
    if entry.get("line"):
        assert message.startswith(f"{names[0]}, line {entry['line']}"), message
    if entry.get("column"):
        assert f", column {entry['column']}:" in message, message
    if entry.get("words"):
        assert entry["words"] in message, message
    if entry["format"] != "gavel_throughputs" and entry.get("words") is None:
        # Every refusal of a CSV or Gavel trace file points at a line.
        assert re.match(re.escape(names[0]) + r", line \d+[,:]", message), message


def check(entry: dict) -> None:
    if entry["expect"] == "load":
        frame = run(entry)
        assert tuple(frame.columns) == TRACE_COLUMNS and len(frame) > 0
        return
    try:
        run(entry)
    except TraceError as exc:
        check_message(str(exc), entry)
    else:
        assert entry["expect"] == "either", f"{entry['file']} loaded, expected a refusal"


def ident(entry: dict) -> str:
    return entry["file"].split("/", 1)[1]


@pytest.mark.parametrize("entry", TRACES, ids=ident)
def test_trace_corpus(entry):
    check(entry)


@pytest.mark.parametrize("entry", IMPORTERS, ids=ident)
def test_importer_corpus(entry):
    check(entry)


def test_corpus_is_large_enough_small_on_disk_and_as_written(tmp_path):
    import fuzz_corpus

    assert len(TRACES) >= 200 and len(IMPORTERS) >= 80
    assert {e["expect"] for e in TRACES} == {"load", "refuse", "either"}
    assert {e["format"] for e in IMPORTERS} == {"philly", "tiresias", "helios", "gavel", "gavel_throughputs"}
    files = sorted(p for p in FUZZ.rglob("*") if p.is_file())
    assert sum(p.stat().st_size for p in files) < 5_000_000
    # Regenerating gives the committed bytes.
    fuzz_corpus.write_all(tmp_path / "fuzz")
    again = sorted(p for p in (tmp_path / "fuzz").rglob("*") if p.is_file())
    assert [p.relative_to(tmp_path / "fuzz") for p in again] == [p.relative_to(FUZZ) for p in files]
    for mine, theirs in zip(again, files):
        assert mine.read_bytes() == theirs.read_bytes(), theirs


# ------------------------------------------------------------------ in-memory frames

GOOD = {
    "job_id": [0, 1],
    "arrival_s": [0.0, 5.0],
    "num_gpus": [1, 2],
    "model": ["resnet50", "vgg11"],
    "total_iterations": [10, 20],
    "iter_time_s": [0.5, 1.0],
}


def frame_with(column: str, value: object) -> pd.DataFrame:
    data = {k: list(v) for k, v in GOOD.items()}
    data[column][1] = value
    return pd.DataFrame(data)


FRAMES = {
    "duplicated_column": pd.concat([pd.DataFrame(GOOD), pd.DataFrame(GOOD)[["model"]]], axis=1),
    "complex_iter_time": frame_with("iter_time_s", 1 + 2j),
    "complex_text": frame_with("iter_time_s", "1+2j"),
    "python_int_400_digits": frame_with("total_iterations", 10**400),
    "text_400_digits": frame_with("job_id", "9" * 400),
    "bool_gpus": frame_with("num_gpus", True),
    "none_arrival": frame_with("arrival_s", None),
    "bytes_model": frame_with("model", b"resnet50"),
    "long_model": frame_with("model", "m" * 1_000_000),
    "nul_model": frame_with("model", "resnet50\x00"),
    "list_value": frame_with("num_gpus", [1, 2]),
    "numpy_inf": frame_with("arrival_s", np.inf),
    "no_rows": pd.DataFrame({k: [] for k in GOOD}),
    "no_columns": pd.DataFrame(),
    "integer_column_names": pd.DataFrame([[0, 0.0, 1, "resnet50", 10, 0.5]]),
}


@pytest.mark.parametrize("name", FRAMES)
def test_bad_frames_through_simulate_are_refused_in_one_line(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TraceError) as info:
            dallygym.simulate(FRAMES[name], 1, policy="fifo")
    message = str(info.value)
    assert message.startswith("<frame>") and message.isprintable() and len(message) <= MAX_CHARS


# ------------------------------------------------------------------ the command line


def entry_named(section: list[dict], file: str) -> dict:
    return next(e for e in section if e["file"] == file)


CLI_CASES = [
    (
        "utf16",
        ["simulate", "--trace", "traces/utf16_le_bom.csv", "--racks", "2"],
        "file is UTF-16 (or binary), expected UTF-8 CSV",
    ),
    ("huge-model", ["simulate", "--trace", "traces/huge_model_later.csv", "--racks", "2"], "(131073 characters)"),
    ("directory", ["simulate", "--trace", "traces/a_directory.csv", "--racks", "2"], "is a directory"),
    (
        "philly-duration",
        ["trace", "import", "philly", "importers/philly_duration_1e300.csv"],
        "line 3, column duration: out of range",
    ),
    (
        "gavel-nesting",
        [
            "trace",
            "import",
            "gavel",
            "importers/gavel_ok.trace",
            "--throughputs",
            "importers/throughputs_nested_100k.json",
        ],
        "nested too deeply",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv, words", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_command_line_refuses_with_one_error_line(tmp_path, argv, words):
    argv = [str(FUZZ / a) if a.startswith(("traces/", "importers/")) else a for a in argv]
    if argv[0] == "trace":
        argv += ["--out", str(tmp_path / "out.csv")]
    done = subprocess.run(
        [sys.executable, "-m", "dallygym", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dallygym: error: "), done.stderr
    assert words in lines[0] and len(lines[0]) <= 400
    assert not (tmp_path / "out.csv").exists()
