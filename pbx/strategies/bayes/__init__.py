"""What the Bayesian strategies (PB2, BG-PBT, IPBT) share, apart from the strategies themselves.

``kernels`` (GPy kernels: time-varying, overlap, CoCaBO's mixed), ``sqexp`` (their squared exponential in NumPy,
for the acquisition), ``gp`` (fitting one), ``observations`` (the improvement rates a GP learns), ``acquisition``
(UCB and its maximisation, the trust region's search), ``categorical`` and ``exp3`` (the categorical choices:
CoCaBO's bandit, EXP3.M with DepRound). A package of its own, as Optuna keeps its GP code in one: the strategy
folder then holds strategies.
"""
