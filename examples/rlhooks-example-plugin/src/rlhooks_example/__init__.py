"""Example third-party rlhooks plugin: ``csv`` backend and ``length_penalty`` reward function."""

from rlhooks_example.csv_backend import CsvBackend
from rlhooks_example.rewards import LengthPenalty

__all__ = ["CsvBackend", "LengthPenalty"]
