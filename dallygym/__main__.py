"""``python -m dallygym``: the ``dallygym`` command, for environments where its script is not on PATH."""

import sys

from .experiments.cli import main

sys.exit(main())
