"""`python -m sagacity.cli`."""

import sys

from sagacity.cli import main

sys.exit(main())
