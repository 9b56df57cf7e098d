"""Write the held-out evaluation traces to traces/heldout/ (never used in training).

    python agents/make_heldout_traces.py

* ``batch-500-seed2001..2003.csv`` and ``poisson-411-seed2001..2002.csv``: other seeds of the
  paper workloads' generators (training draws fresh traces from other seeds at every reset,
  validation during training uses seeds 100 and 101; seeds >= 2000 are reserved for tests).
* ``helios-format-cluster_log.csv`` -> ``helios-imported.csv``: a trace in the public
  Helios/SenseTime ``cluster_log.csv`` format, imported with ``dallygym trace import helios``.
  Its content is synthetic (the ``helios-like`` generator, Venus's GPU-demand mix, seed 2001,
  plus failed, cancelled and CPU-only rows that the importer must drop): no public trace can be
  fetched on this project's machines. Its GPU mix differs from batch-500's, which makes it a
  distribution-shift test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dallygym.sim.trace import generate_trace, import_helios, write_trace

OUT = Path(__file__).resolve().parents[1] / "traces" / "heldout"
TEST_SEEDS = {"batch-500": (2001, 2002, 2003), "poisson-411": (2001, 2002)}


def helios_format(seed: int = 2001) -> pd.DataFrame:
    """A helios-like workload written in the columns of Helios's cluster_log.csv."""
    rng = np.random.default_rng(seed)
    jobs = generate_trace("helios-like", seed=seed)
    duration = (jobs["total_iterations"] * jobs["iter_time_s"]).round().astype(int)
    submit = pd.Timestamp("2020-04-01") + pd.to_timedelta(jobs["arrival_s"].round(), unit="s")
    start = submit + pd.to_timedelta(rng.integers(0, 600, len(jobs)), unit="s")
    frame = pd.DataFrame(
        {
            "job_id": [f"{seed}-{i:05d}" for i in range(len(jobs))],
            "user": [f"u{u:03d}" for u in rng.integers(0, 80, len(jobs))],
            "vc": [f"vc{v:02d}" for v in rng.integers(0, 12, len(jobs))],
            "gpu_num": jobs["num_gpus"].to_numpy(),
            "cpu_num": jobs["num_gpus"].to_numpy() * 6,
            "node_num": np.ceil(jobs["num_gpus"].to_numpy() / 8).astype(int),
            "state": "COMPLETED",
            "submit_time": submit.dt.strftime("%Y-%m-%d %H:%M:%S"),
            "start_time": start.dt.strftime("%Y-%m-%d %H:%M:%S"),
            "end_time": (start + pd.to_timedelta(duration, unit="s")).dt.strftime("%Y-%m-%d %H:%M:%S"),
            "duration": duration,
            "queue": (start - submit).dt.total_seconds().astype(int),
        }
    )
    # Rows a real log has and the importer must drop: failed / cancelled jobs, CPU-only jobs.
    extra = frame.sample(n=60, random_state=seed).copy()
    extra["job_id"] = [f"{seed}-x{i:04d}" for i in range(len(extra))]
    extra["state"] = rng.choice(["FAILED", "CANCELLED"], size=len(extra))
    cpu = frame.sample(n=40, random_state=seed + 1).copy()
    cpu["job_id"] = [f"{seed}-c{i:04d}" for i in range(len(cpu))]
    cpu["gpu_num"] = 0
    return pd.concat([frame, extra, cpu]).sort_values("submit_time", kind="stable").reset_index(drop=True)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, seeds in TEST_SEEDS.items():
        for seed in seeds:
            write_trace(generate_trace(name, seed=seed), OUT / f"{name}-seed{seed}.csv")
    source = OUT / "helios-format-cluster_log.csv"
    helios_format().to_csv(source, index=False)
    # The log's durations are the generator's compute-only run times, not measured wall
    # time: read them as such (the committed file predates the wall reading).
    imported = import_helios(source, seed=2001, durations="compute")
    write_trace(imported, OUT / "helios-imported.csv")
    print(f"wrote {sorted(p.name for p in OUT.glob('*.csv'))}; helios import: {imported.attrs.get('import_report')}")


if __name__ == "__main__":
    main()
