"""``python -m pytest_graphbudget.cli ...`` is ``graph-budget ...``."""

import sys

from pytest_graphbudget.cli import main

sys.exit(main())
