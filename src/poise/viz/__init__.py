"""Figures (matplotlib, Agg): above ``ik`` and ``models``, below the CLI."""
