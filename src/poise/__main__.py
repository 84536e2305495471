"""``python -m poise`` runs the command line."""

import sys

from poise.cli import main

sys.exit(main())
