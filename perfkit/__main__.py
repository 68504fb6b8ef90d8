"""`python -m perfkit` runs the CLI."""

import sys

from perfkit.cli import main

sys.exit(main())
