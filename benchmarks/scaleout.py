"""Scale-out benchmark: the paper grid and the benchmark report on 1 and 2 local workers and on Ray.

    python benchmarks/scaleout.py [--parts grid report] [--out benchmarks/results]

Runs each command in a fresh process, one after the other, and times it from outside
(wall clock of the whole process, imports and Ray start-up included):

* **grid**: ``dallygym sweep`` over the paper grid: policies dally, dally-nowait, tiresias and
  gandiva (the four schedulers of the paper's Fig. 7) x traces batch-500 and poisson-411 x
  2/4/8/16 racks x renewal modes upgrade and keep = 64 cells, each into a fresh ``--out``;
* **report**: ``python benchmarks/report.py`` (the full held-out report, learned agents
  included) into a fresh ``--out``;

each with ``--workers 1``, ``--workers 2`` and ``--backend ray --workers 2`` (a local Ray
instance with 2 CPUs, started and stopped by the command). The sweep's ``results.csv`` and the
report's ``report.csv`` (without its per-run ``wall_s`` timings) are hashed and compared across
the three runs; a mismatch is written into the table, not hidden. Writes ``scaleout.csv`` and
``scaleout.md`` to ``--out``.

Speed is a benchmark, never a test: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import dallygym

ROOT = Path(__file__).resolve().parent.parent
GRID = [
    "--policies",
    "dally",
    "dally-nowait",
    "tiresias",
    "gandiva",
    "--traces",
    "batch-500",
    "poisson-411",
    "--racks",
    "2",
    "4",
    "8",
    "16",
    "--renewal",
    "upgrade",
    "keep",
]
GRID_CELLS = 4 * 2 * 4 * 2
BACKENDS = {
    "1 local worker": ["--workers", "1"],
    "2 local workers": ["--workers", "2"],
    "Ray, 2 CPUs": ["--backend", "ray", "--workers", "2"],
}


def command(part: str, backend: list[str], out: Path) -> list[str]:
    if part == "grid":
        return [sys.executable, "-m", "dallygym", "sweep", *GRID, *backend, "--no-progress", "--out", str(out)]
    return [sys.executable, str(ROOT / "benchmarks" / "report.py"), *backend, "--out", str(out)]


def digest(path: Path) -> str:
    """The table's hash, without report.csv's per-run ``wall_s`` column (a timing, not a result)."""
    if not path.exists():
        return "missing"
    table = pd.read_csv(path)
    data = table.drop(columns=["wall_s"], errors="ignore").to_csv(index=False).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def run(part: str, label: str, backend: list[str], scratch: Path) -> dict:
    out = scratch / f"{part}-{len(os.listdir(scratch))}"
    cmd = command(part, backend, out)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    table = out / ("results.csv" if part == "grid" else "report.csv")
    row = {
        "part": part,
        "backend": label,
        "wall_s": round(wall, 1),
        "table_sha256": digest(table),
        "command": " ".join("python" if c == sys.executable else c.replace(f"{ROOT}/", "") for c in cmd[:-1]) + " DIR",
    }
    print(f"{part:6s} {label:16s} {wall:8.1f} s  {row['table_sha256']}", flush=True)
    return row


def write(rows: list[dict], out: Path) -> None:
    """Write the table; rows of parts not measured in this run are kept from the last one."""
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    if (out / "scaleout.csv").exists():
        old = pd.read_csv(out / "scaleout.csv", dtype={"table_sha256": str})
        old = old[~old["part"].isin(frame["part"])][frame.columns.drop(["speedup", "same_table"], errors="ignore")]
        frame = pd.concat([old, frame], ignore_index=True)
    for _part, group in frame.groupby("part", sort=False):
        base = group["wall_s"].iloc[0]
        frame.loc[group.index, "speedup"] = (base / group["wall_s"]).round(2)
        frame.loc[group.index, "same_table"] = group["table_sha256"] == group["table_sha256"].iloc[0]
    frame.to_csv(out / "scaleout.csv", index=False)
    lines = [
        "# Scale-out: the paper grid and the benchmark report on processes and on Ray",
        "",
        f"Produced by `python benchmarks/scaleout.py` (dallygym {dallygym.__version__}, Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores), one command "
        "at a time on an otherwise idle machine; wall time of the whole process (imports and Ray "
        "start-up included). Speed-up is against 1 local worker. `--parts` re-measures some parts and "
        "keeps the others' rows.",
        "",
        f"- **grid**: `dallygym sweep` over {GRID_CELLS} cells ({' '.join(GRID)}).",
        "- **report**: `python benchmarks/report.py` (every heuristic and shipped learned agent on "
        "the held-out traces).",
        "",
        "| part | backend | wall (s) | speed-up | result table identical to 1 worker | command |",
        "|---|---|---|---|---|---|",
    ]
    for r in frame.itertuples():
        lines.append(
            f"| {r.part} | {r.backend} | {r.wall_s:,.1f} | {r.speedup:.2f} | "
            f"{'yes' if r.same_table else 'NO'} ({r.table_sha256}) | `{r.command}` |"
        )
    (out / "scaleout.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=("grid", "report"), default=["grid", "report"])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dallygym-scaleout-") as tmp:
        for part in args.parts:
            for label, backend in BACKENDS.items():
                rows.append(run(part, label, backend, Path(tmp)))
    write(rows, Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
