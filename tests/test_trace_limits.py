"""Edge values of the trace loader: every one is refused with file, line and column (exit 2 from
the command line, one line, no traceback) or simulated exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dallygym
from dallygym.experiments.cli import main
from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.trace import TRACE_COLUMNS, TraceError, load_trace

HEADER = ",".join(TRACE_COLUMNS)


def write(tmp_path, *rows: str, raw: bytes | None = None):
    path = tmp_path / "t.csv"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


REFUSED = [
    # (rows, line, column or None, words in the message)
    (["0,0,2,resnet50,10,1.0,", "1,0,2,resnet50,10,1.0"], 2, None, "7 fields"),
    (["0,0,2,resnet50,10,1.0", "1,0,2,resnet50,10,1.0,"], 3, None, "7 fields"),
    (["0,0,18446744073709551615,resnet50,10,1.0"], 2, "num_gpus", "too large"),
    (["0,0,1,resnet50,9007199254740993,1.0"], 2, "total_iterations", "too large"),
    (["0,0,1,resnet50,1e20,1.0"], 2, "total_iterations", "too large"),
    (["9223372036854775808,0,1,resnet50,10,1.0"], 2, "job_id", "too large"),
    (["0,1e18,1,resnet50,10,1.8"], 2, "arrival_s", "at most"),
    (["0,0,1,resnet50,10,1e308"], 2, "iter_time_s", "more than"),
    (["0,0,1,resnet50,1,1e308"], 2, "iter_time_s", "more than"),
    (["0,0,1,resnet50,9007199254740992,1e300"], 2, "iter_time_s", "more than"),
    (["0,0,1,resnet50,10,5e-324"], 2, "iter_time_s", "at least"),
    (["0,0,1,resnet50,10,inf"], 2, "iter_time_s", "finite"),
    (["0,0,1,resnet50\x00,10,1.0"], 2, "model", "unknown model"),
    (["0,0,1,\x00resnet50,10,1.0"], 2, "model", "unknown model"),
    (["0,0,1,resnet50,10,1.0\x00"], 2, "iter_time_s", "expected a number"),
]


@pytest.mark.parametrize(
    "rows, line, column, words", REFUSED, ids=[f"{i}-{c or 'fields'}" for i, (_, _, c, _) in enumerate(REFUSED)]
)
def test_edge_values_are_refused_naming_file_line_and_column(tmp_path, rows, line, column, words):
    path = write(tmp_path, *rows)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    where = f"{path}, line {line}" + (f", column {column}" if column else "")
    assert message.startswith(where) and words in message
    assert "\n" not in message and "\x00" not in message  # one printable line


@pytest.mark.parametrize(
    "rows, line, column, words",
    REFUSED[:1] + REFUSED[2:3] + REFUSED[6:8] + REFUSED[12:13],
    ids=["trailing-comma", "uint64-gpus", "huge-arrival", "huge-iter-time", "nul-model"],
)
def test_command_line_exits_2_with_one_line_for_edge_values(tmp_path, capsys, rows, line, column, words):
    path = write(tmp_path, *rows)
    assert main(["simulate", "--trace", str(path), "--racks", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dallygym: error: {path}, line {line}")
    assert "Traceback" not in err


def test_largest_allowed_values_simulate_without_error(tmp_path):
    path = write(tmp_path, "0,1e9,1,resnet50,1,1e9", "9007199254740992,0,1,resnet50,1000,1e-6")
    result = dallygym.simulate(load_trace(path), ClusterSpec(1, 1, 1), policy="fifo")
    jobs = result.jobs
    assert (jobs["jct_s"] >= jobs["ideal_s"]).all() and (jobs["comm_s"] >= 0).all()
    assert np.isfinite(result.summary["makespan_s"])


def test_jct_is_never_below_ideal_time_even_by_rounding(tmp_path):
    # 3 iterations of 0.1 s: the ideal time is 3 x 0.1 = 0.30000000000000004 s, while the
    # engine's 3 / (1 / 0.1) rounds to 0.3.
    path = write(tmp_path, "0,0,1,resnet50,3,0.1")
    jobs = dallygym.simulate(load_trace(path), ClusterSpec(1, 1, 1), policy="fifo").jobs
    assert jobs.loc[0, "ideal_s"] == 3 * 0.1
    assert jobs.loc[0, "jct_s"] >= jobs.loc[0, "ideal_s"]
    assert jobs.loc[0, "comm_s"] == 0.0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrival=st.floats(0, 1e9, allow_nan=False),
    iterations=st.integers(1, 10**6),
    iter_time=st.floats(1e-6, 10.0, allow_nan=False),
)
def test_jct_at_least_ideal_exactly_for_any_allowed_single_job(arrival, iterations, iter_time):
    frame = pd.DataFrame(
        [
            {
                "job_id": 0,
                "arrival_s": arrival,
                "num_gpus": 1,
                "model": "resnet50",
                "total_iterations": iterations,
                "iter_time_s": iter_time,
            }
        ]
    )
    jobs = dallygym.simulate(frame, ClusterSpec(1, 1, 1), policy="fifo").jobs
    assert jobs.loc[0, "jct_s"] >= jobs.loc[0, "ideal_s"]
