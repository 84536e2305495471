"""poise.firmware_bridge."""
