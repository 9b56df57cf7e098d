"""Train a MaskablePPO agent on Dally-v0.

    python agents/train.py [--sensitivity hidden|observed|oracle] [--total-timesteps 1000000]
                           [--time-limit-min 60] [--seed 0] [--out agents/runs/ppo-hidden]

The same as ``dallygym train`` (every option of that command works here). The whole
procedure -- environments drawing a fresh seeded batch-500 trace at every reset, the PPO
settings and why, evaluation with action masks on fixed validation traces, checkpoints, the
wall-clock guard, what is saved -- reads top to bottom in ``dallygym/learning/trainer.py:train``.
"""

import sys

from dallygym.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
