"""Traces: the canonical job table, its one validating loader, generators and importers.

* :mod:`dallygym.sim.trace.schema` -- :data:`TRACE_COLUMNS`, :func:`load_trace` (the one way in:
  a shipped name, a CSV path or a DataFrame), :func:`validate_trace`, :func:`write_trace`,
  the shipped files (:func:`shipped_traces`).
* :mod:`dallygym.sim.trace.generators` -- seeded workloads matching the paper's traces
  (:data:`GENERATORS`, :func:`generate_trace`, :func:`regenerate_shipped`).
* :mod:`dallygym.sim.trace.importers` -- Tiresias, Philly, Helios and Gavel formats
  (:func:`import_trace`), with filters (:mod:`dallygym.sim.trace.filters`) and the duration reading.
* :mod:`dallygym.sim.trace.real` -- the shipped real-trace windows and how each is regenerated.

The format, the generators' statistics and each importer's rules are documented in
``docs/traces.md``.
"""

from dallygym.sim.trace.filters import OVERSIZE_MODES
from dallygym.sim.trace.generators import (
    GENERATOR_VERSION,
    GENERATORS,
    ITER_TIME_JITTER_SIGMA,
    ITER_TIME_S,
    PAPER_MODEL_COUNTS,
    SHIPPED_SEEDS,
    DurationModel,
    WorkloadSpec,
    generate_trace,
    largest_remainder,
    paper_model_mix,
    regenerate_shipped,
    scaled_spec,
    workload_targets,
)
from dallygym.sim.trace.importers import (
    DEFAULT_IMPORT_CLUSTER,
    DURATION_READINGS,
    FAMILY_ALIASES,
    IMPORTERS,
    MODEL_ALIASES,
    ImportOptions,
    best_speed_factors,
    import_gavel,
    import_helios,
    import_philly,
    import_tiresias,
    import_trace,
)
from dallygym.sim.trace.schema import (
    TRACE_COLUMNS,
    TRACE_DTYPES,
    TraceError,
    check_trace_fits,
    load_trace,
    sha256_of,
    shipped_trace_dir,
    shipped_trace_path,
    shipped_traces,
    trace_stats,
    validate_trace,
    write_trace,
)

__all__ = [
    "DEFAULT_IMPORT_CLUSTER",
    "DURATION_READINGS",
    "FAMILY_ALIASES",
    "OVERSIZE_MODES",
    "ImportOptions",
    "best_speed_factors",
    "import_gavel",
    "GENERATORS",
    "GENERATOR_VERSION",
    "IMPORTERS",
    "ITER_TIME_JITTER_SIGMA",
    "ITER_TIME_S",
    "MODEL_ALIASES",
    "PAPER_MODEL_COUNTS",
    "SHIPPED_SEEDS",
    "TRACE_COLUMNS",
    "TRACE_DTYPES",
    "DurationModel",
    "TraceError",
    "WorkloadSpec",
    "check_trace_fits",
    "generate_trace",
    "scaled_spec",
    "import_helios",
    "import_philly",
    "import_tiresias",
    "import_trace",
    "largest_remainder",
    "load_trace",
    "paper_model_mix",
    "regenerate_shipped",
    "sha256_of",
    "shipped_trace_dir",
    "shipped_trace_path",
    "shipped_traces",
    "trace_stats",
    "validate_trace",
    "workload_targets",
    "write_trace",
]
