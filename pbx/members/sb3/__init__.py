"""What every Stable-Baselines3 agent shares, one module per concern; the agents (``ppo/``, ``a2c.py``,
``offpolicy/``) build on it and nothing here imports them.

- :mod:`~pbx.members.sb3.agent`: what an agent declares (its table) and what a run asks of its class;
- :mod:`~pbx.members.sb3.member`: the member that trains: envs, random streams, a diverged update rolled back,
  hyperparameters applied where SB3 reads them, test episodes;
- :mod:`~pbx.members.sb3.settings`: the settings every agent has, and the one table of valid values;
- :mod:`~pbx.members.sb3.checkpoint`: the checkpoint file, a resume, an exploit, an export;
- :mod:`~pbx.members.sb3.learner`, :mod:`~pbx.members.sb3.normalize`: the learner as SB3 saves it, and the
  observation and reward statistics that belong to it;
- :mod:`~pbx.members.sb3.episodes`, :mod:`~pbx.members.sb3.log`: what a round's score counts, and SB3's logger;
- :mod:`~pbx.members.sb3.process`: threads, device and random states in a process that trains several members.
"""
