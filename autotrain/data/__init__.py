"""Dataset loading and column mapping per task."""
