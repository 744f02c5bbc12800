"""warmup_kit: real collectives and a validated topology model."""
__version__ = "0.1.0"
