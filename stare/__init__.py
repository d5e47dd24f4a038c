"""stare."""
