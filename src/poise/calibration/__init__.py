"""poise.calibration."""
