"""Importers from public trace formats (SPEC §3).

The small files under tests/data/ have their canonical output worked out by hand below. A
one-model ``model_mix`` makes the drawn models known in advance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.trace import (
    ITER_TIME_S,
    TRACE_COLUMNS,
    TraceError,
    import_gavel,
    import_helios,
    import_philly,
    import_tiresias,
    import_trace,
    paper_model_mix,
)

DATA = Path(__file__).parent / "data"
# The hand-worked tests below read durations as compute-only time; the wall reading has its
# own tests further down.
COMPUTE = {"durations": "compute"}
TIRESIAS = DATA / "tiresias_small.csv"
PHILLY = DATA / "philly_small.csv"
HELIOS = DATA / "helios_cluster_log.csv"

TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"


def write(tmp_path: Path, header: str, *rows: str, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def as_rows(frame: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in frame[list(TRACE_COLUMNS)].itertuples(index=False)]


# ---------------------------------------------------------------- Tiresias


def test_tiresias_file_becomes_the_hand_worked_canonical_trace():
    # id 4: 500 s / 1000 it = 0.5; id 1: vgg16 mapped to vgg11, 1000 / 200 = 5.0;
    # id 2: "ResNet-18" is a spelling of resnet18, 5 / 10 = 0.5; id 3: "bert-large", 300/100.
    frame = import_tiresias(TIRESIAS, model_map={"vgg16": "vgg11"}, **COMPUTE)
    assert as_rows(frame) == [
        (1, 0.0, 8, "vgg11", 200, 5.0),
        (2, 50.0, 1, "resnet18", 10, 0.5),
        (3, 50.5, 4, "bert_large", 100, 3.0),
        (4, 100.0, 2, "resnet50", 1000, 0.5),
    ]
    report = frame.attrs["import_report"]
    assert report["rows_read"] == report["rows_kept"] == 4
    assert report["models"] == {"as_is": 1, "aliased": 2, "family": 0, "mapped": 1, "drawn": 0}


def test_tiresias_unknown_model_is_drawn_with_the_seed_and_reported(tmp_path):
    path = write(tmp_path, TIRESIAS_HEADER, "0,1,0,10,resnet50,5,0", "1,1,0,10,lstm_lm,5,0")
    frame = import_tiresias(path, seed=3, model_mix={"alexnet": 1.0})
    assert frame.loc[frame["job_id"] == 1, "model"].item() == "alexnet"
    report = frame.attrs["import_report"]
    assert report["models"]["drawn"] == 1
    assert report["models_drawn_for"] == {"lstm_lm": 1}
    assert report["model_names"]["lstm_lm"] == {"how": "drawn", "model": {"alexnet": 1}, "jobs": 1}


def test_tiresias_unknown_model_can_be_an_error_naming_line_and_column(tmp_path):
    path = write(tmp_path, TIRESIAS_HEADER, "0,1,0,10,resnet50,5,0", "1,1,0,10,lstm_lm,5,0")
    with pytest.raises(TraceError) as info:
        import_tiresias(path, unknown_models="error")
    message = str(info.value)
    assert "in.csv, line 3, column model_name: unknown model 'lstm_lm'" in message
    assert "known models" in message


def test_tiresias_model_map_must_point_at_known_models():
    with pytest.raises(TraceError, match="model_map maps to unknown model"):
        import_tiresias(TIRESIAS, model_map={"vgg16": "vgg16"})


def test_tiresias_missing_column_is_named(tmp_path):
    path = write(tmp_path, "job_id,num_gpu,submit_time,model_name,duration", "0,1,0,vgg11,5")
    with pytest.raises(TraceError, match=r"in\.csv, line 1: missing column\(s\) iterations"):
        import_tiresias(path)


@pytest.mark.parametrize(
    "row, words",
    [
        ("0,1,0,0,vgg11,5,0", "line 2, column iterations: must be at least 1, got 0"),
        ("0,1,0,10,vgg11,0,0", "line 2, column duration: must be > 0, got 0"),
        ("0,1.5,0,10,vgg11,5,0", "line 2, column num_gpu: expected a whole number, got 1.5"),
        ("0,1,soon,10,vgg11,5,0", "line 2, column submit_time: expected a number, got 'soon'"),
    ],
)
def test_tiresias_bad_values_are_named(tmp_path, row, words):
    with pytest.raises(TraceError, match=words):
        import_tiresias(write(tmp_path, TIRESIAS_HEADER, row))


def test_tiresias_duplicate_ids_name_both_lines(tmp_path):
    path = write(tmp_path, TIRESIAS_HEADER, "7,1,0,10,vgg11,5,0", "7,1,3,10,vgg11,5,0")
    with pytest.raises(TraceError, match="duplicate job_id 7 on line 2 and line 3"):
        import_tiresias(path)


# ---------------------------------------------------------------- Philly


def test_philly_file_becomes_the_hand_worked_canonical_trace():
    # Arrivals offset from the earliest timestamp (10:00:00, on line 3). ResNet-50 at 0.18 s
    # per iteration: 90 s -> 500 iterations, 3600 s -> 20,000, 45 s -> 250.
    frame = import_philly(PHILLY, model_mix={"resnet50": 1.0}, **COMPUTE)
    assert as_rows(frame) == [
        (0, 0.0, 2, "resnet50", 500, 0.18),
        (1, 30.0, 1, "resnet50", 20000, 0.18),
        (2, 3600.0, 8, "resnet50", 250, 0.18),
    ]
    assert frame.attrs["source_line"] == (3, 2, 4)
    assert frame.attrs["import_report"]["models"]["drawn"] == 3


def test_philly_numeric_timestamps_are_seconds(tmp_path):
    path = write(tmp_path, PHILLY_HEADER, "1000.5,100,1,100,1", "1000,100,4,400,1")
    frame = import_philly(path, model_mix={"vgg11": 1.0})
    assert frame["arrival_s"].tolist() == [0.0, 0.5]
    assert frame["num_gpus"].tolist() == [4, 1]


def test_philly_iterations_keep_the_recorded_duration_exactly(tmp_path):
    # AlexNet's table time 0.035 s does not divide 90 s: 2571 iterations of 90/2571 s.
    path = write(tmp_path, PHILLY_HEADER, "0,90,1,90,1")
    frame = import_philly(path, model_mix={"alexnet": 1.0}, **COMPUTE)
    assert frame["total_iterations"].item() == round(90 / ITER_TIME_S["alexnet"]) == 2571
    assert frame["iter_time_s"].item() == pytest.approx(90 / 2571, rel=1e-15)


def test_philly_unparsable_timestamp_is_named(tmp_path):
    path = write(tmp_path, PHILLY_HEADER, "2017-10-03 10:00:00,5,1,5,1", "yesterday,5,1,5,1")
    with pytest.raises(TraceError, match="line 3, column timestamp: expected seconds or a date-time"):
        import_philly(path)


def test_philly_zero_gpu_job_is_an_error_not_dropped(tmp_path):
    path = write(tmp_path, PHILLY_HEADER, "0,5,1,5,1", "1,5,0,0,1")
    with pytest.raises(TraceError, match="line 3, column num_gpus: must be at least 1"):
        import_philly(path)


def test_philly_missing_column_is_named(tmp_path):
    path = write(tmp_path, "timestamp,num_gpus", "0,1")
    with pytest.raises(TraceError, match=r"missing column\(s\) duration"):
        import_philly(path)


def test_philly_models_are_seeded_draws_from_the_paper_mix(tmp_path):
    rows = [f"{i},{60 + i},1,{60 + i},1" for i in range(6000)]
    path = write(tmp_path, PHILLY_HEADER, *rows)
    first = import_philly(path, seed=11)
    again = import_philly(path, seed=11)
    other = import_philly(path, seed=12)
    pd.testing.assert_frame_equal(first, again)
    assert not first["model"].equals(other["model"])
    shares = first["model"].value_counts(normalize=True)
    for model, p in paper_model_mix().items():
        assert abs(shares[model] - p) < 0.03


# ---------------------------------------------------------------- Helios


def test_helios_log_keeps_completed_gpu_jobs_as_worked_out_by_hand():
    # Kept: jA (8 GPUs, 3600 s, 00:10), jF (4 GPUs, 600 s, 00:02), jG (1 GPU, 45 s, 00:10).
    # Dropped: jB used no GPU, jC failed, jD was cancelled, jE ran 0 s. Arrivals count from
    # jF, the first kept job; jA and jG tie at 480 s and keep file order.
    frame = import_helios(HELIOS, model_mix={"resnet50": 1.0}, **COMPUTE)
    assert as_rows(frame) == [
        (0, 0.0, 4, "resnet50", 3333, 600 / 3333),
        (1, 480.0, 8, "resnet50", 20000, 0.18),
        (2, 480.0, 1, "resnet50", 250, 0.18),
    ]
    assert frame.attrs["job_id_map"] == ("jF", "jA", "jG")
    report = frame.attrs["import_report"]
    assert report["rows_read"] == 7 and report["rows_kept"] == 3
    assert report["dropped"] == {"not_completed": 2, "no_gpu": 1, "zero_duration": 1}


def test_helios_submit_times_may_be_seconds(tmp_path):
    path = write(tmp_path, HELIOS_HEADER, "7,u,v,2,1,1,COMPLETED,500,0,0,60,0", "8,u,v,1,1,1,COMPLETED,200,0,0,60,0")
    frame = import_helios(path, model_mix={"vgg11": 1.0})
    assert frame["arrival_s"].tolist() == [0.0, 300.0]
    assert frame.attrs["job_id_map"] == ("8", "7")


def test_helios_bad_duration_of_a_kept_job_is_named(tmp_path):
    path = write(tmp_path, HELIOS_HEADER, "a,u,v,2,1,1,COMPLETED,0,0,0,60,0", "b,u,v,2,1,1,COMPLETED,0,0,0,long,0")
    with pytest.raises(TraceError, match="line 3, column duration: expected a number"):
        import_helios(path)


def test_helios_unparsable_gpu_count_is_named(tmp_path):
    path = write(tmp_path, HELIOS_HEADER, "a,u,v,many,1,1,COMPLETED,0,0,0,60,0")
    with pytest.raises(TraceError, match="line 2, column gpu_num: expected a number"):
        import_helios(path)


def test_helios_duplicate_ids_of_kept_jobs_are_named(tmp_path):
    path = write(
        tmp_path,
        HELIOS_HEADER,
        "a,u,v,2,1,1,COMPLETED,0,0,0,60,0",
        "b,u,v,2,1,1,FAILED,0,0,0,60,0",
        "a,u,v,2,1,1,COMPLETED,9,0,0,60,0",
    )
    with pytest.raises(TraceError, match="duplicate job_id 'a' on line 2 and line 4"):
        import_helios(path)


def test_helios_log_without_a_kept_job_is_an_error(tmp_path):
    path = write(tmp_path, HELIOS_HEADER, "a,u,v,0,1,1,COMPLETED,0,0,0,60,0")
    with pytest.raises(TraceError, match="no completed GPU job"):
        import_helios(path)


def test_helios_missing_column_is_named(tmp_path):
    path = write(tmp_path, "job_id,gpu_num,submit_time,duration", "a,1,0,60")
    with pytest.raises(TraceError, match=r"line 1: missing column\(s\) state"):
        import_helios(path)


# ---------------------------------------------------------------- common


def test_imported_job_larger_than_the_cluster_names_the_file_line():
    cluster = ClusterSpec(racks=1, machines_per_rack=1, gpus_per_machine=4)
    with pytest.raises(
        TraceError, match="helios_cluster_log.csv, line 2, column gpu_num: a job of 8 GPUs, more than the cluster's 4"
    ):
        import_helios(HELIOS, cluster=cluster)


def test_import_trace_dispatches_by_format():
    by_name = import_trace("tiresias", TIRESIAS, seed=5)
    direct = import_tiresias(TIRESIAS, seed=5)
    pd.testing.assert_frame_equal(by_name, direct)
    assert import_trace("helios", HELIOS).attrs["import_report"]["format"] == "helios"


def test_import_trace_rejects_an_unknown_format_listing_the_known_ones():
    with pytest.raises(TraceError, match="unknown trace format 'alibaba'.*tiresias, philly, helios"):
        import_trace("alibaba", TIRESIAS)


def test_imported_traces_round_trip_through_the_loader(tmp_path):
    from dallygym.sim.trace import load_trace, write_trace

    for frame in (import_tiresias(TIRESIAS), import_philly(PHILLY), import_helios(HELIOS)):
        path = write_trace(frame, tmp_path / "x.csv")
        pd.testing.assert_frame_equal(load_trace(path), frame, check_exact=True)
        assert np.all(frame["iter_time_s"] > 0)


# ---------------------------------------------------------------- durations: the wall reading

# 2 racks x 2 machines x 4 GPUs: 1 and 4 GPUs fit one machine, 8 one rack (4 + 4), 12 need
# both racks (8 + 4).
SMALL_CLUSTER = ClusterSpec(racks=2, machines_per_rack=2, gpus_per_machine=4)
TIER_OF = {1: "machine", 4: "machine", 8: "rack", 12: "network"}
GAVEL_TYPE = "ResNet-50 (batch size 64)"


def gavel_table(tmp_path: Path, rates: dict[tuple[str, int], float]) -> Path:
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps({"v100": {str(k): {"null": r} for k, r in rates.items()}}))
    return path


def one_job_import(fmt: str, tmp_path: Path, gpus: int, duration: float, **options):
    """Import a one-job file of ``fmt`` whose recorded duration is ``duration`` seconds."""
    mix = {"model_mix": {"resnet50": 1.0}}
    if fmt == "tiresias":
        path = write(tmp_path, TIRESIAS_HEADER, f"0,{gpus},0,1000,resnet50,{duration},0")
        return import_tiresias(path, **options)
    if fmt == "philly":
        path = write(tmp_path, PHILLY_HEADER, f"2017-10-03 10:00:00,{duration},{gpus},0,vc1")
        return import_philly(path, **mix, **options)
    if fmt == "helios":
        path = write(tmp_path, HELIOS_HEADER, f"j,u,vc1,{gpus},1,1,COMPLETED,2020-04-01 00:00:00,,,{duration},0")
        return import_helios(path, **mix, **options)
    # Gavel: 1000 steps at 1000 / duration steps per second take `duration` seconds.
    path = tmp_path / "one.trace"
    path.write_text(f"{GAVEL_TYPE}\tcmd\t-step\t1\t1000\t0.0\t{gpus}\n")
    table = gavel_table(tmp_path, {(GAVEL_TYPE, gpus): 1000 / duration})
    return import_gavel(path, throughputs=table, **options)


@pytest.mark.parametrize("fmt", ["tiresias", "philly", "helios", "gavel"])
@pytest.mark.parametrize("gpus", [1, 4, 8, 12])
def test_a_job_alone_finishes_in_its_recorded_duration(tmp_path, fmt, gpus):
    from dallygym.sim.simulate import simulate

    frame = one_job_import(fmt, tmp_path, gpus, 3600, cluster=SMALL_CLUSTER)
    report = frame.attrs["import_report"]
    assert report["durations"] == "wall"
    assert report["best_tier"][TIER_OF[gpus]] == 1
    ideal = float(frame["total_iterations"].item() * frame["iter_time_s"].item())
    if gpus > 1:
        assert ideal < 3600 * 0.95  # resnet50 loses >= 11 % to communication on 2+ GPUs
    else:
        assert ideal == pytest.approx(3600, rel=1e-15)
    result = simulate(frame, SMALL_CLUSTER, policy="fifo")
    job = result.jobs.iloc[0]
    assert job["jct_s"] == pytest.approx(3600, rel=1e-12)
    assert job["queue_s"] == 0
    # The compute reading adds modelled communication on top.
    compute = one_job_import(fmt, tmp_path, gpus, 3600, cluster=SMALL_CLUSTER, durations="compute")
    jct = simulate(compute, SMALL_CLUSTER, policy="fifo").jobs["jct_s"].item()
    assert jct == pytest.approx(3600**2 / ideal, rel=1e-12)
    assert compute.attrs["import_report"]["durations"] == "compute"


# Policies that take the engine's best-fit placement at the tier they accept. (Gandiva puts a
# job larger than a machine on any free GPUs: alone, it may run slower than recorded -- a
# placement choice of that policy, which is what the comparison measures.)
@pytest.mark.parametrize("policy", ["dally", "tiresias", "fifo"])
def test_the_recorded_duration_holds_under_best_fit_policies(tmp_path, policy):
    from dallygym.sim.simulate import simulate

    frame = one_job_import("philly", tmp_path, 12, 7200.0, cluster=SMALL_CLUSTER)
    jct = simulate(frame, SMALL_CLUSTER, policy=policy).jobs["jct_s"].item()
    assert jct == pytest.approx(7200, rel=1e-12)


def test_the_best_placement_is_the_engines_consolidated_one():
    from dallygym.sim.trace.importers import best_placement_shape

    spec = ClusterSpec(racks=3, machines_per_rack=4, gpus_per_machine=8)
    assert best_placement_shape(spec, 8)[1] == ((8,),)
    assert best_placement_shape(spec, 20)[1] == ((8, 8, 4),)
    assert best_placement_shape(spec, 40)[1] == ((8, 8, 8, 8), (8,))


def test_wall_reading_needs_a_cluster():
    with pytest.raises(TraceError, match="durations='wall' needs the target cluster"):
        import_tiresias(TIRESIAS, cluster=None)


# ---------------------------------------------------------------- Gavel

GAVEL_LINES = [
    # line 1, 7 fields: 600 steps at 30 steps/s = 20 s, arrives at 10 s, 1 GPU
    "ResNet-18 (batch size 32)\tcd x && python3 train.py\t-step\t1\t600\t10.000000\t1",
    # line 2, 10 fields: 1000 steps at 8 steps/s = 125 s, arrives at 0 s, 2 GPUs
    "Transformer (batch size 64)\tpython3 t.py\t/wd\t-step\t1\t1000\t2\t1\t-1\t0.0",
    # line 3, 7 fields: A3C has no 4-GPU rate: 5 steps/s x 4 = 20 steps/s, 500 steps = 25 s
    "A3C\tpython3 main.py\t--max-steps\t0\t500\t5.0\t4",
]
GAVEL_RATES = {("ResNet-18 (batch size 32)", 1): 30.0, ("Transformer (batch size 64)", 2): 8.0, ("A3C", 1): 5.0}


def gavel_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "vc.trace"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_gavel_7_and_10_field_lines_become_the_hand_worked_trace(tmp_path):
    frame = import_gavel(
        gavel_file(tmp_path, GAVEL_LINES),
        throughputs=gavel_table(tmp_path, GAVEL_RATES),
        model_map={"A3C": "alexnet"},
        **COMPUTE,
    )
    assert as_rows(frame) == [
        (0, 0.0, 2, "bert_large", 1000, 0.125),
        (1, 5.0, 4, "alexnet", 500, 0.05),
        (2, 10.0, 1, "resnet18", 600, 20 / 600),
    ]
    assert frame.attrs["source_line"] == (2, 3, 1)
    report = frame.attrs["import_report"]
    assert report["throughputs"]["from_table"] == 2
    assert report["throughputs"]["fallback_1gpu_rate_x_scale"] == 1
    assert report["throughputs"]["fallback_pairs"] == {"A3C x4": 1}
    assert report["layout"] == {"7_fields": 2, "10_fields": 1}
    assert report["models"] == {"as_is": 0, "aliased": 1, "family": 1, "mapped": 1, "drawn": 0}
    assert report["model_names"]["Transformer (batch size 64)"]["how"] == "family"


def test_gavel_missing_throughput_can_be_an_error_naming_the_line(tmp_path):
    with pytest.raises(
        TraceError,
        match=r"vc\.trace, line 3, column job_type: no v100 "
        r"throughput for 'A3C' at scale factor 4",
    ):
        import_gavel(
            gavel_file(tmp_path, GAVEL_LINES),
            throughputs=gavel_table(tmp_path, GAVEL_RATES),
            missing_throughput="error",
        )


def test_gavel_job_type_without_any_rate_is_an_error(tmp_path):
    rates = {k: v for k, v in GAVEL_RATES.items() if k[0] != "A3C"}
    with pytest.raises(TraceError, match="line 3, column job_type: .*'A3C'.*no 1-GPU rate"):
        import_gavel(gavel_file(tmp_path, GAVEL_LINES), throughputs=gavel_table(tmp_path, rates))


@pytest.mark.parametrize(
    "bad, words",
    [
        ("A3C\tx\t-n\t0\t500\t5.0\t4\textra", r"line 2: 8 tab-separated fields; a Gavel trace line has 7"),
        ("A3C\tx\t-n\t0\tmany\t5.0\t4", r"line 2, column total_steps: expected a number, got 'many'"),
        ("A3C\tx\t-n\t0\t500\t5.0\t0", r"line 2, column scale_factor: must be at least 1"),
        ("", r"line 2: blank line inside the data"),
    ],
)
def test_gavel_bad_lines_are_named(tmp_path, bad, words):
    path = gavel_file(tmp_path, [GAVEL_LINES[0], bad, GAVEL_LINES[2]])
    with pytest.raises(TraceError, match=words):
        import_gavel(path, throughputs=gavel_table(tmp_path, GAVEL_RATES))


def test_gavel_unknown_worker_type_lists_the_known_ones(tmp_path):
    with pytest.raises(TraceError, match="no worker type 'a100'; the table has v100"):
        import_gavel(
            gavel_file(tmp_path, GAVEL_LINES), throughputs=gavel_table(tmp_path, GAVEL_RATES), worker_type="a100"
        )


def test_gavel_draws_are_seeded_and_reported(tmp_path):
    path = gavel_file(tmp_path, GAVEL_LINES)
    table = gavel_table(tmp_path, GAVEL_RATES)
    first = import_gavel(path, throughputs=table, seed=4)
    again = import_gavel(path, throughputs=table, seed=4)
    pd.testing.assert_frame_equal(first, again, check_exact=True)
    assert first.attrs["import_report"]["models_drawn_for"] == {"A3C": 1}


# ---------------------------------------------------------------- model names


def test_family_aliases_apply_before_any_draw_and_the_map_wins(tmp_path):
    path = write(
        tmp_path,
        TIRESIAS_HEADER,
        "0,1,0,10,vgg19,5,0",
        "1,1,0,10,resnet152,5,0",
        "2,1,0,10,inception3,5,0",
        "3,1,0,10,googlenet,5,0",
        "4,1,0,10,inception4,5,0",
    )
    frame = import_tiresias(path, model_map={"inception4": "vgg11"}, unknown_models="error")
    assert frame["model"].tolist() == ["vgg11", "resnet50", "resnet50", "resnet18", "vgg11"]
    report = frame.attrs["import_report"]
    assert report["models"] == {"as_is": 0, "aliased": 0, "family": 4, "mapped": 1, "drawn": 0}
    assert report["model_names"]["googlenet"] == {"how": "family", "model": "resnet18", "jobs": 1}
    assert report["model_names"]["inception4"]["how"] == "mapped"


def test_philly_refuses_a_model_map_it_cannot_use():
    with pytest.raises(TraceError, match="names no model, so model_map has nothing to map"):
        import_philly(PHILLY, model_map={"x": "vgg11"})


# ---------------------------------------------------------------- filters

# On 2 racks x 2 machines x 8 GPUs (32 GPUs) line 4's 64-GPU job is too large.
FILTER_ROWS = [
    "2017-10-01 00:00:00,100,1,100,a",  # line 2, 0 h
    "2017-10-01 01:00:00,200,2,400,b",  # line 3, 1 h
    "2017-10-01 02:00:00,300,64,19200,a",  # line 4, 2 h, larger than the cluster
    "2017-10-01 03:00:00,400,4,1600,a",  # line 5, 3 h
    "2017-10-01 05:00:00,500,8,4000,b",  # line 6, 5 h
]
C32 = ClusterSpec(racks=2, machines_per_rack=2, gpus_per_machine=8)


def philly_filtered(tmp_path, **options):
    path = write(tmp_path, PHILLY_HEADER, *FILTER_ROWS)
    return import_philly(path, model_mix={"resnet50": 1.0}, cluster=C32, **COMPUTE, **options)


def durations_of(frame):
    return (frame["total_iterations"] * frame["iter_time_s"]).round(6).tolist()


def test_oversize_error_names_the_source_line_and_column(tmp_path):
    with pytest.raises(
        TraceError,
        match=r"in\.csv, line 4, column num_gpus: a job of 64 GPUs, "
        r"more than the cluster's 32",
    ):
        philly_filtered(tmp_path)


def test_oversize_drop_removes_and_reports_the_row(tmp_path):
    frame = philly_filtered(tmp_path, oversize="drop")
    assert durations_of(frame) == [100, 200, 400, 500]
    assert frame.attrs["source_line"] == (2, 3, 5, 6)
    report = frame.attrs["import_report"]
    assert report["dropped"] == {"oversize": 1}
    assert report["oversize"]["rows"] == [{"line": "line 4", "job": None, "num_gpus": 64, "action": "dropped"}]


def test_oversize_clamp_cuts_the_job_to_the_cluster_and_reports_it(tmp_path):
    frame = philly_filtered(tmp_path, oversize="clamp")
    assert frame["num_gpus"].tolist() == [1, 2, 32, 4, 8]
    assert durations_of(frame) == [100, 200, 300, 400, 500]
    assert frame.attrs["import_report"]["oversize"]["rows"] == [
        {"line": "line 4", "job": None, "num_gpus": 64, "action": "clamped to 32"}
    ]


def test_virtual_cluster_filter(tmp_path):
    frame = philly_filtered(tmp_path, vc="b")
    assert durations_of(frame) == [200, 500]
    assert frame["arrival_s"].tolist() == [0.0, 4 * 3600.0]
    assert frame.attrs["import_report"]["dropped"] == {"other_virtual_cluster": 3}
    both = philly_filtered(tmp_path, vc=["a", "b"], oversize="drop")
    assert len(both) == 4


def test_unknown_virtual_cluster_lists_the_files_ones(tmp_path):
    with pytest.raises(TraceError, match="column cluster: no job of virtual cluster.* c; the file has a, b"):
        philly_filtered(tmp_path, vc="c")


def test_hour_window_is_half_open_and_shifts_arrivals(tmp_path):
    # [1 h, 5 h): lines 3, 4, 5; the 64-GPU job is dropped, line 6 (at 5 h) is outside.
    frame = philly_filtered(tmp_path, start_h=1, end_h=5, oversize="drop")
    assert durations_of(frame) == [200, 400]
    assert frame["arrival_s"].tolist() == [0.0, 7200.0]
    report = frame.attrs["import_report"]
    assert report["dropped"] == {"outside_window": 2, "oversize": 1}
    assert report["arrival_shift_s"] == 3600.0


def test_date_window_equals_the_hour_window(tmp_path):
    by_date = philly_filtered(tmp_path, start="2017-10-01 01:00", end="2017-10-01 05:00", oversize="drop")
    by_hours = philly_filtered(tmp_path, start_h=1, end_h=5, oversize="drop")
    pd.testing.assert_frame_equal(by_date, by_hours)


def test_oversize_outside_the_window_is_not_an_error(tmp_path):
    frame = philly_filtered(tmp_path, end_h=2)
    assert durations_of(frame) == [100, 200]


def test_max_jobs_counts_after_the_other_filters(tmp_path):
    frame = philly_filtered(tmp_path, oversize="drop", max_jobs=3)
    assert durations_of(frame) == [100, 200, 400]
    assert frame.attrs["import_report"]["dropped"] == {"oversize": 1, "max_jobs": 1}


def test_filters_that_do_not_apply_are_errors(tmp_path):
    with pytest.raises(TraceError, match="no virtual-cluster column"):
        import_tiresias(TIRESIAS, vc="a")
    seconds = write(tmp_path, PHILLY_HEADER, "0,5,1,5,a", "10,5,1,5,a", name="s.csv")
    with pytest.raises(TraceError, match="not date-times; give the window in hours"):
        import_philly(seconds, start="2017-10-01")
    with pytest.raises(TraceError, match="no job is left after the filters"):
        philly_filtered(tmp_path, start_h=6)
    with pytest.raises(TraceError, match="the time window is empty"):
        philly_filtered(tmp_path, start_h=3, end_h=1)


def test_helios_virtual_cluster_and_window(tmp_path):
    # Kept by the format: jA (vc1, 00:10), jF (vc1, 00:02), jG (vc2, 00:10).
    frame = import_helios(HELIOS, vc="vc1", model_mix={"resnet50": 1.0}, **COMPUTE)
    assert frame.attrs["job_id_map"] == ("jF", "jA")
    late = import_helios(HELIOS, start="2020-04-01 00:05", model_mix={"resnet50": 1.0}, **COMPUTE)
    assert late.attrs["job_id_map"] == ("jA", "jG")
    assert late["arrival_s"].tolist() == [0.0, 0.0]


def test_oversize_drop_names_tiresias_job_ids(tmp_path):
    path = write(tmp_path, TIRESIAS_HEADER, "5,1,0,10,vgg11,5,0", "6,40,1,10,vgg11,5,0")
    frame = import_tiresias(path, cluster=C32, oversize="drop")
    assert frame["job_id"].tolist() == [5]
    assert frame.attrs["import_report"]["oversize"]["rows"] == [
        {"line": "line 3", "job": 6, "num_gpus": 40, "action": "dropped"}
    ]


# ---------------------------------------------------------------- filters on load


CANONICAL = [
    "job_id,arrival_s,num_gpus,model,total_iterations,iter_time_s",
    "7,0,1,vgg11,10,1.0",
    "3,3600,64,vgg11,10,1.0",
    "9,1800,2,vgg11,10,1.0",
    "4,9000,4,vgg11,10,1.0",
]


def test_load_filters_name_the_file_line_and_report(tmp_path):
    from dallygym.sim.trace import load_trace

    path = write(tmp_path, CANONICAL[0], *CANONICAL[1:], name="jobs.csv")
    with pytest.raises(TraceError, match=r"jobs\.csv, line 3, column num_gpus: a job of 64 GPUs"):
        load_trace(path, cluster=C32, max_jobs=10)
    dropped = load_trace(path, cluster=C32, oversize="drop")
    assert dropped["job_id"].tolist() == [7, 9, 4]
    assert dropped.attrs["load_report"]["oversize"]["rows"] == [
        {"line": "line 3", "job": 3, "num_gpus": 64, "action": "dropped"}
    ]
    clamped = load_trace(path, cluster=C32, oversize="clamp", start_h=0.5, end_h=2.5)
    assert clamped["job_id"].tolist() == [9, 3]
    assert clamped["num_gpus"].tolist() == [2, 32]
    assert clamped["arrival_s"].tolist() == [0.0, 1800.0]
    assert clamped.attrs["load_report"]["dropped"] == {"outside_window": 2}
    first = load_trace(path, max_jobs=2)
    assert first["job_id"].tolist() == [7, 9]
    assert first["arrival_s"].tolist() == [0.0, 1800.0]


# ---------------------------------------------------------------- the CLI


def test_cli_import_reports_dropped_rows_on_stderr_and_in_the_report(tmp_path, capsys):
    from dallygym.experiments.cli import main

    src = write(tmp_path, PHILLY_HEADER, *FILTER_ROWS)
    out, rep = tmp_path / "out.csv", tmp_path / "rep.json"
    code = main(
        [
            "trace",
            "import",
            "philly",
            str(src),
            "--racks",
            "2",
            "--machines-per-rack",
            "2",
            "--gpus-per-machine",
            "8",
            "--cluster",
            "a",
            "--oversize",
            "drop",
            "--out",
            str(out),
            "--report",
            str(rep),
        ]
    )
    stdout, stderr = capsys.readouterr()
    assert code == 0
    assert stderr.strip() == (f"dallygym: note: {src}, line 4: a job of 64 GPUs dropped (larger than the cluster)")
    assert "wrote 2 jobs" in stdout and "durations: wall" in stdout
    report = json.loads(rep.read_text())
    assert report["dropped"] == {"other_virtual_cluster": 2, "oversize": 1}
    assert report["durations"] == "wall"
    assert len(pd.read_csv(out)) == 2


def test_cli_import_error_is_one_line_naming_the_source_line(tmp_path, capsys):
    from dallygym.experiments.cli import main

    src = write(tmp_path, PHILLY_HEADER, *FILTER_ROWS)
    code = main(
        [
            "trace",
            "import",
            "philly",
            str(src),
            "--racks",
            "2",
            "--machines-per-rack",
            "2",
            "--gpus-per-machine",
            "8",
            "--out",
            str(tmp_path / "o.csv"),
        ]
    )
    _, stderr = capsys.readouterr()
    assert code == 2
    assert stderr.count("\n") == 1
    assert f"{src}, line 4, column num_gpus: a job of 64 GPUs" in stderr


def test_cli_gavel_with_model_map(tmp_path, capsys):
    from dallygym.experiments.cli import main

    src = gavel_file(tmp_path, GAVEL_LINES)
    out = tmp_path / "g.csv"
    code = main(
        [
            "trace",
            "import",
            "gavel",
            str(src),
            "--throughputs",
            str(gavel_table(tmp_path, GAVEL_RATES)),
            "--model-map",
            "A3C=alexnet",
            "--durations",
            "compute",
            "--out",
            str(out),
        ]
    )
    stdout, _ = capsys.readouterr()
    assert code == 0
    assert "1 by the 1-GPU rate x scale factor" in stdout
    assert pd.read_csv(out)["model"].tolist() == ["bert_large", "alexnet", "resnet18"]
    code = main(
        ["trace", "import", "gavel", str(src), "--model-map", "A3C", "--throughputs", "x.json", "--out", str(out)]
    )
    assert code == 2
    assert "--model-map expects NAME=MODEL" in capsys.readouterr().err
