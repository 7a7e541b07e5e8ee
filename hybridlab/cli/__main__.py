"""`python -m hybridlab.cli ARGS`: the `hybridlab` command (what subprocesses and tests run)."""

import sys

from hybridlab.cli import main

sys.exit(main())
