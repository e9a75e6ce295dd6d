"""A2C, synchronous advantage actor-critic.

- :mod:`~pbx.members.a2c.a2c`: the member, its settings and its defaults per task family.
"""
