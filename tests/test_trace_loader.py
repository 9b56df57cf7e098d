"""The canonical trace format and its one validating loader (SPEC §3).

File rows are named by line with the header as line 1, so the first job is on line 2.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.trace import (
    TRACE_COLUMNS,
    TraceError,
    check_trace_fits,
    load_trace,
    shipped_trace_path,
    shipped_traces,
    validate_trace,
    write_trace,
)

HEADER = ",".join(TRACE_COLUMNS)
REPO_TRACES = Path(__file__).resolve().parents[1] / "traces"


def write(tmp_path: Path, *rows: str, header: str = HEADER, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def error_of(source, **kwargs) -> str:
    with pytest.raises(TraceError) as info:
        load_trace(source, **kwargs)
    return str(info.value)


GOOD = ("0,0,1,vgg11,10,0.5", "1,0,2,alexnet,20,0.25")


# ---------------------------------------------------------------- valid traces


def test_valid_file_loads_with_canonical_columns_and_dtypes(tmp_path):
    frame = load_trace(write(tmp_path, *GOOD))
    assert tuple(frame.columns) == TRACE_COLUMNS
    assert [str(t) for t in frame.dtypes] == ["int64", "float64", "int64", "object", "int64", "float64"]
    assert frame["model"].tolist() == ["vgg11", "alexnet"]
    assert isinstance(frame.index, pd.RangeIndex)


def test_rows_are_sorted_by_arrival_then_id_and_nothing_else_changes(tmp_path):
    path = write(
        tmp_path,
        "7,30.5,4,resnet50,100,0.2",
        "3,0,1,bert_large,5,1.5",
        "2,30.5,8,mobilenet_v3,1,0.01",
    )
    frame = load_trace(path)
    assert frame["job_id"].tolist() == [3, 2, 7]
    assert frame["arrival_s"].tolist() == [0.0, 30.5, 30.5]
    assert frame["num_gpus"].tolist() == [1, 8, 4]
    assert frame["total_iterations"].tolist() == [5, 1, 100]
    assert frame["iter_time_s"].tolist() == [1.5, 0.01, 0.2]
    assert frame.index.tolist() == [0, 1, 2]


def test_columns_may_come_in_any_order(tmp_path):
    header = "model,job_id,arrival_s,num_gpus,total_iterations,iter_time_s"
    frame = load_trace(write(tmp_path, "vgg11,0,0,1,10,0.5", header=header))
    assert tuple(frame.columns) == TRACE_COLUMNS


def test_arrival_zero_is_allowed_and_whole_floats_count_as_integers(tmp_path):
    frame = load_trace(write(tmp_path, "0,0,4.0,vgg11,10.0,0.5"))
    assert frame["num_gpus"].tolist() == [4]
    assert frame["total_iterations"].tolist() == [10]


def test_dataframe_source_is_validated_and_not_modified():
    raw = pd.DataFrame(
        {
            "job_id": [1, 0],
            "arrival_s": [5.0, 0.0],
            "num_gpus": [2, 1],
            "model": ["vgg11", "alexnet"],
            "total_iterations": [10, 20],
            "iter_time_s": [0.1, 0.2],
        }
    )
    before = raw.copy()
    frame = load_trace(raw)
    assert frame["job_id"].tolist() == [0, 1]
    pd.testing.assert_frame_equal(raw, before)


def test_custom_model_list_accepts_other_models(tmp_path):
    path = write(tmp_path, "0,0,1,gpt2,10,0.5")
    assert "unknown model 'gpt2'" in error_of(path)
    assert load_trace(path, models=("gpt2",))["model"].tolist() == ["gpt2"]


def test_trailing_blank_lines_are_ignored(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n" + "\n".join(GOOD) + "\n\n\n")
    assert len(load_trace(path)) == 2


# ---------------------------------------------------------------- structure errors


def test_missing_column_is_named(tmp_path):
    header = "job_id,arrival_s,num_gpus,model,total_iterations"
    message = error_of(write(tmp_path, "0,0,1,vgg11,10", header=header))
    assert "t.csv, line 1" in message
    assert "missing column(s) iter_time_s" in message


def test_extra_column_is_named(tmp_path):
    message = error_of(write(tmp_path, "0,0,1,vgg11,10,0.5,x", header=HEADER + ",user"))
    assert "t.csv, line 1" in message
    assert "unexpected column(s) user" in message


def test_duplicate_header_column_is_named(tmp_path):
    message = error_of(write(tmp_path, "0,0,1,vgg11,10,0.5,1", header=HEADER + ",job_id"))
    assert "line 1" in message and "duplicate column name(s) job_id" in message


def test_line_with_too_many_fields_is_named(tmp_path):
    message = error_of(write(tmp_path, GOOD[0], GOOD[1] + ",9"))
    assert "t.csv, line 3: 7 fields, but the header has 6" in message


def test_blank_line_inside_the_data_is_named(tmp_path):
    message = error_of(write(tmp_path, GOOD[0], "", GOOD[1]))
    assert "t.csv, line 3: blank line" in message


def test_trace_without_jobs_is_rejected(tmp_path):
    assert "no jobs" in error_of(write(tmp_path))


def test_empty_file_is_rejected(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("")
    assert "empty.csv, line 1: the file is empty" in error_of(path)


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nowhere" / "jobs.csv"
    message = error_of(missing)
    assert str(missing) in message and "no such file" in message
    assert str(missing) in error_of(str(missing))


def test_unknown_shipped_name_lists_the_shipped_names():
    message = error_of("batch-5000")
    assert "unknown trace 'batch-5000'" in message
    for name in ("batch-500", "poisson-411", "small"):
        assert name in message


def test_wrong_source_type_is_a_type_error():
    with pytest.raises(TypeError):
        load_trace(42)


# ---------------------------------------------------------------- value errors


@pytest.mark.parametrize(
    "row, column, words",
    [
        ("1,abc,2,vgg11,10,0.5", "arrival_s", "expected a number, got 'abc'"),
        ("1,0,two,vgg11,10,0.5", "num_gpus", "expected a number, got 'two'"),
        ("x1,0,2,vgg11,10,0.5", "job_id", "expected a number, got 'x1'"),
        ("1,0,2,vgg11,10,fast", "iter_time_s", "expected a number, got 'fast'"),
    ],
)
def test_non_numeric_value_names_line_column_and_value(tmp_path, row, column, words):
    message = error_of(write(tmp_path, GOOD[0], row))
    assert f"t.csv, line 3, column {column}: {words}" in message


@pytest.mark.parametrize(
    "column_index, column", [(1, "arrival_s"), (2, "num_gpus"), (4, "total_iterations"), (5, "iter_time_s")]
)
@pytest.mark.parametrize("missing", ["", "nan", "NaN"])
def test_empty_or_nan_value_names_line_and_column(tmp_path, column_index, column, missing):
    fields = GOOD[1].split(",")
    fields[column_index] = missing
    message = error_of(write(tmp_path, GOOD[0], ",".join(fields)))
    assert f"line 3, column {column}: missing value" in message


def test_empty_model_names_line_and_column(tmp_path):
    message = error_of(write(tmp_path, GOOD[0], "1,0,2,,10,0.5"))
    assert "line 3, column model: expected a non-empty name" in message


@pytest.mark.parametrize(
    "row, column, words",
    [
        ("1,0,0,vgg11,10,0.5", "num_gpus", "must be at least 1, got 0"),
        ("1,0,-4,vgg11,10,0.5", "num_gpus", "must be at least 1, got -4"),
        ("1,0,2,vgg11,0,0.5", "total_iterations", "must be at least 1, got 0"),
        ("1,0,2,vgg11,10,0", "iter_time_s", "must be > 0, got 0"),
        ("1,0,2,vgg11,10,-0.5", "iter_time_s", "must be > 0, got -0.5"),
        ("1,-1,2,vgg11,10,0.5", "arrival_s", "must be >= 0, got -1"),
        ("-1,0,2,vgg11,10,0.5", "job_id", "must be >= 0, got -1"),
    ],
)
def test_zero_or_negative_values_are_named(tmp_path, row, column, words):
    message = error_of(write(tmp_path, GOOD[0], row))
    assert f"line 3, column {column}: {words}" in message


@pytest.mark.parametrize(
    "row, column, value",
    [
        ("1,0,2.5,vgg11,10,0.5", "num_gpus", "2.5"),
        ("1,0,2,vgg11,10.5,0.5", "total_iterations", "10.5"),
        ("1.5,0,2,vgg11,10,0.5", "job_id", "1.5"),
    ],
)
def test_non_integer_counts_are_rejected_not_rounded(tmp_path, row, column, value):
    message = error_of(write(tmp_path, GOOD[0], row))
    assert f"line 3, column {column}: expected a whole number, got {value}" in message


def test_infinite_time_is_rejected(tmp_path):
    message = error_of(write(tmp_path, GOOD[0], "1,inf,2,vgg11,10,0.5"))
    assert "line 3, column arrival_s: expected a finite number" in message


def test_duplicate_ids_name_both_lines(tmp_path):
    message = error_of(write(tmp_path, "5,0,1,vgg11,10,0.5", GOOD[1], "5,9,2,vgg11,10,0.5"))
    assert "duplicate job_id 5 on line 2 and line 4" in message


def test_unknown_model_names_the_known_models(tmp_path):
    message = error_of(write(tmp_path, GOOD[0], "1,0,2,vgg16,10,0.5"))
    assert "line 3, column model: unknown model 'vgg16'" in message
    assert "vgg11, alexnet, mobilenet_v3, resnet18, resnet50, bert_large" in message


def test_error_counts_further_offending_rows(tmp_path):
    message = error_of(write(tmp_path, "0,0,0,vgg11,1,1", "1,0,0,vgg11,1,1", "2,0,0,vgg11,1,1"))
    assert "line 2" in message and "(and 2 more such rows)" in message


def test_job_larger_than_the_cluster_is_named(tmp_path):
    path = write(tmp_path, GOOD[0], "9,0,17,vgg11,10,0.5")
    cluster = ClusterSpec(racks=1, machines_per_rack=2, gpus_per_machine=8)
    message = error_of(path, cluster=cluster)
    assert "line 3, column num_gpus: job 9 needs 17 GPUs, more than the cluster's 16" in message
    assert len(load_trace(path, cluster=ClusterSpec(racks=3, machines_per_rack=1))) == 2


def test_check_trace_fits_names_row_job_and_sizes():
    frame = load_trace(
        pd.DataFrame(
            {
                "job_id": [0, 1],
                "arrival_s": [0.0, 1.0],
                "num_gpus": [8, 200],
                "model": ["vgg11", "vgg11"],
                "total_iterations": [1, 1],
                "iter_time_s": [1.0, 1.0],
            }
        )
    )
    with pytest.raises(
        TraceError,
        match=re.escape(
            "jobs.csv, row 1 (0-based position), column num_gpus: job 1 needs 200 GPUs, more than the cluster's 128"
        ),
    ):
        check_trace_fits(frame, ClusterSpec(racks=2), "jobs.csv")
    check_trace_fits(frame, ClusterSpec(racks=4), "jobs.csv")


def test_frame_errors_name_the_row_position():
    raw = pd.DataFrame(
        {
            "job_id": [0, 1],
            "arrival_s": [0.0, 1.0],
            "num_gpus": [1, 0],
            "model": ["vgg11", "vgg11"],
            "total_iterations": [1, 1],
            "iter_time_s": [1.0, 1.0],
        },
        index=[10, 20],
    )
    with pytest.raises(
        TraceError, match=re.escape("<frame>, row 1 (0-based position), column num_gpus: must be at least 1, got 0")
    ):
        validate_trace(raw)


def test_trace_error_is_a_value_error():
    assert issubclass(TraceError, ValueError)


# ---------------------------------------------------------------- writing and shipped files


def test_write_then_load_gives_identical_values(tmp_path):
    rng = np.random.default_rng(7)
    n = 2000
    frame = pd.DataFrame(
        {
            "job_id": rng.permutation(n) * 3,
            "arrival_s": np.sort(rng.exponential(1e4, n)),
            "num_gpus": rng.integers(1, 64, n),
            "model": rng.choice(["vgg11", "resnet50", "bert_large"], n),
            "total_iterations": rng.integers(1, 10**6, n),
            # Floats over nine orders of magnitude, inside the limits (ideal time <= 1e9 s).
            "iter_time_s": np.exp(rng.uniform(np.log(1e-6), np.log(1e3), n)),
        }
    )
    canonical = validate_trace(frame)
    path = write_trace(canonical, tmp_path / "out" / "trace.csv")
    again = load_trace(path)
    pd.testing.assert_frame_equal(again, canonical, check_exact=True)
    assert path.read_bytes() == write_trace(again, tmp_path / "again.csv").read_bytes()


def test_write_trace_refuses_an_invalid_frame(tmp_path):
    bad = pd.DataFrame(
        {
            "job_id": [0],
            "arrival_s": [0.0],
            "num_gpus": [0],
            "model": ["vgg11"],
            "total_iterations": [1],
            "iter_time_s": [1.0],
        }
    )
    with pytest.raises(TraceError, match="num_gpus"):
        write_trace(bad, tmp_path / "bad.csv")
    assert not (tmp_path / "bad.csv").exists()


@pytest.mark.parametrize("name", ["batch-500", "poisson-411", "small"])
def test_required_shipped_traces_exist(name):
    assert name in shipped_traces()


@pytest.mark.parametrize("name", shipped_traces())
def test_every_shipped_trace_loads(name):
    frame = load_trace(name)
    assert len(frame) > 0
    assert frame.attrs["source"] == str(shipped_trace_path(name))


def test_shipped_names_resolve_to_the_repository_traces():
    # In a source checkout or an editable install the files come from the repository's
    # traces/ (a wheel carries the same files as dallygym/_traces).
    path = shipped_trace_path("small")
    assert path.name == "small.csv"
    assert path.read_bytes() == (REPO_TRACES / "small.csv").read_bytes()
