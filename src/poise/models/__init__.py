"""poise.models."""
