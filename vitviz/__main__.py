"""`python -m vitviz`: the same as the `vitviz` command."""

import sys

from .cli import main

sys.exit(main())
