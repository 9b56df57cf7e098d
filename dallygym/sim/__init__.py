"""The simulation core: the cluster and its placements, the latency model and model profiles,
traces, the engine (reference semantics and its compiled twin), the schedulers, and the run
metrics. Nothing here knows about Gymnasium or learning."""
