"""Stand-ins for hardware libraries so GPU code paths run on CPU-only machines."""
