"""The command line: outputs and one-line errors with exit status 2 on bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pandas as pd
import pytest

from dallygym.cli import main

SMALL = ["--trace", "small", "--racks", "2", "--machines-per-rack", "2"]
JSON_KEYS = ["makespan_s", "jct_mean_s", "jct_median_s", "jct_p95_s", "jct_p99_s", "queue_mean_s",
             "queue_p95_s", "queue_p99_s", "comm_mean_s", "utilization", "jobs"]


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_trace(tmp_path, body: str):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    return str(path)


HEADER = "job_id,arrival_s,num_gpus,model,total_iterations,iter_time_s\n"


def test_simulate_json_has_the_summary_keys_as_floats(capsys):
    code, out, err = run_cli(capsys, "simulate", "--policy", "fifo", *SMALL, "--format", "json")
    assert code == 0, err
    summary = json.loads(out)
    for key in JSON_KEYS:
        assert key in summary
        assert isinstance(summary[key], int if key == "jobs" else float), key
    assert summary["jobs"] == 60


def test_simulate_table_and_csv_agree(capsys):
    code, table, _ = run_cli(capsys, "simulate", *SMALL)
    assert code == 0 and "makespan_s" in table and "jct_p99_s" in table
    code, csv, _ = run_cli(capsys, "simulate", *SMALL, "--format", "csv")
    frame = pd.read_csv(io.StringIO(csv))
    code, js, _ = run_cli(capsys, "simulate", *SMALL, "--format", "json")
    assert frame.loc[0, "makespan_s"] == json.loads(js)["makespan_s"]


def test_simulate_writes_per_job_and_timeline_files(capsys, tmp_path):
    code, _, _ = run_cli(capsys, "simulate", *SMALL, "--format", "json", "--out", str(tmp_path))
    assert code == 0
    jobs = pd.read_csv(tmp_path / "jobs.csv")
    assert len(jobs) == 60 and {"jct_s", "queue_s", "comm_s", "preemptions"} <= set(jobs.columns)
    assert (tmp_path / "timeline.csv").exists() and (tmp_path / "summary.csv").exists()


def test_latency_table_has_paper_columns(capsys):
    code, out, _ = run_cli(capsys, "latency", "--format", "csv")
    assert code == 0
    frame = pd.read_csv(io.StringIO(out))
    assert list(frame.columns[:4]) == ["model", "machine_pct", "rack_pct", "network_pct"]
    assert frame["model"].tolist() == ["vgg11", "alexnet", "mobilenet_v3", "resnet18", "resnet50", "bert_large"]


@pytest.mark.parametrize(
    "body, words",
    [
        (HEADER + "0,0,2,resnet50,10,abc\n", ["bad.csv", "iter_time_s"]),
        (HEADER + "0,0,2,lenet,10,1.0\n", ["bad.csv", "lenet", "resnet50"]),
        ("job_id,arrival_s,num_gpus,model,total_iterations\n0,0,2,resnet50,10\n", ["bad.csv", "iter_time_s"]),
        (HEADER + "0,0,2000,resnet50,10,1.0\n", ["2000", "GPU"]),
    ],
    ids=["non-numeric", "unknown-model", "missing-column", "larger-than-cluster"],
)
def test_bad_trace_exits_2_with_one_line_naming_the_problem(capsys, tmp_path, body, words):
    path = write_trace(tmp_path, body)
    code, out, err = run_cli(capsys, "simulate", "--trace", path, "--racks", "2")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("dallygym: error: ")
    for word in words:
        assert word in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args, word",
    [(["--racks", "0"], "racks"), (["--gpus-per-machine", "-8"], "gpus_per_machine"),
     (["--policy", "nope"], "nope"), (["--trace", "no-such-trace"], "no-such-trace"),
     (["--lease-s", "0"], "lease_s"), (["--latency", "nope"], "nope")],
)
def test_bad_parameters_exit_2_naming_the_parameter(capsys, args, word):
    code, _, err = run_cli(capsys, "simulate", *args)
    assert code == 2
    assert word in err and err.count("\n") == 1


def test_entry_point_exit_status_and_no_traceback(tmp_path):
    path = write_trace(tmp_path, HEADER + "0,0,2,resnet50,-5,1.0\n")
    proc = subprocess.run([sys.executable, "-m", "dallygym.cli", "simulate", "--trace", path],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "total_iterations" in proc.stderr and "Traceback" not in proc.stderr
