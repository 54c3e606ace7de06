"""affmon: see where GPU training processes' threads run, and fix their CPU placement."""

__version__ = "0.1.0"
