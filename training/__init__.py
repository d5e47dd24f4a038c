"""Training: the only package that wires stare/, agents/, envs/ and tasks/ together."""

__version__ = "0.1.0"
