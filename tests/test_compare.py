"""`dallygym compare`: one row per policy with the summary keys, same numbers as simulate."""

from __future__ import annotations

import io
import json

import pandas as pd

from dallygym import ClusterSpec, simulate
from dallygym.cli import main
from dallygym.compare import COMPARE_COLUMNS, compare
from dallygym.policies import POLICIES

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
        assert {"makespan_s", "jct_p99_s", "comm_mean_s", "utilization", "jobs",
                "placements_machine", "placements_rack", "placements_network"} <= set(row)
        assert row["placements_machine"] + row["placements_rack"] + row["placements_network"] >= row["jobs"]


def test_compare_cli_csv_with_chosen_policies(capsys):
    assert main(["compare", *SMALL_ARGS, "--policies", "fifo", "--format", "csv", "--quiet"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert frame["policy"].tolist() == ["fifo"]


def test_compare_unknown_policy_exits_2_before_running(capsys):
    assert main(["compare", *SMALL_ARGS, "--policies", "fifo", "nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "known policies" in err and err.count("\n") == 1
