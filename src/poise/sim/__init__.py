"""poise.sim."""
