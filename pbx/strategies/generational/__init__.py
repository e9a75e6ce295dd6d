"""The parts BG-PBT and IPBT (:mod:`pbx.strategies.bgpbt`, :mod:`pbx.strategies.ipbt`) are built from.

- :mod:`~pbx.strategies.generational.base`: :class:`~pbx.strategies.generational.base.Generational`, what both
  do within a generation (the larger first population's cut, exploit by truncation), and their settings;
- :mod:`~pbx.strategies.generational.trust_region`: their explore, PB2's GP bandit in a trust region around the
  donor;
- :mod:`~pbx.strategies.generational.restart`: the BO across finished generations that picks a restart's configs;
- :mod:`~pbx.strategies.generational.stagnation`: IPBT's smoothed-best rule that calls a restart;
- :mod:`~pbx.strategies.generational.svgp`: that rule's sparse GP in plain torch, loaded at its first use.

Nothing is imported here, so a run that never tests stagnation never loads torch.
"""
