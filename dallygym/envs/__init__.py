"""The Gymnasium environments (``Dally-v0``: the offer question; ``DallyQueue-v0``: the job placed
next), their shared base, observations, rendering, the heuristic agents that act through them,
and the lookahead search their snapshots make possible."""
