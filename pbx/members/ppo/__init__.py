"""PPO, the ProcGen paper's agent, and DrAC's PPO.

- :mod:`~pbx.members.ppo.ppo`: the member (IMPALA CNN on ProcGen, an MLP on gymnasium ids);
- :mod:`~pbx.members.ppo.settings`: its settings, and the minibatch that must divide the rollout;
- :mod:`~pbx.members.ppo.update`: SB3's PPO update with the reference value loss, and room for more loss terms;
- :mod:`~pbx.members.ppo.impala`: the IMPALA CNN policy;
- :mod:`~pbx.members.ppo.drac`, :mod:`~pbx.members.ppo.augment`: DrAC's member and its image augmentations.
"""
