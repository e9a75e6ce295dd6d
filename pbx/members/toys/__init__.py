"""The toys: NumPy members that train in microseconds, for tests and strategy research.

- :mod:`~pbx.members.toys.toy`: the PBT paper's toy problem (Fig. 2), and ``toy-cat`` with a categorical optimiser;
- :mod:`~pbx.members.toys.deceptive`: the deceptive toy, whose best schedule loses every early round.
"""
