"""Seeded workload generators and the committed trace files (SPEC §3, paper §V-A)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.trace import (
    GENERATOR_VERSION,
    GENERATORS,
    ITER_TIME_S,
    SHIPPED_SEEDS,
    TraceError,
    generate_trace,
    largest_remainder,
    load_trace,
    regenerate_shipped,
    sha256_of,
    trace_stats,
    workload_targets,
)

REPO_TRACES = Path(__file__).resolve().parents[1] / "traces"

BATCH_GPUS = {1: 270, 2: 13, 4: 52, 8: 109, 16: 42, 32: 11, 40: 1, 48: 1, 56: 1}
BATCH_MODELS = {"mobilenet_v3": 125, "bert_large": 125, "resnet50": 125, "alexnet": 53, "resnet18": 38, "vgg11": 34}


def within(value: float, target: float, rel: float = 0.10) -> bool:
    return abs(value / target - 1.0) <= rel


@pytest.fixture(scope="module")
def batch():
    return generate_trace("batch-500", seed=0)


@pytest.fixture(scope="module")
def poisson():
    return generate_trace("poisson-411", seed=0)


# ---------------------------------------------------------------- batch-500


def test_batch_500_has_the_papers_exact_gpu_and_model_counts(batch):
    stats = trace_stats(batch)
    assert stats["jobs"] == 500
    assert stats["gpu_counts"] == BATCH_GPUS
    assert stats["model_counts"] == dict(sorted(BATCH_MODELS.items()))


def test_batch_500_jobs_all_arrive_at_time_zero(batch):
    assert (batch["arrival_s"] == 0.0).all()
    assert batch["job_id"].tolist() == list(range(500))


@pytest.mark.parametrize("seed", range(10))
def test_batch_500_durations_and_gpu_hours_are_within_10_percent(seed):
    stats = trace_stats(generate_trace("batch-500", seed))
    assert within(stats["duration_p10_s"], 8402)
    assert within(stats["duration_p50_s"], 55969)
    assert within(stats["duration_p90_s"], 202999)
    assert within(stats["duration_mean_s"], 93987)
    assert within(stats["gpu_hours"], 82827)


def test_batch_500_large_jobs_run_longer_than_small_ones(batch):
    # The coupling that lifts the GPU-hours above (number of GPUs x mean duration).
    duration = batch["total_iterations"] * batch["iter_time_s"]
    small = duration[batch["num_gpus"] == 1].median()
    large = duration[batch["num_gpus"] >= 16].median()
    assert large > small
    assert trace_stats(batch)["gpu_hours"] > 2544 * duration.mean() / 3600


# ---------------------------------------------------------------- poisson-411


def test_poisson_411_has_the_papers_gpu_counts_plus_one_single_gpu_job(poisson):
    counts = trace_stats(poisson)["gpu_counts"]
    assert counts[1] == 1  # the stated counts sum to 410; one 1-GPU job completes 411
    assert {g: counts[g] for g in (2, 4, 8, 16, 32)} == {2: 41, 4: 96, 8: 190, 16: 56, 32: 23}
    assert sum(c for g, c in counts.items() if 40 <= g <= 56) == 4
    assert sum(counts.values()) == 411


def test_poisson_411_model_mix_is_the_papers_by_largest_remainder(poisson):
    # 411 x (125, 125, 125, 53, 38, 34) / 500 = 102.75 x3, 43.57, 31.24, 27.95: the floors
    # take 407 and the four largest remainders (vgg11 .95, then the three .75) one more each.
    assert trace_stats(poisson)["model_counts"] == {
        "alexnet": 43,
        "bert_large": 103,
        "mobilenet_v3": 103,
        "resnet18": 31,
        "resnet50": 103,
        "vgg11": 28,
    }


@pytest.mark.parametrize("seed", range(10))
def test_poisson_411_arrivals_and_gpu_hours_are_on_target(seed):
    frame = generate_trace("poisson-411", seed)
    stats = trace_stats(frame)
    assert frame["arrival_s"].iloc[0] == 0.0
    assert np.all(np.diff(frame["arrival_s"]) >= 0)
    assert within(stats["mean_interarrival_s"], 2908)
    assert within(stats["arrival_span_h"], 333)
    assert within(stats["gpu_hours"], 138767)


def test_poisson_411_gaps_look_exponential(poisson):
    gaps = np.diff(poisson["arrival_s"].to_numpy())
    # An exponential's standard deviation equals its mean; a regular grid would give ~0.
    assert 0.8 < gaps.std() / gaps.mean() < 1.2


# ---------------------------------------------------------------- small and the extras


def test_small_fits_the_course_cluster_with_short_jobs():
    frame = generate_trace("small", 0)
    stats = trace_stats(frame)
    assert stats["jobs"] == 60
    assert set(stats["gpu_counts"]) <= {1, 2, 4, 8, 16}
    load_trace(frame, cluster=ClusterSpec(racks=2, machines_per_rack=2, gpus_per_machine=8))
    assert stats["duration_max_s"] <= 4 * 3600 * 1.01
    assert frame["arrival_s"].max() < 8 * 3600


def test_philly_like_matches_the_philly_gpu_mix_and_duration_quantiles():
    stats = trace_stats(generate_trace("philly-like", 0))
    assert stats["gpu_counts"] == {1: 932, 2: 22, 4: 23, 8: 20, 16: 2, 32: 1}
    for key, target in workload_targets("philly-like").items():
        assert within(stats[key], target), key


def test_helios_like_matches_the_venus_gpu_mix():
    stats = trace_stats(generate_trace("helios-like", 0))
    assert stats["gpu_counts"] == {1: 270, 2: 15, 4: 45, 8: 115, 16: 25, 32: 30}


@pytest.mark.parametrize("name", list(GENERATORS))
def test_iterations_times_iteration_time_is_the_drawn_duration(name):
    frame = generate_trace(name, 1)
    base = frame["model"].map(ITER_TIME_S)
    ratio = frame["iter_time_s"] / base
    # Log-normal jitter of sigma 0.1: every job within +-50 % of its model's table value.
    assert ratio.between(0.6, 1.6).all()
    assert (frame["total_iterations"] >= 1).all()


def test_largest_remainder_apportions_exactly():
    assert largest_remainder({"a": 1, "b": 1, "c": 1}, 10) == {"a": 4, "b": 3, "c": 3}
    assert sum(largest_remainder({1: 93.2, 2: 2.2, 4: 2.3}, 77).values()) == 77


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", list(GENERATORS))
def test_same_seed_gives_the_same_trace(name):
    pd.testing.assert_frame_equal(generate_trace(name, 5), generate_trace(name, 5), check_exact=True)


@pytest.mark.parametrize("name", list(GENERATORS))
def test_different_seeds_give_different_traces(name):
    a, b = generate_trace(name, 5), generate_trace(name, 6)
    assert not a.equals(b)
    assert not np.array_equal(a["total_iterations"], b["total_iterations"])


def test_unknown_generator_lists_the_known_ones():
    with pytest.raises(TraceError, match="unknown generator 'batch-5'.*batch-500"):
        generate_trace("batch-5", 0)


def test_negative_seed_is_rejected():
    with pytest.raises(ValueError, match="seed"):
        generate_trace("small", -1)


# ---------------------------------------------------------------- committed files


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    return out, regenerate_shipped(out)


@pytest.fixture(scope="module")
def manifest():
    return json.loads((REPO_TRACES / "manifest.json").read_text())


@pytest.mark.parametrize("name", list(GENERATORS))
def test_committed_file_equals_a_fresh_generation_byte_for_byte(fresh, manifest, name):
    out, _ = fresh
    entry = manifest["traces"][name]
    assert entry["seed"] == SHIPPED_SEEDS[name]
    assert sha256_of(REPO_TRACES / entry["file"]) == entry["sha256"]
    assert sha256_of(out / entry["file"]) == entry["sha256"]


def test_committed_manifest_equals_a_fresh_one(fresh, manifest):
    out, _ = fresh
    assert (out / "manifest.json").read_text() == json.dumps(manifest, indent=2) + "\n"
    assert manifest["generator_version"] == GENERATOR_VERSION
    for entry in manifest["traces"].values():
        assert entry["generator_version"] == GENERATOR_VERSION


def test_manifest_records_the_achieved_statistics(manifest):
    entry = manifest["traces"]["batch-500"]
    stats = trace_stats(load_trace(REPO_TRACES / "batch-500.csv"))
    assert entry["stats"]["gpu_hours"] == pytest.approx(stats["gpu_hours"], abs=1e-3)
    assert entry["targets"]["gpu_hours"] == 82827
