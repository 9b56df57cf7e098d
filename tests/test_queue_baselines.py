"""agents/queue_baselines.py and agents/guard_sweep.py: the rows they compute."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from helpers import load_script

from dallygym import ClusterSpec, simulate
from dallygym.sim.policies import POLICIES
from dallygym.sim.trace import generate_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
baselines = load_script("agents/queue_baselines.py", "queue_baselines_under_test")
guard_sweep = load_script("agents/guard_sweep.py", "guard_sweep_under_test")


def test_a_cell_has_every_row_and_constant_zero_is_the_offer_rules_order():
    trace = generate_trace("small", seed=11)
    rows = baselines.run_cell(
        ("other", trace, 2), "DallyQueueSmall-v0", (), machines_per_rack=2, offer_rules=("dally", "protected-remaining")
    )
    by_row = {row["row"]: row for row in rows}
    assert set(POLICIES) | {
        "lower bound",
        "constant-0",
        "random picks",
        "teacher",
        "constant-0 (protected-remaining offers)",
    } <= set(by_row)
    assert by_row["constant-0"]["jct_mean_h"] == by_row["dally"]["jct_mean_h"]
    assert by_row["constant-0"]["makespan_h"] == by_row["dally"]["makespan_h"]
    native = by_row["protected-remaining"]
    assert by_row["constant-0 (protected-remaining offers)"]["jct_mean_h"] == native["jct_mean_h"]
    assert by_row["dally"]["jct_vs_dally"] == 1.0
    # The best safe heuristic is the lowest mean JCT among the native rows within +1 % makespan.
    safe = [r for r in rows if r["row_kind"] == "heuristic" and r["makespan_vs_dally"] <= 1.01]
    assert by_row["dally"]["best_safe"] == min(safe, key=lambda r: r["jct_mean_h"])["row"]
    assert all(r["jct_vs_bound"] >= 1.0 - 1e-12 for r in rows)


def _summary(jct: float, makespan: float) -> dict:
    return {"jct_mean_s": jct, "makespan_s": makespan}


def test_the_verdict_is_worked_out_from_the_rows():
    results = {
        "dally": _summary(100, 100),
        "safe": _summary(50, 100.5),
        "fast-but-long": _summary(30, 102),
        "lower bound": _summary(10, 90),
        "good": _summary(44, 100.9),
        "short": _summary(46, 100),
        "long": _summary(40, 101.5),
    }
    kinds = {
        "dally": "heuristic",
        "safe": "heuristic",
        "fast-but-long": "heuristic",
        "lower bound": "bound",
        "good": "agent",
        "short": "agent",
        "long": "initial",
    }
    rows = {r["row"]: r for r in baselines.verdict_rows("batch", "t", 2, results, kinds)}
    assert rows["good"]["best_safe"] == "safe" and rows["good"]["target"] == 0.9
    assert rows["good"]["jct_vs_best_safe"] == 44 / 50
    assert rows["good"]["goal_met"] is True  # 44 <= 0.9 x 50, makespan +0.9 %
    assert rows["short"]["goal_met"] is False  # 46 > 45
    assert rows["long"]["goal_met"] is False  # makespan +1.5 %
    assert rows["safe"]["goal_met"] is None and rows["lower bound"]["makespan_ok"] is None
    assert rows["good"]["jct_vs_bound"] == 4.4
    # 16 racks: no worse than the best safe heuristic.
    rows16 = {r["row"]: r for r in baselines.verdict_rows("batch", "t", 16, results, kinds)}
    assert rows16["short"]["target"] == 1.0 and rows16["short"]["goal_met"] is True
    # Safe heuristics within 2 % of each other: the cell does not contend, matching is enough.
    flat = {
        "dally": _summary(100, 100),
        "other": _summary(99, 100),
        "lower bound": _summary(90, 99),
        "agent": _summary(100.9, 100),
    }
    rows_flat = {
        r["row"]: r
        for r in baselines.verdict_rows(
            "batch",
            "t",
            2,
            flat,
            {"dally": "heuristic", "other": "heuristic", "lower bound": "bound", "agent": "agent"},
        )
    }
    assert rows_flat["agent"]["contends"] is False and rows_flat["agent"]["goal_met"] is True


def test_the_closest_table_names_the_best_safe_row_of_any_kind_and_counts_those_at_target():
    results = {
        "dally": _summary(100, 100),
        "safe": _summary(50, 100.5),
        "fast-but-long": _summary(30, 102),
        "lower bound": _summary(10, 90),
        "teacher": _summary(43, 100.2),
        "good": _summary(44, 100.9),
        "short": _summary(46, 100),
    }
    kinds = {"dally": "heuristic", "safe": "heuristic", "fast-but-long": "heuristic", "lower bound": "bound"}
    kinds.update({"teacher": "teacher", "good": "agent", "short": "agent"})
    frame = pd.DataFrame(baselines.verdict_rows("batch", "t", 2, results, kinds))
    (row,) = baselines.closest_table(frame).to_dict("records")
    # Safe rows: dally, safe, teacher, good, short; at most 0.9 x 50 = 45: teacher (43) and good (44).
    assert row["closest safe row"] == "teacher" and row["JCT / best safe"] == 43 / 50
    assert row["safe rows at target"] == "2/5" and row["best safe"] == "safe" and row["best safe / bound"] == 5.0
    assert row["target"] == 0.9 and row["racks"] == 2 and row["trace"] == "t"


def test_cells_name_the_held_out_draws_and_the_contending_real_sizes():
    cells = baselines.default_cells()
    assert ("batch", "batch-500:2001", 2) in cells and ("poisson", "poisson-411:2003", 16) in cells
    assert len([c for c in cells if c[0] != "real"]) == 24
    assert baselines.parse_cell("heldout/batch-500-seed2002:4") == ("batch", "batch-500:2002", 4)
    assert baselines.target_factor("poisson", 8) == 1.0 and baselines.target_factor("batch", 8) == 0.9


def test_guard_sweep_writes_each_episode_relative_to_dally(tmp_path):
    out = tmp_path / "sweep.md"
    assert (
        guard_sweep.main(
            [
                "--seeds",
                "5001",
                "--shares",
                "0.25",
                "--guards",
                "0.25",
                "none",
                "--racks",
                "16",
                "--workers",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = pd.read_csv(out.with_suffix(".csv"), keep_default_na=False)
    trace = generate_trace("batch-500", seed=5001)
    spec = ClusterSpec(16, 8, 8)
    dally = simulate(trace, spec, policy="dally").summary
    for guard in (0.25, None):
        summary = baselines.through_env("DallyQueue-v0", trace, spec, baselines.guarded_teacher, guard_leases=guard)
        change = round(100 * (summary["jct_mean_s"] / dally["jct_mean_s"] - 1), 1)
        label = "none" if guard is None else "0.25"
        row = rows[rows.guard_leases.astype(str) == label]
        assert row["jct_vs_dally_%"].tolist() == [change]
    assert "Every episode" in out.read_text()


#: One cell's summaries: Dally, a safe heuristic, the bound, an agent within the goal and one
#: whose makespan is too long; and the kinds of the rows.
CELL = {
    "dally": _summary(100, 100),
    "safe": _summary(50, 100.5),
    "lower bound": _summary(10, 90),
    "good": _summary(44, 100.9),
    "long": _summary(40, 101.5),
}
CELL_KINDS = {"dally": "heuristic", "safe": "heuristic", "lower bound": "bound", "good": "agent", "long": "initial"}


def test_the_tables_render_again_from_the_csv(tmp_path):
    results, kinds = dict(CELL), dict(CELL_KINDS)
    frame = pd.DataFrame(baselines.verdict_rows("batch", "t", 2, results, kinds))
    csv = tmp_path / "grid.csv"
    frame.to_csv(csv, index=False, float_format="%.6g")
    out = tmp_path / "grid.md"
    assert baselines.main(["--from-csv", str(csv), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| good | agent |" in text and "| 1/1 |" in text  # good meets the goal on its one cell
    assert "| lower bound | 0.10 | 0.20 | 1.00 | 0.90 | ✗ |" not in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["lower bound"].endswith("|  |  |")  # no makespan verdict for the bound
    sizes = (tmp_path / "grid_sizes.md").read_text()
    assert "| batch | 2 | good | 0.880 |" in sizes and "| batch | 2 | long |" in sizes


def test_rows_of_an_earlier_grid_are_reused_and_only_the_natives_run_again(tmp_path):
    trace = generate_trace("small", seed=11)
    cell = ("other", trace, 2)
    first = pd.DataFrame(baselines.run_cell(cell, "DallyQueueSmall-v0", (), machines_per_rack=2))
    csv = tmp_path / "grid.csv"
    first.to_csv(csv, index=False, float_format="%.10g")
    reuse = baselines.reusable_rows(baselines.read_grid(csv))
    assert set(reuse) == {("other", 2)}
    assert "random picks" in reuse[("other", 2)] and "dally" not in reuse[("other", 2)]
    # A row reused is not played: change its numbers in the file and they come back as written.
    reuse[("other", 2)]["random picks"] = {"jct_mean_s": 7200.0, "makespan_s": 36000.0}
    again = pd.DataFrame(baselines.run_cell(cell, "DallyQueueSmall-v0", (), machines_per_rack=2, reuse=reuse))
    by_row = again.set_index("row")
    assert by_row.loc["random picks", "jct_mean_h"] == 2.0 and by_row.loc["random picks", "makespan_h"] == 10.0
    # Every other row is as before: the natives ran again (exactly), the rest came from the file.
    same = first.set_index("row").drop(index="random picks")
    pd.testing.assert_frame_equal(
        by_row.drop(index="random picks")[["jct_mean_h", "makespan_h", "row_kind"]],
        same[["jct_mean_h", "makespan_h", "row_kind"]],
        rtol=1e-9,
    )


def test_verdicts_are_judged_again_from_the_numbers_and_a_rounded_tie_still_ties():
    # The best safe heuristic's own schedule read back from a CSV at six digits: a tie, not a miss.
    results = {**CELL, "same": _summary(50 * (1 + 4e-7), 100.5)}
    kinds = {**CELL_KINDS, "same": "agent"}
    frame = pd.DataFrame(baselines.verdict_rows("poisson", "t", 16, results, kinds))
    by_row = frame.set_index("row")
    assert by_row.loc["same", "goal_met"] and by_row.loc["good", "goal_met"] and not by_row.loc["long", "goal_met"]
    again = baselines.judged_again(frame)
    pd.testing.assert_frame_equal(again, frame, rtol=1e-12)
