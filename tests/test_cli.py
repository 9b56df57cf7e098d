"""The command line: outputs and one-line errors with exit status 2 on bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pandas as pd
import pytest

from dallygym.experiments.cli import main

SMALL = ["--trace", "small", "--racks", "2", "--machines-per-rack", "2"]
JSON_KEYS = [
    "makespan_s",
    "jct_mean_s",
    "jct_median_s",
    "jct_p95_s",
    "jct_p99_s",
    "queue_mean_s",
    "queue_p95_s",
    "queue_p99_s",
    "comm_mean_s",
    "utilization",
    "jobs",
]


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
    [
        (["--racks", "0"], "racks"),
        (["--gpus-per-machine", "-8"], "gpus_per_machine"),
        (["--policy", "nope"], "nope"),
        (["--trace", "no-such-trace"], "no-such-trace"),
        (["--lease-s", "0"], "lease_s"),
        (["--latency", "nope"], "nope"),
    ],
)
def test_bad_parameters_exit_2_naming_the_parameter(capsys, args, word):
    code, _, err = run_cli(capsys, "simulate", *args)
    assert code == 2
    assert word in err and err.count("\n") == 1


def test_entry_point_exit_status_and_no_traceback(tmp_path):
    path = write_trace(tmp_path, HEADER + "0,0,2,resnet50,-5,1.0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "dallygym.experiments.cli", "simulate", "--trace", path], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "total_iterations" in proc.stderr and "Traceback" not in proc.stderr


def _checksums(directory):
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_a_failed_out_run_leaves_the_previous_output_intact(capsys, tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert run_cli(capsys, "simulate", *SMALL, "--policy", "fifo", "--out", str(out))[0] == 0
    before = _checksums(out)
    from dallygym.sim.metrics import PLOT_FILES  # (the figures, when matplotlib is installed)

    tables = {"jobs.csv", "timeline.csv", "summary.csv"}
    assert tables <= set(before) <= tables | PLOT_FILES | {"settings.json"}

    real = pd.DataFrame.to_csv

    def fail_on_timeline(self, path=None, *args, **kwargs):
        if path is not None and str(path).endswith("timeline.csv"):
            raise OSError(28, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", fail_on_timeline)
    code, _, err = run_cli(capsys, "simulate", *SMALL, "--policy", "dally", "--out", str(out))
    assert code == 2 and "No space left" in err and err.count("\n") == 1
    assert _checksums(out) == before  # the fifo run's files, byte for byte: no mix
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no staging directory left behind

    monkeypatch.setattr(pd.DataFrame, "to_csv", real)
    assert run_cli(capsys, "simulate", *SMALL, "--policy", "dally", "--out", str(out))[0] == 0
    after = _checksums(out)
    assert after.keys() == before.keys() and after["summary.csv"] != before["summary.csv"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_out_refuses_a_directory_holding_other_files(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "simulate", *SMALL, "--out", str(tmp_path))
    assert code == 2 and "notes.txt" in err and err.count("\n") == 1
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_evaluate_table_is_in_hours_like_compare_and_csv_keeps_seconds(capsys):
    args = [
        "evaluate",
        "--agent",
        "dally",
        "--agent",
        "fifo",
        "--trace",
        "small",
        "--racks",
        "2",
        "--machines-per-rack",
        "2",
    ]
    assert main([*args, "--format", "csv"]) == 0
    seconds = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert "jct_mean_s" in seconds.columns
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    assert "jct_mean_h" in header and "makespan_h" in header
    assert not [c for c in header if c.endswith("_s")]
    jct = lines[1].split()[header.index("jct_mean_h")]
    assert jct == f"{seconds.loc[0, 'jct_mean_s'] / 3600:,.1f}"
    # The same convention as compare's table.
    assert (
        main(
            [
                "compare",
                "--trace",
                "small",
                "--racks",
                "2",
                "--machines-per-rack",
                "2",
                "--policies",
                "dally",
                "fifo",
                "--quiet",
            ]
        )
        == 0
    )
    compared = capsys.readouterr().out.splitlines()
    assert compared[0].split()[1:] == header[1:]
    assert compared[1].split()[1:] == lines[1].split()[1:]
