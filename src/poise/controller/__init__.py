"""poise.controller."""
