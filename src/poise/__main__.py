"""``python -m poise`` runs the command line."""

import sys

from poise._entry import main

sys.exit(main())
