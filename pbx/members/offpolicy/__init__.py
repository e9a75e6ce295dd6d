"""The replay-buffer agents: SAC, TD3 and DQN.

- :mod:`~pbx.members.offpolicy.member`: what they share (the replay buffer, updates every ``train_freq`` steps);
- :mod:`~pbx.members.offpolicy.sac`, :mod:`~pbx.members.offpolicy.td3`, :mod:`~pbx.members.offpolicy.dqn`: each
  agent's loss settings and defaults;
- :mod:`~pbx.members.offpolicy.replay_store`: the buffer on disk beside the checkpoints.
"""
