"""pbx: population-based hyperparameter schedules (PBT, PB2) for reinforcement learning."""

__version__ = "0.1.0"
