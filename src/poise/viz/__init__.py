"""Figures (matplotlib, Agg): above ``ik`` and ``models``, below the CLI.

Needs the ``plot`` extra (``pip install 'poise[plot]'``): importing this package without
matplotlib raises :class:`poise.api.extras.MissingExtra`, which says so.
"""

from poise.api.extras import require

require("plot", "poise.viz (figures)")
