"""The paper's evaluation under each profile, and each open reading flipped alone.

    python benchmarks/profiles.py [--workers 2] [--out benchmarks/results] [--report-only]

Runs Dally and its variants, Tiresias, Tiresias-LAS and Gandiva on the held-out draws
(``traces/heldout``: batch-500 seeds 2001-2003, Poisson seeds 2001-2002) at 2, 4, 8 and 16
racks under each profile of :mod:`dallygym.profiles` (``default``, ``paper``, ``reference``);
then, on one draw of each kind, the default with one reading changed at a time (the
sensitivity table). Writes ``profiles.csv`` (one row per run) and ``profiles.md``:

* the directions the paper reports -- its headline claims (abstract and §VI) at every size and
  its Tables II and III at 8 racks -- judged on every draw: does Dally beat (or, where the paper
  says so, trail) the baseline on that metric?
* the §VI qualitative claims (``benchmarks/compare.py``'s rules) per size;
* the Table II analogue (batch, 8 racks) beside the paper's numbers;
* what sets the makespan (the time by which 99 % of jobs are done, and the job that finishes
  last, when the summary has them).

Every sentence of the report is computed from the runs in ``profiles.csv``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dallygym  # noqa: E402
from compare import PAPER_CLAIMS, PAPER_JCT, SECTION_VI_CLAIMS, _md, claim_holds  # noqa: E402
from dallygym import ClusterSpec  # noqa: E402
from dallygym.compare import compare  # noqa: E402
from dallygym.profiles import PROFILES, READINGS  # noqa: E402
from dallygym.sweep import run_ordered  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "traces" / "heldout"
DRAWS = {"batch-500": [f"batch-500-seed{s}" for s in (2001, 2002, 2003)],
         "poisson-411": [f"poisson-411-seed{s}" for s in (2001, 2002)]}
RACKS = (2, 4, 8, 16)
#: Dally's family, the paper's baselines, and Tiresias-LAS (reported beside Tiresias).
POLICIES = ("dally", "dally-manual", "dally-nowait", "dally-consolidated", "tiresias", "tiresias-las", "gandiva")
#: The policies each reading can change (the others are copied from the default's runs).
AFFECTS = {
    "never_run_nw_sens": ("dally", "dally-manual", "dally-nowait", "dally-consolidated"),
    "tuner_limit": ("dally", "dally-nowait", "dally-consolidated"),
    "tuner_floors": ("dally", "dally-nowait", "dally-consolidated"),
    "tuner_caps": ("dally", "dally-nowait", "dally-consolidated"),
    "gandiva": ("gandiva",),
    "renewal": POLICIES,
}
#: Baselines whose comparison with Dally the paper reports (Tiresias-LAS is shown, not scored).
SCORED = ("tiresias", "gandiva")
METRIC_OF_STAT = {"mean": "jct_mean_s", "median": "jct_median_s", "p95": "jct_p95_s", "p99": "jct_p99_s"}


def flips() -> list[tuple[str, dict]]:
    """Every reading changed alone from the default, to each of its other values."""
    default = PROFILES["default"]
    out = []
    for reading, values in READINGS.items():
        for value in values:
            if value != default[reading]:
                out.append((f"{reading}={value}", {reading: value}))
    return out


def settings() -> list[tuple[str, str, dict | str]]:
    """(kind, name, profile) for the three profiles and every single flip."""
    return [("profile", name, name) for name in PROFILES] + [("flip", name, change) for name, change in flips()]


def _policies_for(kind: str, profile) -> tuple[str, ...]:
    if kind == "profile":
        return POLICIES
    (reading,) = profile
    return AFFECTS[reading]


def _cell(args) -> pd.DataFrame:
    kind, name, profile, draw, racks, policies = args
    frame = compare(str(HELDOUT / f"{draw}.csv"), ClusterSpec(racks, 8, 8), list(policies), profile=profile)
    frame.insert(0, "racks", racks)
    frame.insert(0, "draw", draw)
    frame.insert(0, "trace", draw.split("-seed")[0])
    frame.insert(0, "setting", name)
    frame.insert(0, "kind", kind)
    return frame


def run(workers: int) -> pd.DataFrame:
    cells = []
    for kind, name, profile in settings():
        traces = [d for ds in DRAWS.values() for d in ds] if kind == "profile" else [ds[0] for ds in DRAWS.values()]
        for draw in traces:
            for racks in RACKS:
                cells.append((kind, name, profile, draw, racks, _policies_for(kind, profile)))
    start = time.perf_counter()
    done = []

    def progress(index: int, frame: pd.DataFrame) -> None:
        done.append(index)
        _, name, _, draw, racks, _ = cells[index]
        print(f"[{len(done)}/{len(cells)}] {name} {draw} {racks} racks: {frame['wall_s'].sum():.1f} s "
              f"({time.perf_counter() - start:.0f} s elapsed)", file=sys.stderr, flush=True)

    return pd.concat(run_ordered(_cell, cells, workers, on_result=progress), ignore_index=True)


def completed(runs: pd.DataFrame) -> pd.DataFrame:
    """Every setting with all policies: a flip's unaffected policies taken from the default.
    A profile's Gandiva is named by its model in ``policy`` (``gandiva-timeslice``); here it
    stands in the ``gandiva`` row, the baseline the paper compares with."""
    runs = runs.assign(policy=runs["policy"].replace({"gandiva-timeslice": "gandiva"}))
    default = runs[runs["setting"] == "default"]
    parts = [runs[runs["kind"] == "profile"]]
    for name, sub in runs[runs["kind"] == "flip"].groupby("setting", sort=False):
        have = set(sub["policy"])
        rest = default[default["draw"].isin(sub["draw"].unique()) & ~default["policy"].isin(have)].copy()
        rest["setting"], rest["kind"] = name, "flip"
        parts.append(pd.concat([sub, rest], ignore_index=True))
    return pd.concat(parts, ignore_index=True)


# --- the paper's directions -------------------------------------------------------------------

def paper_directions() -> list[dict]:
    """The comparisons the paper reports, each as (trace, racks or None for every size, metric,
    baseline, whether Dally's value is lower, where it says so)."""
    cells = {}
    for metric, baseline, trace, label, _ in PAPER_CLAIMS:
        if baseline in SCORED:
            cells[(trace, None, metric, baseline)] = {"lower": True, "source": label}
    for trace, table in PAPER_JCT.items():
        for baseline in SCORED:
            for i, stat in enumerate(METRIC_OF_STAT):
                metric = METRIC_OF_STAT[stat]
                if (trace, None, metric, baseline) in cells:
                    continue  # the headline claim covers 8 racks too
                lower = table["dally"][i] < table[baseline][i]
                cells[(trace, 8, metric, baseline)] = {
                    "lower": lower, "source": f"Table {'II' if trace == 'batch-500' else 'III'} {stat} JCT"}
    return [{"trace": t, "racks": r, "metric": m, "baseline": b, **v} for (t, r, m, b), v in cells.items()]


def judge(grid: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, draw, size, paper comparison): Dally / baseline and whether the
    direction is the paper's (a ratio within 0.1 % of 1 counts as not agreeing: no direction)."""
    rows = []
    for (setting, draw, racks), cell in grid.groupby(["setting", "draw", "racks"], sort=False):
        cell = cell.set_index("policy")
        trace = cell["trace"].iloc[0]
        for d in paper_directions():
            if d["trace"] != trace or (d["racks"] is not None and d["racks"] != racks):
                continue
            ratio = cell.loc["dally", d["metric"]] / cell.loc[d["baseline"], d["metric"]]
            agrees = (ratio < 0.999) if d["lower"] else (ratio > 1.001)
            rows.append({"setting": setting, "draw": draw, "trace": trace, "racks": racks, "metric": d["metric"],
                         "baseline": d["baseline"], "paper": "lower" if d["lower"] else "higher",
                         "ratio": ratio, "agrees": agrees, "source": d["source"]})
    return pd.DataFrame(rows)


def claims(grid: pd.DataFrame) -> pd.DataFrame:
    """The §VI claims on every batch draw and size, per setting."""
    rows = []
    for (setting, draw, racks), cell in grid[grid["trace"] == "batch-500"].groupby(["setting", "draw", "racks"],
                                                                                    sort=False):
        for claim, text in SECTION_VI_CLAIMS:
            verdict = claim_holds(claim, cell.set_index("policy"), int(racks))
            if verdict is not None:
                rows.append({"setting": setting, "draw": draw, "racks": racks, "claim": text,
                             "agrees": verdict[0], "why": verdict[1]})
    return pd.DataFrame(rows)


# --- the report ---------------------------------------------------------------------------------

def _share(flags: pd.Series) -> str:
    return f"{int(flags.sum())} of {len(flags)} ({flags.mean():.0%})" if len(flags) else "none"


def settings_table() -> pd.DataFrame:
    return pd.DataFrame([{"reading": r, **{p: str(PROFILES[p][r]) for p in PROFILES}} for r in READINGS])


def report(runs: pd.DataFrame, wall_s: float) -> str:
    grid = completed(runs)
    directions = judge(grid)
    verdicts = claims(grid)
    lines = [
        "# The paper's evaluation under each profile",
        "",
        f"Produced by `python benchmarks/profiles.py` (dallygym {dallygym.__version__}, Python "
        f"{platform.python_version()}, {platform.machine()}); {len(runs)} runs in {wall_s:.0f} s of wall time. "
        "Held-out draws (`traces/heldout`): batch-500 seeds 2001-2003 and Poisson seeds 2001-2002 at "
        f"{', '.join(map(str, RACKS))} racks of 8 machines x 8 GPUs under each profile; the sensitivity rows "
        "run seed 2001 of each kind with one reading changed from the default. Settings (`docs/profiles.md` "
        "gives the sentence behind each):",
        "",
        _md(settings_table()),
        "",
        "## The paper's directions",
        "",
        "A scored cell is one comparison the paper reports on one draw and size: its headline claims "
        "(Dally better than Tiresias and Gandiva on makespan, mean JCT, communication latency and tail "
        "queueing delay; batch and Poisson as the paper gives them) at every size, and its Tables II and III "
        "(mean, median, P95, P99 JCT against Tiresias and Gandiva) at 8 racks, where the paper's own numbers "
        "give the direction. A cell agrees when Dally / baseline is on the paper's side of 1 by more than "
        "0.1 %.",
        "",
    ]
    summary = []
    for (kind, setting), sub in directions.groupby([directions["setting"].map(_kind_of(grid)), "setting"],
                                                   sort=False):
        claim_sub = verdicts[verdicts["setting"] == setting]
        summary.append({"kind": kind, "setting": setting, "directions agree": _share(sub["agrees"]),
                        "batch": _share(sub[sub["trace"] == "batch-500"]["agrees"]),
                        "Poisson": _share(sub[sub["trace"] == "poisson-411"]["agrees"]),
                        "§VI claims agree": _share(claim_sub["agrees"]) if len(claim_sub) else "none"})
    lines += [_md(pd.DataFrame(summary)), ""]
    profile_rows = directions[directions["setting"].isin(PROFILES)]
    by_metric = (profile_rows.groupby(["setting", "metric", "baseline"], sort=False)["agrees"]
                 .agg(lambda s: f"{int(s.sum())}/{len(s)}").unstack("setting").reset_index())
    lines += ["Per comparison (cells agreeing, over draws and sizes):", "", _md(by_metric), ""]
    for profile in PROFILES:
        wrong = directions[(directions["setting"] == profile) & ~directions["agrees"]]
        if len(wrong):
            worst = (wrong.groupby(["trace", "metric", "baseline"])
                     .agg(cells=("ratio", "size"), ratio_min=("ratio", "min"), ratio_max=("ratio", "max"),
                          sizes=("racks", lambda r: ", ".join(map(str, sorted(set(r))))))
                     .reset_index())
            lines += [f"Disagreements under `{profile}` (Dally / baseline over the draws):", "", _md(worst), ""]
    lines += sensitivity_lines(directions, verdicts)
    lines += ["## The §VI claims (batch draws)", "", "Rules as in `benchmarks/compare.py`; cells agreeing over the "
              "three draws, per size:", ""]
    table = (verdicts[verdicts["setting"].isin(PROFILES)]
             .groupby(["claim", "setting", "racks"], sort=False)["agrees"]
             .agg(lambda s: f"{int(s.sum())}/{len(s)}").unstack("racks").reset_index())
    lines += [_md(table), ""]
    lines += ["## Table II analogue (batch, 8 racks)", "",
              "Improvement of Dally over each baseline, 1 − Dally / baseline, as the mean over the three batch "
              "draws (negative: Dally worse); the paper's from its Table II:", ""]
    rows = []
    at8 = grid[(grid["trace"] == "batch-500") & (grid["racks"] == 8)]
    for baseline in ("tiresias", "gandiva"):
        for i, stat in enumerate(METRIC_OF_STAT):
            metric = METRIC_OF_STAT[stat]
            paper = 1 - PAPER_JCT["batch-500"]["dally"][i] / PAPER_JCT["batch-500"][baseline][i]
            row = {"baseline": baseline, "JCT": stat, "the paper's Table II": f"{paper:+.1%}"}
            for profile in PROFILES:
                sub = at8[at8["setting"] == profile].pivot_table(index="draw", columns="policy", values=metric)
                row[profile] = f"{(1 - sub['dally'] / sub[baseline]).mean():+.1%}"
            rows.append(row)
    lines += [_md(pd.DataFrame(rows)), ""]
    if {"completion_p99_s", "makespan_job"} <= set(grid.columns):
        lines += ["## What sets the makespan", "",
                  "Makespan against the time by which 99 % of jobs are done (hours, seed 2001, the default "
                  "profile; Dally, Tiresias and Gandiva), and the job that finishes last:", ""]
        sub = grid[(grid["setting"] == "default") & grid["draw"].str.endswith("2001")
                   & grid["policy"].isin(["dally", "tiresias", "gandiva"])]
        view = sub[["trace", "racks", "policy", "makespan_s", "completion_p99_s", "makespan_job"]].copy()
        view["makespan_h"] = view.pop("makespan_s") / 3600
        view["completion_p99_h"] = view.pop("completion_p99_s") / 3600
        lines += [_md(view, ".1f"), ""]
    return "\n".join(lines)


def sensitivity_lines(directions: pd.DataFrame, verdicts: pd.DataFrame) -> list[str]:
    """Which reading moves which comparison: on the draws the flips ran on (seed 2001 of each
    kind), cells agreeing per comparison under the default and with each reading flipped alone,
    and under the paper profile on the same draws."""
    flipped = [s for s in directions["setting"].unique() if s not in PROFILES]
    if not flipped:
        return []
    draws = directions[directions["setting"] == flipped[0]]["draw"].unique()
    sub = directions[directions["draw"].isin(draws) & directions["setting"].isin(["default", *flipped, "paper"])]
    table = (sub.groupby(["metric", "baseline", "setting"], sort=False)["agrees"]
             .agg(lambda a: f"{int(a.sum())}/{len(a)}").unstack("setting").reset_index())
    table = table[["metric", "baseline", "default", *flipped, "paper"]]
    claim_sub = verdicts[verdicts["draw"].isin(draws) & verdicts["setting"].isin(["default", *flipped, "paper"])]
    claim_table = (claim_sub.groupby(["claim", "setting"], sort=False)["agrees"]
                   .agg(lambda a: f"{int(a.sum())}/{len(a)}").unstack("setting").reset_index())
    claim_table = claim_table[["claim", "default", *flipped, "paper"]]
    return ["## Which reading moves which comparison", "",
            f"On the draws the sensitivity rows ran on ({', '.join(sorted(draws))}), cells agreeing with the "
            "paper's direction per comparison (over the four sizes, and the 8-rack table cells): under the "
            "default, with one reading changed alone, and under the `paper` profile.", "",
            _md(table), "", "The §VI claims on the same batch draw, per reading (over the four sizes):", "",
            _md(claim_table), ""]


def _kind_of(grid: pd.DataFrame):
    kinds = dict(zip(grid["setting"], grid["kind"]))
    return lambda setting: kinds.get(setting, "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--report-only", action="store_true", help="rewrite profiles.md from profiles.csv")
    args = parser.parse_args()
    out = Path(args.out)
    if args.report_only:
        runs = pd.read_csv(out / "profiles.csv")
        wall_s = json.loads((out / "profiles_run.json").read_text())["wall_s"]
    else:
        start = time.perf_counter()
        runs = run(args.workers)
        wall_s = time.perf_counter() - start
        runs.to_csv(out / "profiles.csv", index=False)
        (out / "profiles_run.json").write_text(json.dumps({"wall_s": round(wall_s, 1), "workers": args.workers}) + "\n")
    (out / "profiles.md").write_text(report(runs, wall_s) + "\n")
    print(f"wrote {out / 'profiles.csv'} and {out / 'profiles.md'}")


if __name__ == "__main__":
    main()
