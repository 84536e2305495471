"""poise.gui."""
