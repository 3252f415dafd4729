"""Launchers: where a benchmark runs (this process, or a fresh process per benchmark)."""
