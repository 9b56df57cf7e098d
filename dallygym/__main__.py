"""``python -m dallygym``: the ``dallygym`` command, for environments where its script is not on PATH."""

import sys

from .cli import main

sys.exit(main())
