"""Runners: the only place that trains members, applies decisions and moves checkpoints."""
