"""`dallygym compare`: one row per policy with the summary keys, same numbers as simulate."""

from __future__ import annotations

import io
import json

import pandas as pd

from dallygym import ClusterSpec, simulate
from dallygym.experiments.cli import main
from dallygym.experiments.compare import COMPARE_COLUMNS, compare
from dallygym.sim.policies import POLICIES

SMALL = ClusterSpec(2, 2, 8)
SMALL_ARGS = ["--trace", "small", "--racks", "2", "--machines-per-rack", "2"]


def test_compare_rows_equal_individual_simulations():
    names = list(POLICIES)
    frame = compare("small", SMALL, names)
    assert frame["policy"].tolist() == names
    for name in names:
        row = frame[frame["policy"] == name].iloc[0]
        summary = simulate("small", SMALL, policy=name).summary
        assert {k: row[k] for k in COMPARE_COLUMNS} == summary


def test_compare_cli_json_has_one_row_per_policy_with_summary_and_placements(capsys):
    assert main(["compare", *SMALL_ARGS, "--format", "json", "--quiet"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == list(POLICIES)
    for row in rows:
        assert {
            "makespan_s",
            "jct_p99_s",
            "comm_mean_s",
            "utilization",
            "jobs",
            "placements_machine",
            "placements_rack",
            "placements_network",
        } <= set(row)
        assert row["placements_machine"] + row["placements_rack"] + row["placements_network"] >= row["jobs"]


def test_compare_cli_csv_with_chosen_policies(capsys):
    assert main(["compare", *SMALL_ARGS, "--policies", "fifo", "--format", "csv", "--quiet"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert frame["policy"].tolist() == ["fifo"]


def test_compare_unknown_policy_exits_2_before_running(capsys):
    assert main(["compare", *SMALL_ARGS, "--policies", "fifo", "nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "known policies" in err and err.count("\n") == 1


def _tiny_trace(path):
    """Three small jobs: at 16 racks (1,024 GPUs) no job can ever wait for another."""
    path.write_text(
        "job_id,arrival_s,num_gpus,model,total_iterations,iter_time_s\n"
        "0,0.0,1,mobilenet_v3,1000,0.05\n"
        "1,10.0,2,bert_large,500,0.4\n"
        "2,20.0,8,resnet50,800,0.2\n"
    )
    return str(path)


def test_compare_notes_on_stderr_when_the_cluster_never_contends(tmp_path, capsys):
    trace = _tiny_trace(tmp_path / "tiny.csv")
    assert (
        main(
            [
                "compare",
                "--trace",
                trace,
                "--racks",
                "16",
                "--policies",
                "dally",
                "fifo",
                "tiresias",
                "--format",
                "csv",
                "--quiet",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    frame = pd.read_csv(io.StringIO(out))  # stdout stays clean csv
    assert (frame["queue_mean_s"] == 0).all()
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "never contends" in notes[0] and "--racks" in notes[0]


def test_compare_gives_no_note_when_policies_contend(capsys):
    assert main(["compare", *SMALL_ARGS, "--policies", "dally", "fifo", "--format", "csv", "--quiet"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_contention_note_for_identical_rows_with_queueing():
    from dallygym.experiments.compare import contention_note

    row = {k: 1.0 for k in COMPARE_COLUMNS}
    frame = pd.DataFrame([{"policy": "a", **row}, {"policy": "b", **row}])
    assert "same results" in contention_note(frame, ClusterSpec(8))
    frame.loc[1, "jct_mean_s"] = 2.0
    assert contention_note(frame, ClusterSpec(8)) is None
    # Rows that differ (here in migrations) but where nobody waited, up to float noise.
    frame["queue_mean_s"] = 8e-13
    assert "never contends" in contention_note(frame, ClusterSpec(8))


def test_compare_table_is_in_hours_with_one_decimal(capsys):
    assert main(["compare", *SMALL_ARGS, "--policies", "fifo", "--quiet"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert "jct_mean_h" in header and "_s " not in header + " "
    frame = compare("small", SMALL, ["fifo"])
    assert f"{frame.loc[0, 'jct_mean_s'] / 3600:,.1f}" in row.split()
