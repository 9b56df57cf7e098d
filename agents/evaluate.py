"""Evaluate learned and heuristic agents on held-out traces and print (and save) the table.

    python agents/evaluate.py --agent agents/runs/ppo-hidden --agent dally --agent tiresias \
        --racks 8 --trace traces/heldout/batch-500-seed2001.csv [--trace ...] [--out results.csv]

The same as ``dallygym evaluate``: one row per agent (and trace), with the summary keys of
``dallygym simulate``. Heuristics run natively; a learned agent answers Dally-v0 offers in the
observation mode it was trained with (``dallygym/learning/trainer.py``).
"""

import sys

from dallygym.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
