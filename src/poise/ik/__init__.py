"""poise.ik."""
