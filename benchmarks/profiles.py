"""The paper's evaluation under each profile, and each open reading flipped alone.

    python benchmarks/profiles.py [--workers 2] [--out benchmarks/results]
        [--flip-bases default [paper] [reference]] [--flip-draws first|all] [--count]
    python benchmarks/profiles.py --report-only [--runs-from DIR] [--out DIR]

Runs Dally and its variants, Tiresias, Tiresias-LAS and Gandiva on the held-out draws
(``traces/heldout``: batch-500 seeds 2001-2003, Poisson seeds 2001-2002) at 2, 4, 8 and 16
racks under each profile of :mod:`dallygym.sim.profiles` (``default``, ``paper``, ``reference``);
then each profile named in ``--flip-bases`` (the default alone unless told) with one reading
changed at a time, on the first draw of each kind (``--flip-draws first``, the sensitivity
table) or on every draw (``all``). A flip runs only the policies its reading can change
(``AFFECTS``) and takes the others from its base profile's runs. ``--count`` prints the grid's
size and runs nothing. Writes ``profiles.csv`` (one row per run, with the run's largest JCT, its
job and that job's share of the run's communication latency) and ``profiles.md``:

* the directions the paper reports -- its headline claims (abstract and §VI) at every size and
  its Tables II and III at 8 racks -- judged on every draw: does Dally beat (or, where the paper
  says so, trail) the baseline on that metric?
* the §VI qualitative claims (``benchmarks/compare.py``'s rules) per size;
* the Table II analogue (batch, 8 racks) beside the paper's numbers;
* what sets the makespan (the time by which 99 % of jobs are done, and the job that finishes
  last, when the summary has them);
* the remaining disagreements: every scored cell that disagrees under each profile, with the
  causes measured from the runs (a near-tie, a reading that flips it, one job setting the
  makespan, one job setting each policy's makespan, one job deciding a mean, the draw,
  queueing) or "unexplained" (:func:`disagreements`).

``--report-only`` rewrites ``profiles.md`` in ``--out`` from the ``profiles.csv`` and
``profiles_run.json`` in ``--runs-from`` (default: ``--out``).

Every sentence of the report is computed from the runs in ``profiles.csv``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import CLOSE_WITHIN, MUCH_WORSE, PAPER_CLAIMS, PAPER_JCT, SECTION_VI_CLAIMS, _md, claim_holds  # noqa: E402

import dallygym  # noqa: E402
from dallygym import ClusterSpec  # noqa: E402
from dallygym.experiments.compare import compare  # noqa: E402
from dallygym.experiments.sweep import run_ordered  # noqa: E402
from dallygym.sim.profiles import PROFILES, READINGS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "traces" / "heldout"
DRAWS = {
    "batch-500": [f"batch-500-seed{s}" for s in (2001, 2002, 2003)],
    "poisson-411": [f"poisson-411-seed{s}" for s in (2001, 2002)],
}
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


#: The profiles flips start from when none are named (``--flip-bases``), and the draws they run on
#: (``--flip-draws``): the default on the first draw of each kind, the sensitivity table.
FLIP_BASES = ("default",)
FLIP_DRAWS = "first"


def flip_name(base: str, reading: str, value) -> str:
    """A flip's setting name: ``never_run_nw_sens=one`` from the default (the name the first
    sensitivity runs had), ``paper+never_run_nw_sens=zero`` from another profile."""
    return f"{reading}={value}" if base == "default" else f"{base}+{reading}={value}"


def flip_kind(base: str) -> str:
    """A flip's ``kind`` in ``profiles.csv``: ``flip`` from the default, ``flip-paper`` from ``paper``."""
    return "flip" if base == "default" else f"flip-{base}"


def flip_base(setting: str) -> str | None:
    """The profile a setting flips one reading of (None for a profile itself)."""
    if setting in PROFILES:
        return None
    return setting.split("+", 1)[0] if "+" in setting else "default"


def flips(base: str = "default") -> list[tuple[str, str, dict]]:
    """Every reading changed alone from ``base``'s readings, to each of its other values:
    (setting name, the reading changed, the full readings)."""
    readings = PROFILES[base]
    out = []
    for reading, values in READINGS.items():
        for value in values:
            if value != readings[reading]:
                out.append((flip_name(base, reading, value), reading, {**readings, reading: value}))
    return out


def settings(bases=FLIP_BASES) -> list[tuple[str, str, str | dict, tuple[str, ...]]]:
    """(kind, name, profile, policies run) for the three profiles and every single flip from
    each profile in ``bases``. A flip runs only the policies its reading can change
    (``AFFECTS``); :func:`completed` takes the others from its base profile's runs."""
    out = [("profile", name, name, POLICIES) for name in PROFILES]
    for base in bases:
        out += [(flip_kind(base), name, readings, AFFECTS[reading]) for name, reading, readings in flips(base)]
    return out


def plan(bases=FLIP_BASES, flip_draws: str = FLIP_DRAWS) -> list[tuple]:
    """The cells to run, one per (setting, draw, size): a profile on every draw, a flip on every
    draw (``flip_draws="all"``) or on the first draw of each kind (``"first"``)."""
    every = [d for ds in DRAWS.values() for d in ds]
    first = [ds[0] for ds in DRAWS.values()]
    cells = []
    for kind, name, profile, policies in settings(bases):
        draws = every if kind == "profile" or flip_draws == "all" else first
        cells += [(kind, name, profile, draw, racks, policies) for draw in draws for racks in RACKS]
    return cells


def largest_jct(jobs: pd.DataFrame) -> dict:
    """The job with the largest JCT in one run's per-job frame (on a tie, the lowest job id):
    its JCT, its id, and its share of the run's total communication latency (0 when the run
    has none). With the mean, the largest JCT gives the mean without that job:
    (n·mean − max) / (n − 1)."""
    jobs = jobs.sort_values("job_id", kind="stable")
    row = jobs.loc[jobs["jct_s"].idxmax()]
    total = float(jobs["comm_s"].sum())
    return {
        "jct_max_s": float(row["jct_s"]),
        "jct_max_job": int(row["job_id"]),
        "jct_max_job_comm_share": float(row["comm_s"]) / total if total > 0 else 0.0,
    }


def _cell(args) -> pd.DataFrame:
    kind, name, profile, draw, racks, policies = args
    results = {}
    frame = compare(
        str(HELDOUT / f"{draw}.csv"), ClusterSpec(racks, 8, 8), list(policies), profile=profile, results=results
    )
    largest = pd.DataFrame([largest_jct(results[policy].jobs) for policy in frame["policy"]], index=frame.index)
    frame = pd.concat([frame.drop(columns="wall_s"), largest, frame[["wall_s"]]], axis=1)
    frame.insert(0, "racks", racks)
    frame.insert(0, "draw", draw)
    frame.insert(0, "trace", draw.split("-seed")[0])
    frame.insert(0, "setting", name)
    frame.insert(0, "kind", kind)
    return frame


def reusable(cells: list[tuple], earlier: pd.DataFrame | None) -> dict[int, pd.DataFrame]:
    """The cells (by position in ``cells``) an earlier ``profiles.csv`` already holds: rows of the
    same kind, setting, draw and size, one per policy the cell runs."""
    if earlier is None:
        return {}
    groups = dict(tuple(earlier.groupby(["kind", "setting", "draw", "racks"], sort=False)))
    found = {}
    for i, (kind, name, _, draw, racks, policies) in enumerate(cells):
        rows = groups.get((kind, name, draw, racks))
        if rows is not None and len(rows) == len(policies):
            found[i] = rows
    return found


def run(
    workers: int, bases=FLIP_BASES, flip_draws: str = FLIP_DRAWS, earlier: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Every cell of the grid (:func:`plan`), in its order: those an ``earlier`` run holds taken
    from it (:func:`reusable`), the others played."""
    cells = plan(bases, flip_draws)
    frames = reusable(cells, earlier)
    todo = [i for i in range(len(cells)) if i not in frames]
    start = time.perf_counter()
    done = []

    def progress(index: int, frame: pd.DataFrame) -> None:
        done.append(index)
        _, name, _, draw, racks, _ = cells[todo[index]]
        print(
            f"[{len(done)}/{len(todo)}] {name} {draw} {racks} racks: {frame['wall_s'].sum():.1f} s "
            f"({time.perf_counter() - start:.0f} s elapsed)",
            file=sys.stderr,
            flush=True,
        )

    played = run_ordered(_cell, [cells[i] for i in todo], workers, on_result=progress) if todo else []
    frames.update(zip(todo, played))
    return pd.concat([frames[i] for i in range(len(cells))], ignore_index=True)


def completed(runs: pd.DataFrame) -> pd.DataFrame:
    """Every setting with all policies: a flip's unaffected policies taken from its base
    profile's runs on the same draw and size (the default's for ``kind == "flip"``, ``paper``'s for
    ``flip-paper``). A profile's Gandiva is named by its model in ``policy``
    (``gandiva-timeslice``); here it stands in the ``gandiva`` row, the baseline the paper
    compares with."""
    runs = runs.assign(policy=runs["policy"].replace({"gandiva-timeslice": "gandiva"}))
    parts = [runs[runs["kind"] == "profile"]]
    for (name, draw, racks), sub in runs[runs["kind"] != "profile"].groupby(["setting", "draw", "racks"], sort=False):
        base = runs[(runs["setting"] == flip_base(name)) & (runs["draw"] == draw) & (runs["racks"] == racks)]
        rest = base[~base["policy"].isin(set(sub["policy"]))].copy()
        rest["setting"], rest["kind"] = name, sub["kind"].iloc[0]
        parts.append(pd.concat([sub, rest], ignore_index=True))
    return pd.concat(parts, ignore_index=True)


# --- the paper's directions -------------------------------------------------------------------


def paper_directions() -> list[dict]:
    """The comparisons the paper reports, each as (trace, racks or None for every size, metric,
    baseline, whether Dally's value is lower, where it says so)."""
    cells = {}
    for metric, baseline, trace, label, (lo, hi) in PAPER_CLAIMS:
        if baseline in SCORED:
            gain = f"up to {hi} %" if lo is None else f"{lo}-{hi} %"
            cells[(trace, None, metric, baseline)] = {
                "lower": True,
                "source": label,
                "magnitude": f"Dally better by {gain}",
            }
    for trace, table in PAPER_JCT.items():
        for baseline in SCORED:
            for i, stat in enumerate(METRIC_OF_STAT):
                metric = METRIC_OF_STAT[stat]
                if (trace, None, metric, baseline) in cells:
                    continue  # the headline claim covers 8 racks too
                lower = table["dally"][i] < table[baseline][i]
                gain = 1 - table["dally"][i] / table[baseline][i]
                cells[(trace, 8, metric, baseline)] = {
                    "lower": lower,
                    "source": f"Table {'II' if trace == 'batch-500' else 'III'} {stat} JCT",
                    "magnitude": f"Dally {'better' if gain > 0 else 'worse'} by {abs(gain):.1%}",
                }
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
            rows.append(
                {
                    "setting": setting,
                    "draw": draw,
                    "trace": trace,
                    "racks": racks,
                    "metric": d["metric"],
                    "baseline": d["baseline"],
                    "paper": "lower" if d["lower"] else "higher",
                    "ratio": ratio,
                    "agrees": agrees,
                    "source": d["source"],
                }
            )
    return pd.DataFrame(rows)


def claims(grid: pd.DataFrame) -> pd.DataFrame:
    """The §VI claims on every batch draw and size, per setting."""
    rows = []
    for (setting, draw, racks), cell in grid[grid["trace"] == "batch-500"].groupby(
        ["setting", "draw", "racks"], sort=False
    ):
        for claim, text in SECTION_VI_CLAIMS:
            verdict = claim_holds(claim, cell.set_index("policy"), int(racks))
            if verdict is not None:
                rows.append(
                    {
                        "setting": setting,
                        "draw": draw,
                        "racks": racks,
                        "claim": text,
                        "agrees": verdict[0],
                        "why": verdict[1],
                    }
                )
    return pd.DataFrame(rows)


# --- the remaining disagreements: a measured cause for each ----------------------------------

#: A disagreement is a near-tie when Dally / baseline (or a §VI claim's deciding ratio) is
#: within this fraction of the threshold it misses.
NEAR_TIE = 0.02
#: One job sets a makespan when the job that finishes last ran (``makespan_job_share``: its
#: running time over the makespan) for at least this share of the makespan.
ONE_JOB_SHARE = 0.5
#: The causes, in the order a disagreement's primary cause is taken (every cause that applies is
#: listed beside it).
CAUSES = (
    ("near-tie", f"near-tie (within {NEAR_TIE:.0%})"),
    ("reading", "flips with one reading"),
    ("readings", "flips only with several readings changed together"),
    ("one-job", "one job sets both makespans or the mean-JCT gap"),
    ("last-jobs", "one job sets each makespan, a different one under each policy"),
    ("one-job-jct", "one job's JCT decides the mean"),
    ("draw", "direction changes with the draw"),
    ("queueing", "the mean-JCT gap is all queueing"),
    ("unexplained", "unexplained"),
)
#: The policies each §VI claim compares; the first three are makespan claims.
CLAIM_POLICIES = {
    "nowait-vs-tiresias": ("dally-nowait", "tiresias"),
    "consolidated": ("dally-consolidated", "dally", "tiresias"),
    "gandiva": ("gandiva", "dally"),
    "comm": ("dally", "tiresias", "gandiva", "dally-manual"),
}
MAKESPAN_CLAIMS = ("nowait-vs-tiresias", "consolidated", "gandiva")


def setting_readings() -> dict[str, dict]:
    """Every setting's full readings: the profiles, and each profile with one reading changed."""
    out = {name: dict(PROFILES[name]) for name in PROFILES}
    for base in PROFILES:
        out.update({name: readings for name, _, readings in flips(base)})
    return out


def _affecting(policy: str) -> tuple[str, ...]:
    return tuple(r for r in READINGS if policy in AFFECTS.get(r, ()))


def _key(policy: str, readings: dict) -> tuple:
    return tuple((r, str(readings[r])) for r in _affecting(policy))


def run_index(runs: pd.DataFrame) -> dict:
    """Each run under the readings that can change it: (draw, racks, policy, those readings) ->
    the run's row. A policy's run under one setting stands for every setting that agrees with it
    on the readings that affect that policy (``AFFECTS``), e.g. Tiresias under ``default`` is
    Tiresias under ``paper`` (the same renewal)."""
    readings = setting_readings()
    runs = runs.assign(policy=runs["policy"].replace({"gandiva-timeslice": "gandiva"}))
    index = {}
    for row in runs.to_dict("records"):
        if row["setting"] in readings:
            index.setdefault(
                (row["draw"], int(row["racks"]), row["policy"], _key(row["policy"], readings[row["setting"]])), row
            )
    return index


def _cell_under(index: dict, draw: str, racks: int, readings: dict, policies) -> pd.DataFrame | None:
    rows = []
    for policy in policies:
        row = index.get((draw, racks, policy, _key(policy, readings)))
        if row is None:
            return None
        rows.append(row)
    return pd.DataFrame(rows).set_index("policy")


def checks() -> list[dict]:
    """Every comparison that is scored: the paper's directions and the §VI claims (batch)."""
    out = []
    for d in paper_directions():
        out.append(
            {
                "kind": "direction",
                "trace": d["trace"],
                "racks": d["racks"],
                "metric": d["metric"],
                "baseline": d["baseline"],
                "lower": d["lower"],
                "source": d["source"],
                "paper": f"{'lower' if d['lower'] else 'higher'} ({d['magnitude']})",
                "policies": ("dally", d["baseline"]),
                "makespan": d["metric"] == "makespan_s",
            }
        )
    for claim, text in SECTION_VI_CLAIMS:
        out.append(
            {
                "kind": "claim",
                "trace": "batch-500",
                "racks": None,
                "claim": claim,
                "metric": text,
                "baseline": "",
                "source": "§VI",
                "paper": "holds",
                "policies": CLAIM_POLICIES[claim],
                "makespan": claim in MAKESPAN_CLAIMS,
            }
        )
    return out


def claim_margin(claim: str, cell: pd.DataFrame, racks: int) -> float:
    """How far a §VI claim's deciding ratios are from the thresholds they miss (relative; 0 if
    the claim holds): the largest distance over the conditions that fail."""

    def ratio(metric, a, b):
        return cell.loc[a, metric] / cell.loc[b, metric]

    misses = []
    if claim == "nowait-vs-tiresias":
        r = ratio("makespan_s", "dally-nowait", "tiresias")
        if (r >= 1) if racks == 2 else (r <= 1):
            misses.append(abs(r - 1))
    elif claim == "consolidated":
        a, b = ratio("makespan_s", "dally-consolidated", "dally"), ratio("makespan_s", "dally-consolidated", "tiresias")
        if a <= 1:
            misses.append(1 - a)
        if b >= 1:
            misses.append(b - 1)
    elif claim == "gandiva":
        r = ratio("makespan_s", "gandiva", "dally")
        if racks == 2:
            if r > 1 + CLOSE_WITHIN:
                misses.append(r / (1 + CLOSE_WITHIN) - 1)
            elif r < 1 - CLOSE_WITHIN:
                misses.append(1 - r / (1 - CLOSE_WITHIN))
        elif r < MUCH_WORSE:
            misses.append(1 - r / MUCH_WORSE)
    elif claim == "comm":
        r = max(ratio("comm_mean_s", "dally", o) for o in ("tiresias", "gandiva", "dally-manual"))
        if r > 1:
            misses.append(r - 1)
    else:
        raise ValueError(f"unknown claim {claim!r}")
    return max(misses, default=0.0)


def verdict(check: dict, cell: pd.DataFrame, racks: int) -> tuple[bool, float, str]:
    """(agrees, margin, what we measure) for one check on one cell (indexed by policy)."""
    if check["kind"] == "direction":
        ratio = cell.loc["dally", check["metric"]] / cell.loc[check["baseline"], check["metric"]]
        agrees = (ratio < 0.999) if check["lower"] else (ratio > 1.001)
        gain = 1 - ratio
        return (
            agrees,
            abs(ratio - 1),
            f"Dally / baseline {ratio:.3f} (Dally {'better' if gain > 0 else 'worse'} by {abs(gain):.1%})",
        )
    holds, why = claim_holds(check["claim"], cell, racks)
    return holds, claim_margin(check["claim"], cell, racks), why


def _one_job(cell: pd.DataFrame, policies) -> bool:
    sub = cell.loc[list(policies)]
    return bool(sub["makespan_job"].nunique() == 1 and (sub["makespan_job_share"] >= ONE_JOB_SHARE).all())


def last_jobs_runs(check: dict, cell: pd.DataFrame, racks: int) -> str | None:
    """The last-jobs cause of a makespan comparison: under every compared policy the job that
    finishes last ran for at least ``ONE_JOB_SHARE`` of that policy's makespan, not the same job
    under all of them, and with each makespan replaced by its last job's running time
    (``makespan_job_share`` x ``makespan_s``) the cell still disagrees. Each makespan is then
    one job's run, and those runs (how fast each policy ran its last job), not the jobs' waits
    before them, set the direction. The text names each policy's last job, its running time and
    the makespan, what the runs alone give and, when the runs record it, what the time by which
    99 % of jobs are done gives (whether the rest of the schedule goes the same way);
    None when the cause does not apply."""
    if not check["makespan"]:
        return None
    sub = cell.loc[list(check["policies"])]
    if sub["makespan_job"].nunique() == 1 or (sub["makespan_job_share"] < ONE_JOB_SHARE).any():
        return None
    runs = cell.copy()
    runs["makespan_s"] = cell["makespan_s"] * cell["makespan_job_share"]
    agrees, _, ours = verdict(check, runs, racks)
    if agrees:
        return None
    jobs = ", ".join(
        f"{p} job {int(sub.loc[p, 'makespan_job'])} (ran {runs.loc[p, 'makespan_s'] / 3600:,.0f} h of "
        f"{sub.loc[p, 'makespan_s'] / 3600:,.0f} h)"
        for p in check["policies"]
    )
    text = f"last jobs {jobs}; on their running times alone {ours}"
    if "completion_p99_s" in cell.columns and not cell["completion_p99_s"].isna().any():
        rest = cell.assign(makespan_s=cell["completion_p99_s"])
        text += f"; by the time 99 % of jobs are done {verdict(check, rest, racks)[2]}"
    return text


def _last_job_share_of_gap(cell: pd.DataFrame, baseline: str) -> float | None:
    """When the same job finishes last under Dally and the baseline, the share of Dally's mean-JCT
    gap that job's later finish accounts for: its arrival is the same under both, so its JCT
    differs by the makespans' difference, which adds that over the job count to the mean. None if
    different jobs finish last or Dally's mean JCT is not higher."""
    dally, base = cell.loc["dally"], cell.loc[baseline]
    gap = dally["jct_mean_s"] - base["jct_mean_s"]
    if dally["makespan_job"] != base["makespan_job"] or gap <= 0:
        return None
    return float((dally["makespan_s"] - base["makespan_s"]) / dally["jobs"] / gap)


#: The per-run columns that name each run's largest-JCT job (:func:`largest_jct`); runs made
#: before they were recorded lack them, and the one-job-JCT cause is then not measured.
LARGEST_JCT_COLUMNS = ("jct_max_s", "jct_max_job", "jct_max_job_comm_share")


def _means_decided_by(check: dict) -> bool:
    """Whether a check compares means the largest-JCT job can decide: mean JCT, mean
    communication latency (a direction) or the §VI communication claim."""
    return check.get("claim") == "comm" or check["metric"] in ("jct_mean_s", "comm_mean_s")


def without_largest_jct(cell: pd.DataFrame) -> pd.DataFrame | None:
    """The cell (indexed by policy) with each policy's largest-JCT job left out of its means:
    mean JCT over the n − 1 others, (n·mean − max) / (n − 1), and mean communication latency
    without that job's share of the total, n·mean·(1 − share) / (n − 1). None when the runs
    do not record the largest-JCT job (:data:`LARGEST_JCT_COLUMNS`)."""
    if not set(LARGEST_JCT_COLUMNS) <= set(cell.columns) or cell[list(LARGEST_JCT_COLUMNS)].isna().any().any():
        return None
    n = cell["jobs"]
    out = cell.copy()
    out["jct_mean_s"] = (n * cell["jct_mean_s"] - cell["jct_max_s"]) / (n - 1)
    out["comm_mean_s"] = n * cell["comm_mean_s"] * (1 - cell["jct_max_job_comm_share"]) / (n - 1)
    return out


def _one_job_jct(check: dict, cell: pd.DataFrame, racks: int) -> str | None:
    """The one-job-JCT cause: with each compared policy's largest-JCT job left out
    (:func:`without_largest_jct`), the cell is on the paper's side or within the near-tie band.
    The text names each policy's job, its JCT and (for communication) its share; None when the
    cause does not apply or cannot be measured."""
    if not _means_decided_by(check):
        return None
    rest = without_largest_jct(cell)
    if rest is None:
        return None
    agrees, margin, ours = verdict(check, rest, racks)
    if not agrees and margin >= NEAR_TIE:
        return None
    comm = check.get("claim") == "comm" or check["metric"] == "comm_mean_s"
    jobs = ", ".join(
        f"{p} job {int(cell.loc[p, 'jct_max_job'])} ({cell.loc[p, 'jct_max_s'] / 3600:,.0f} h"
        + (f", {cell.loc[p, 'jct_max_job_comm_share']:.0%} of its communication" if comm else "")
        + ")"
        for p in check["policies"]
    )
    return f"largest JCTs {jobs}; without them {ours}" + ("" if agrees else " (a near-tie)")


def flipping_changes(index: dict, check: dict, draw: str, racks: int, readings: dict) -> list[tuple[str, ...]]:
    """The smallest changes of readings, among the runs made, that bring this cell to the
    paper's side: every combination of the readings that affect the compared policies is tried,
    and kept if each compared policy was run under it on this draw and size."""
    relevant = [r for r in READINGS if any(r in _affecting(p) for p in check["policies"])]
    found = []
    for values in itertools.product(*(READINGS[r] for r in relevant)):
        changed = tuple(f"{r}={v}" for r, v in zip(relevant, values) if str(v) != str(readings[r]))
        if not changed:
            continue
        cell = _cell_under(index, draw, racks, {**readings, **dict(zip(relevant, values))}, check["policies"])
        if cell is not None and verdict(check, cell, racks)[0]:
            found.append(changed)
    if not found:
        return []
    least = min(map(len, found))
    return sorted(c for c in found if len(c) == least)


def disagreements(runs: pd.DataFrame, profiles=tuple(PROFILES)) -> pd.DataFrame:
    """Every scored cell that disagrees with the paper under each profile, with each measured
    cause that applies and the primary one (the first in ``CAUSES``)."""
    index = run_index(runs)
    readings = setting_readings()
    runs = runs.assign(policy=runs["policy"].replace({"gandiva-timeslice": "gandiva"}))
    draws = runs[["trace", "draw"]].drop_duplicates()
    rows = []
    for profile in profiles:
        for check in checks():
            for draw in draws[draws["trace"] == check["trace"]]["draw"]:
                sizes = sorted(runs[(runs["draw"] == draw) & (runs["setting"] == profile)]["racks"].unique())
                for racks in sizes if check["racks"] is None else [check["racks"]]:
                    racks = int(racks)
                    cell = _cell_under(index, draw, racks, readings[profile], check["policies"])
                    if cell is None:
                        continue
                    agrees, margin, ours = verdict(check, cell, racks)
                    if agrees:
                        continue
                    causes = {}
                    changes = flipping_changes(index, check, draw, racks, readings[profile])
                    if changes and len(changes[0]) == 1:
                        causes["reading"] = ", ".join(c[0] for c in changes)
                    elif changes:
                        causes["readings"] = "; ".join(" + ".join(c) for c in changes)
                    notes = []
                    if check["makespan"] and _one_job(cell, check["policies"]):
                        job = int(cell["makespan_job"].iloc[0])
                        share = cell.loc[list(check["policies"]), "makespan_job_share"].min()
                        causes["one-job"] = f"job {job}, running at least {share:.0%} of each makespan"
                    elif check["makespan"] and (last := last_jobs_runs(check, cell, racks)) is not None:
                        causes["last-jobs"] = last
                    elif check["makespan"]:
                        notes.append(
                            "last jobs "
                            + ", ".join(
                                f"{p} {int(cell.loc[p, 'makespan_job'])} ({cell.loc[p, 'makespan_job_share']:.0%})"
                                for p in check["policies"]
                            )
                        )
                    if check["kind"] == "direction" and check["metric"] == "jct_mean_s":
                        part = _last_job_share_of_gap(cell, check["baseline"])
                        if part is not None and part >= 1:
                            causes["one-job"] = (
                                f"job {int(cell.loc['dally', 'makespan_job'])}'s later finish is {part:.0%} of the gap"
                            )
                        elif part is not None and part > 0:
                            notes.append(f"last job {int(cell.loc['dally', 'makespan_job'])}: {part:.0%} of the gap")
                        dally, base = cell.loc["dally"], cell.loc[check["baseline"]]
                        gap = dally["jct_mean_s"] - base["jct_mean_s"]
                        queue = dally["queue_mean_s"] - base["queue_mean_s"]
                        if gap > 0 and queue >= gap:
                            causes["queueing"] = (
                                f"mean queueing {queue / 3600:+.1f} h against a JCT gap of {gap / 3600:+.1f} h"
                            )
                    one_job = _one_job_jct(check, cell, racks)
                    if one_job is not None:
                        causes["one-job-jct"] = one_job
                    if margin < NEAR_TIE:
                        causes["near-tie"] = f"{margin:.2%} from the threshold"
                    others = []
                    for other in draws[(draws["trace"] == check["trace"]) & (draws["draw"] != draw)]["draw"]:
                        other_cell = _cell_under(index, other, racks, readings[profile], check["policies"])
                        if other_cell is not None and verdict(check, other_cell, racks)[0]:
                            others.append(other.split("-seed")[1])
                    if others:
                        causes["draw"] = "agrees on seed " + ", ".join(others)
                    primary = next((c for c, _ in CAUSES if c in causes), "unexplained")
                    rows.append(
                        {
                            "profile": profile,
                            "kind": check["kind"],
                            "source": check["source"],
                            "comparison": check.get("claim", f"{check['metric']} vs {check['baseline']}"),
                            "metric": check["metric"],
                            "baseline": check["baseline"],
                            "trace": check["trace"],
                            "seed": draw.split("-seed")[1],
                            "racks": racks,
                            "paper": check["paper"],
                            "ours": ours,
                            "margin": margin,
                            "cause": primary,
                            "causes": "; ".join(
                                [f"{c}: {v}" for c, v in causes.items()] + [f"(not a cause: {n})" for n in notes]
                            )
                            or "none measured",
                        }
                    )
    columns = [
        "profile",
        "kind",
        "source",
        "comparison",
        "metric",
        "baseline",
        "trace",
        "seed",
        "racks",
        "paper",
        "ours",
        "margin",
        "cause",
        "causes",
    ]
    return pd.DataFrame(rows, columns=columns)


def seed_spread(directions: pd.DataFrame, setting: str) -> float:
    """The median over (comparison, trace, size) of the range of Dally / baseline over the draws."""
    sub = directions[directions["setting"] == setting]
    spread = sub.groupby(["metric", "baseline", "trace", "racks"])["ratio"].agg(lambda r: r.max() - r.min())
    return float(spread.median())


def _reading_counts(frame: pd.DataFrame) -> str:
    names = frame["causes"].str.extract(r"reading: ([^;]*)")[0].dropna()
    counts = names.str.split(", ").explode().str.split("=").str[0].value_counts()
    return ", ".join(f"{n} with `{r}`" for r, n in counts.items())


def flip_coverage(runs: pd.DataFrame) -> str:
    """Which runs with one reading changed exist, per base profile, as a phrase: "from `default`
    on batch-500 seed 2001 and poisson-411 seed 2001, from `paper` on every draw, none from
    `reference`"."""
    every = set(runs["draw"])
    parts = []
    for base in PROFILES:
        draws = set(runs[runs["setting"].map(flip_base) == base]["draw"])
        if not draws:
            parts.append(f"none from `{base}`")
        elif draws == every:
            parts.append(f"from `{base}` on every draw")
        else:
            shown = " and ".join(d.replace("-seed", " seed ") for d in sorted(draws))
            parts.append(f"from `{base}` on {shown}")
    return ", ".join(parts)


def one_job_prevalence(runs: pd.DataFrame) -> str:
    """How often one job sets both makespans in the makespan comparisons, agreeing or not."""
    index, readings = run_index(runs), setting_readings()
    runs = runs.assign(policy=runs["policy"].replace({"gandiva-timeslice": "gandiva"}))
    parts = []
    for profile in PROFILES:
        hits = total = 0
        for check in (c for c in checks() if c["makespan"]):
            for draw, racks in (
                runs[(runs["setting"] == profile) & (runs["trace"] == check["trace"])][["draw", "racks"]]
                .drop_duplicates()
                .itertuples(index=False)
            ):
                if check["racks"] is not None and racks != check["racks"]:
                    continue
                cell = _cell_under(index, draw, int(racks), readings[profile], check["policies"])
                if cell is not None:
                    total += 1
                    hits += _one_job(cell, check["policies"])
        parts.append(f"{hits} of {total} under `{profile}`")
    return (
        "Of the makespan comparisons, agreeing or not, one job sets both makespans in "
        + ", ".join(parts)
        + ": the cause says what such a comparison measures (one job's placement), not why it goes the "
        "paper's way or the other."
    )


def measured_causes(runs: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """The causes (``CAUSES``) the runs can measure: all but the one-job-JCT cause when they do
    not record each run's largest-JCT job."""
    if set(LARGEST_JCT_COLUMNS) <= set(runs.columns):
        return CAUSES
    return tuple((c, label) for c, label in CAUSES if c != "one-job-jct")


def disagreement_lines(table: pd.DataFrame, runs: pd.DataFrame, directions: pd.DataFrame) -> list[str]:
    labels = dict(CAUSES)
    causes = measured_causes(runs)
    lines = [
        "## The remaining disagreements",
        "",
        "Every scored cell that disagrees with the paper (a direction or a §VI claim on one draw and size), "
        "with the causes measured from the runs in `profiles.csv`. The causes, tried in this order (the first "
        "that applies is the primary cause; every one that applies is listed):",
        "",
        f"* **near-tie**: Dally / baseline (for a claim, its deciding ratio) is within {NEAR_TIE:.0%} of the "
        "threshold it misses: the cell has no direction to explain;",
        "* **flips with one reading**: the cell is on the paper's side with one reading changed, all else as "
        "in the profile, in runs that exist for this draw and size. A policy's run stands for every setting "
        "that agrees with it on the readings that can change that policy (`AFFECTS`: Tiresias's run under "
        "`default` is its run under `paper`; Dally's under `never_run_nw_sens=one` is `paper`'s with "
        "`tuner_limit=window`). Runs with one reading changed exist "
        + flip_coverage(runs)
        + "; where a cell's profile has none on its draw, only the changes that other settings' runs cover "
        "can be seen;",
        "* **flips only with several readings changed together**: the smallest change that does it, among the "
        "runs made, changes more than one reading (typically another profile's runs, on a draw without "
        "single-reading runs from the cell's profile, or where no single change does it); the readings "
        "named are not isolated;",
        f"* **one job sets both makespans or the mean-JCT gap**: for a makespan comparison, the same job "
        f"finishes last under every compared policy and ran for at least {ONE_JOB_SHARE:.0%} of each makespan "
        "(`makespan_job`, `makespan_job_share`), so the comparison is that one job's placement, not the "
        "schedule's; for mean JCT, the same job finishes last under Dally and the baseline and its later "
        "finish under Dally (the makespans' difference over the job count) is at least the whole gap;",
        "* **one job sets each makespan, a different one under each policy** (makespan comparisons): the "
        f"job that finishes last ran for at least {ONE_JOB_SHARE:.0%} of its policy's makespan under every "
        "compared policy, not the same job under all, and with each makespan replaced by its last job's "
        "running time (`makespan_job_share` x `makespan_s`) the cell still disagrees: each makespan is one "
        "job's run, and how fast each policy ran its last job, not how long that job waited, sets the "
        "direction. Beside it, the comparison on the time by which 99 % of jobs are done "
        "(`completion_p99_s`) says whether the rest of the schedule goes the same way;",
        "* **one job's JCT decides the mean** (mean JCT, mean communication latency and the §VI communication "
        "claim): with each compared policy's largest-JCT job left out -- its mean JCT over the other n − 1 "
        "jobs, (n·mean − max) / (n − 1), and its mean communication latency without that job's share of the "
        f"total -- the cell is on the paper's side or within {NEAR_TIE:.0%} of the threshold it misses "
        "(`jct_max_s`, `jct_max_job`, `jct_max_job_comm_share`). It comes after the readings and the "
        "makespan jobs, which say what to change or what the comparison measures, and before the draw and "
        "queueing, because it names the job that moves the mean where those only say that the mean moves "
        "or where its gap lies"
        + (
            ";"
            if set(LARGEST_JCT_COLUMNS) <= set(runs.columns)
            else ". Not measured here: `profiles.csv` has no such columns (its runs were made before they "
            "were recorded);"
        ),
        "* **direction changes with the draw**: the same comparison, size and profile agrees on another "
        "draw of the same trace (the disagreement is inside the seed-to-seed spread);",
        "* **the mean-JCT gap is all queueing** (mean JCT only): Dally's mean queueing delay exceeds the "
        "baseline's by at least the JCT gap, so its jobs run no slower once placed and the gap is waiting "
        "(this locates the gap; it does not say which rule makes Dally's jobs wait);",
        "* **unexplained**: none of the above.",
        "",
        "Median seed-to-seed spread of Dally / baseline (max − min over the draws of one comparison, trace "
        "and size): "
        + ", ".join(f"{seed_spread(directions, p):.3f} under `{p}`" for p in PROFILES)
        + f"; the near-tie threshold is {NEAR_TIE:.0%}. "
        + one_job_prevalence(runs),
        "",
    ]
    counts = []
    for profile in PROFILES:
        sub = table[table["profile"] == profile]
        row = {
            "profile": profile,
            "disagreements": len(sub),
            "directions": int((sub["kind"] == "direction").sum()),
            "§VI claims": int((sub["kind"] == "claim").sum()),
        }
        for cause, label in causes:
            row[label] = int((sub["cause"] == cause).sum())
        counts.append(row)
    lines += ["Primary cause, per profile:", "", _md(pd.DataFrame(counts)), ""]
    every = []
    for profile in PROFILES:
        sub = table[table["profile"] == profile]
        row = {"profile": profile}
        for cause, label in causes[:-1]:
            row[label] = int(sub["causes"].str.contains(rf"(?:^|; ){cause}:").sum())
        every.append(row)
    lines += ["Every cause that applies (a cell can count under several):", "", _md(pd.DataFrame(every)), ""]
    for profile in PROFILES:
        sub = table[table["profile"] == profile]
        parts = []
        for cause, label in CAUSES:
            part = sub[sub["cause"] == cause]
            if len(part):
                text = f"{len(part)} {label}"
                if cause == "reading":
                    text += (
                        f" ({_reading_counts(part)}; a cell that flips with either of two readings counts under both)"
                    )
                if cause == "readings":
                    sizes = part["causes"].str.extract(r"readings: ([^;]*)")[0].str.count(r" \+ ") + 1
                    by_size = sorted(sizes.value_counts().items())
                    text += " (" + ", ".join(f"{n} with {k} readings" for k, n in by_size) + ")"
                parts.append(text)
        lines += [
            f"Of the {len(sub)} disagreements under `{profile}` ({int((sub['kind'] == 'direction').sum())} "
            f"scored direction cells, {int((sub['kind'] == 'claim').sum())} §VI claim cells): "
            + ("; ".join(parts) if parts else "none")
            + ".",
            "",
        ]
    paper = table[table["profile"] == "paper"]
    if len(paper):
        view = paper.drop(columns=["profile", "metric", "baseline", "margin"]).copy()
        view["comparison"] = [
            c if k == "direction" else dict(SECTION_VI_CLAIMS)[c] for c, k in zip(view["comparison"], view["kind"])
        ]
        view["cause"] = view["cause"].map(labels)
        lines += [
            "Every disagreement under `paper` (seed: the draw; ours: Dally / baseline for a direction, "
            "the deciding ratio for a claim):",
            "",
            _md(view),
            "",
        ]
    for profile in [p for p in PROFILES if p != "paper"]:
        sub = table[table["profile"] == profile]
        if len(sub):
            grouped = (
                sub.assign(cause=sub["cause"].map(labels))
                .groupby(["kind", "comparison", "trace", "cause"], sort=False)
                .agg(
                    cells=("racks", "size"),
                    sizes=("racks", lambda r: ", ".join(map(str, sorted(set(r))))),
                    seeds=("seed", lambda s: ", ".join(sorted(set(s)))),
                )
                .reset_index()
            )
            lines += [
                f"Disagreements under `{profile}`, grouped by comparison and primary cause:",
                "",
                _md(grouped),
                "",
            ]
    return lines


# --- the report ---------------------------------------------------------------------------------


def _share(flags: pd.Series) -> str:
    return f"{int(flags.sum())} of {len(flags)} ({flags.mean():.0%})" if len(flags) else "none"


def settings_table() -> pd.DataFrame:
    return pd.DataFrame([{"reading": r, **{p: str(PROFILES[p][r]) for p in PROFILES}} for r in READINGS])


def command(run_info: dict) -> str:
    """The command line of the run ``profiles_run.json`` describes (the flip options left out
    at their defaults)."""
    words = ["python benchmarks/profiles.py"]
    if "workers" in run_info:
        words.append(f"--workers {run_info['workers']}")
    bases = list(run_info.get("flip_bases", FLIP_BASES))
    if bases != list(FLIP_BASES):
        words.append("--flip-bases " + " ".join(bases))
    if run_info.get("flip_draws", FLIP_DRAWS) != FLIP_DRAWS:
        words.append(f"--flip-draws {run_info['flip_draws']}")
    if run_info.get("reuse"):
        words.append(f"--reuse {run_info['reuse']}")
    return " ".join(words)


def _runs_and_time(runs: pd.DataFrame, wall_s: float, run_info: dict) -> str:
    reused = run_info.get("reused_runs", 0)
    if not reused:
        return f"{len(runs)} runs in {wall_s:.0f} s of wall time"
    return (
        f"{len(runs)} runs: {len(runs) - reused} played in {wall_s:.0f} s of wall time, {reused} taken from "
        f"an earlier run's `profiles.csv` (`--reuse`)"
    )


def report(runs: pd.DataFrame, wall_s: float, run_info: dict | None = None) -> str:
    grid = completed(runs)
    directions = judge(grid)
    verdicts = claims(grid)
    lines = [
        "# The paper's evaluation under each profile",
        "",
        f"Produced by `{command(run_info or {})}` (dallygym {dallygym.__version__}, Python "
        f"{platform.python_version()}, {platform.machine()}); {_runs_and_time(runs, wall_s, run_info or {})}. "
        "Held-out draws (`traces/heldout`): batch-500 seeds 2001-2003 and Poisson seeds 2001-2002 at "
        f"{', '.join(map(str, RACKS))} racks of 8 machines x 8 GPUs under each profile; the sensitivity rows "
        f"change one reading at a time, {flip_coverage(runs)}. Settings (`docs/profiles.md` gives the "
        "sentence behind each):",
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
    for (kind, setting), sub in directions.groupby([directions["setting"].map(_kind_of(grid)), "setting"], sort=False):
        claim_sub = verdicts[verdicts["setting"] == setting]
        summary.append(
            {
                "kind": kind,
                "setting": setting,
                "directions agree": _share(sub["agrees"]),
                "batch": _share(sub[sub["trace"] == "batch-500"]["agrees"]),
                "Poisson": _share(sub[sub["trace"] == "poisson-411"]["agrees"]),
                "§VI claims agree": _share(claim_sub["agrees"]) if len(claim_sub) else "none",
            }
        )
    lines += [_md(pd.DataFrame(summary)), ""]
    profile_rows = directions[directions["setting"].isin(PROFILES)]
    by_metric = (
        profile_rows.groupby(["setting", "metric", "baseline"], sort=False)["agrees"]
        .agg(lambda s: f"{int(s.sum())}/{len(s)}")
        .unstack("setting")
        .reset_index()
    )
    lines += ["Per comparison (cells agreeing, over draws and sizes):", "", _md(by_metric), ""]
    for profile in PROFILES:
        wrong = directions[(directions["setting"] == profile) & ~directions["agrees"]]
        if len(wrong):
            worst = (
                wrong.groupby(["trace", "metric", "baseline"])
                .agg(
                    cells=("ratio", "size"),
                    ratio_min=("ratio", "min"),
                    ratio_max=("ratio", "max"),
                    sizes=("racks", lambda r: ", ".join(map(str, sorted(set(r))))),
                )
                .reset_index()
            )
            lines += [f"Disagreements under `{profile}` (Dally / baseline over the draws):", "", _md(worst), ""]
    lines += sensitivity_lines(directions, verdicts)
    lines += [
        "## The §VI claims (batch draws)",
        "",
        "Rules as in `benchmarks/compare.py`; cells agreeing over the three draws, per size:",
        "",
    ]
    table = (
        verdicts[verdicts["setting"].isin(PROFILES)]
        .groupby(["claim", "setting", "racks"], sort=False)["agrees"]
        .agg(lambda s: f"{int(s.sum())}/{len(s)}")
        .unstack("racks")
        .reset_index()
    )
    lines += [_md(table), ""]
    lines += [
        "## Table II analogue (batch, 8 racks)",
        "",
        "Improvement of Dally over each baseline, 1 − Dally / baseline, as the mean over the three batch "
        "draws (negative: Dally worse); the paper's from its Table II:",
        "",
    ]
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
        lines += [
            "## What sets the makespan",
            "",
            "Makespan against the time by which 99 % of jobs are done (hours, seed 2001, the default "
            "profile; Dally, Tiresias and Gandiva), and the job that finishes last:",
            "",
        ]
        sub = grid[
            (grid["setting"] == "default")
            & grid["draw"].str.endswith("2001")
            & grid["policy"].isin(["dally", "tiresias", "gandiva"])
        ]
        view = sub[["trace", "racks", "policy", "makespan_s", "completion_p99_s", "makespan_job"]].copy()
        view["makespan_h"] = view.pop("makespan_s") / 3600
        view["completion_p99_h"] = view.pop("completion_p99_s") / 3600
        lines += [_md(view, ".1f"), ""]
    lines += disagreement_lines(disagreements(runs), runs, directions)
    return "\n".join(lines)


def sensitivity_lines(directions: pd.DataFrame, verdicts: pd.DataFrame) -> list[str]:
    """Which reading moves which comparison: for each profile with flips, on the draws they ran
    on, cells agreeing per comparison under that profile and with each reading changed alone
    from it (from the default, also under the paper profile on the same draws)."""
    lines = []
    for base in PROFILES:
        flipped = [s for s in directions["setting"].unique() if flip_base(s) == base]
        if not flipped:
            continue
        draws = directions[directions["setting"].isin(flipped)]["draw"].unique()
        shown = [base, *flipped] + (["paper"] if base == "default" else [])
        sub = directions[directions["draw"].isin(draws) & directions["setting"].isin(shown)]
        table = (
            sub.groupby(["metric", "baseline", "setting"], sort=False)["agrees"]
            .agg(lambda a: f"{int(a.sum())}/{len(a)}")
            .unstack("setting")
            .fillna("–")  # a comparison of a size the flips did not run
            .reset_index()
        )
        table = table[["metric", "baseline", *shown]]
        claim_sub = verdicts[verdicts["draw"].isin(draws) & verdicts["setting"].isin(shown)]
        claim_table = (
            claim_sub.groupby(["claim", "setting"], sort=False)["agrees"]
            .agg(lambda a: f"{int(a.sum())}/{len(a)}")
            .unstack("setting")
            .fillna("–")
            .reset_index()
        )
        if len(claim_table):
            claim_table = claim_table[["claim", *shown]]
        if not lines:
            lines += ["## Which reading moves which comparison", ""]
        if base == "default":
            lines += [
                f"On the draws the sensitivity rows ran on ({', '.join(sorted(draws))}), cells agreeing with the "
                "paper's direction per comparison (over the four sizes, and the 8-rack table cells): under the "
                "default, with one reading changed alone, and under the `paper` profile.",
            ]
        else:
            lines += [
                f"From `{base}`, on the draws its flips ran on ({', '.join(sorted(draws))}): cells agreeing with "
                f"the paper's direction per comparison under `{base}` and with one reading changed alone from it.",
            ]
        lines += ["", _md(table), ""]
        if len(claim_table):
            lines += [
                "The §VI claims on the same batch draws, per reading (over the sizes):",
                "",
                _md(claim_table),
                "",
            ]
    return lines


def _kind_of(grid: pd.DataFrame):
    kinds = dict(zip(grid["setting"], grid["kind"]))
    return lambda setting: kinds.get(setting, "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="where to write the results")
    parser.add_argument("--report-only", action="store_true", help="rewrite profiles.md from profiles.csv")
    parser.add_argument(
        "--runs-from",
        help="with --report-only: the directory holding profiles.csv and profiles_run.json (default: --out)",
    )
    parser.add_argument(
        "--flip-bases",
        nargs="+",
        choices=list(PROFILES),
        default=list(FLIP_BASES),
        help="the profiles to change one reading at a time from (default: %(default)s)",
    )
    parser.add_argument(
        "--flip-draws",
        choices=("first", "all"),
        default=FLIP_DRAWS,
        help="run the flips on the first draw of each kind or on every draw (default: %(default)s)",
    )
    parser.add_argument("--count", action="store_true", help="print how many cells and runs the grid has; run none")
    parser.add_argument(
        "--reuse",
        metavar="CSV",
        default=None,
        help="take the cells an earlier profiles.csv holds from it and play only the others",
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.count:
        cells = plan(args.flip_bases, args.flip_draws)
        runs = sum(len(cell[-1]) for cell in cells)
        flipped = sum(len(cell[-1]) for cell in cells if cell[0] != "profile")
        print(
            f"{len(cells)} cells, {runs} runs ({runs - flipped} under the profiles, {flipped} with one reading changed)"
        )
        return
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        source = Path(args.runs_from) if args.runs_from else out
        runs = pd.read_csv(source / "profiles.csv")
        run_info = json.loads((source / "profiles_run.json").read_text())
        wall_s = run_info["wall_s"]
    else:
        earlier = pd.read_csv(args.reuse) if args.reuse else None
        reused = sum(len(rows) for rows in reusable(plan(args.flip_bases, args.flip_draws), earlier).values())
        start = time.perf_counter()
        runs = run(args.workers, args.flip_bases, args.flip_draws, earlier)
        wall_s = time.perf_counter() - start
        runs.to_csv(out / "profiles.csv", index=False)
        run_info = {
            "wall_s": round(wall_s, 1),
            "workers": args.workers,
            "flip_bases": args.flip_bases,
            "flip_draws": args.flip_draws,
        }
        if reused:
            run_info["reused_runs"] = reused
            run_info["reuse"] = args.reuse
        (out / "profiles_run.json").write_text(json.dumps(run_info) + "\n")
    (out / "profiles.md").write_text(report(runs, wall_s, run_info) + "\n")
    print(
        f"wrote {out / 'profiles.md'}"
        if args.report_only
        else f"wrote {out / 'profiles.csv'} and {out / 'profiles.md'}"
    )


if __name__ == "__main__":
    main()
