"""`python -m ets` is the `ets` command."""

import sys

from ets.app.cli import main

sys.exit(main())
