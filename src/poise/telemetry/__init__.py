"""poise.telemetry."""
