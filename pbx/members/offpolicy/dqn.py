"""DQN (Mnih et al., 2015) as a population member: SB3's DQN with rl-zoo's tuned defaults.

Run-time hyperparameters, SB3's names, and where SB3 reads them: ``learning_rate`` (the
Q-network's optimizer, reset from ``lr_schedule`` at each update), ``gamma``, ``tau``,
``batch_size``, ``gradient_steps``, ``target_update_interval``, ``max_grad_norm`` (read at
each use), ``train_freq`` (a ``TrainFreq`` SB3 builds once), ``exploration_fraction`` and
``exploration_final_eps`` (the epsilon schedule SB3 builds once; rebuilt, and epsilon set
from it at once, so the next action already explores at the new rate).

SB3's schedules run from the start to the end of one ``learn`` call, which a member makes
once a round; here epsilon is a function of the member's own step count instead, over
``schedule_timesteps`` steps (rl-zoo's tuned budget for the task family, so
``exploration_fraction`` keeps its tuned meaning whatever the run's length), across rounds,
exploits and resumes alike. ``_n_calls``, which times the target network's updates,
counts env steps with ``steps``: saved, and the donor's on an exploit.

On Atari the defaults are rl-zoo's ``atari`` row (``hyperparams/dqn.yml``) as it stood from
v1.2.0 to v1.5.0 (commit 4c69c8c, 2021): a 100k-transition buffer with ``optimize_memory_usage``,
which stores each 84x84x4 observation once instead of twice, 2.8 GB a member instead of 5.6 GB
(4 members: 11.3 GB, against 22.6 GB). The row has changed across rl-zoo's versions: a 1M buffer
with 10k steps between target updates and ``optimize_memory_usage`` before its first release; a
10k buffer, target updates every 1k steps and a final epsilon of 0.01 in v0.10.0, with
``optimize_memory_usage`` from v0.11.1; 100k from v1.2.0; ``optimize_memory_usage: False`` from
v1.6.0 to this day (v2.8.0), as SB3 refuses it together with ``handle_timeout_termination`` (on by
default; SB3 issue #934). pbx keeps the memory-saving buffer and turns the time-limit handling
off, as rl-zoo's comment on the row says to: v5 cuts a game off at 108k frames (27k agent steps),
and that one transition is then stored as the game's end, not bootstrapped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs.families import ATARI, BOX2D, CLASSIC, OTHER  # isort: skip
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.utils import LinearSchedule

from pbx.members.offpolicy.member import OffPolicyMember, OffPolicyRun, OffPolicySettings
from pbx.members.sb3.agent import AgentDefaults
from pbx.members.sb3.settings import DOMAINS, Domain, finite_number, positive_int


@dataclass
class DQNSettings(OffPolicySettings):
    """SB3's DQN defaults (those it shares with SAC and TD3 redeclared at DQN's values); ``hyperparameters`` lists
    what a search may change."""

    agent: ClassVar[str] = "DQN"
    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "gamma", "tau", "batch_size", "train_freq", "gradient_steps", "target_update_interval",
        "exploration_fraction", "exploration_final_eps", "max_grad_norm")
    integers: ClassVar[tuple[str, ...]] = (*OffPolicySettings.integers, "target_update_interval")
    domains: ClassVar[Mapping[str, Domain]] = {
        **DOMAINS,
        "target_update_interval": (positive_int, "a positive integer (env steps)"),
        "exploration_fraction": (lambda v: finite_number(v) and 0 < v <= 1, "in (0, 1]"),
        "exploration_initial_eps": (lambda v: finite_number(v) and 0 <= v <= 1, "in [0, 1]"),
        "exploration_final_eps": (lambda v: finite_number(v) and 0 <= v <= 1, "in [0, 1]"),
        "schedule_timesteps": (positive_int, "a positive integer (env steps)")}

    learning_rate: float = 1e-4
    """The Q-network's Adam step size."""
    batch_size: int = 32
    tau: float = 1.0
    train_freq: int = 4
    target_update_interval: int = 10_000
    """Env steps between two target network updates."""
    exploration_fraction: float = 0.1
    """Fraction of ``schedule_timesteps`` over which epsilon falls from its initial to its final value."""
    exploration_initial_eps: float = 1.0
    """Epsilon at the member's first step."""
    exploration_final_eps: float = 0.05
    """Epsilon after the fall."""
    max_grad_norm: float = 10.0
    """Gradient norm clip."""
    schedule_timesteps: int = 1_000_000
    """The env steps SB3's schedules span (``total_timesteps`` of one ``learn`` call in plain SB3), counted in
    the member's own steps: epsilon reaches its final value after ``exploration_fraction`` of them."""


class _DQN(OffPolicyRun, DQN):
    """SB3's DQN in pbx's off-policy loop whose schedules span ``schedule_timesteps`` of the member's own steps,
    not the steps of one ``learn`` call (one round)."""

    schedule_timesteps = 1

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        super()._update_current_progress_remaining(num_timesteps, self.schedule_timesteps)


# rl-zoo's CartPole-v1 (lr, gamma, final epsilon and batch size in the space); its 50,000 steps in 10 rounds
_CLASSIC = AgentDefaults("dqn_classic.yaml", {
    "buffer_size": 100_000, "learning_starts": 1_000, "target_update_interval": 10, "train_freq": 256,
    "gradient_steps": 128, "exploration_fraction": 0.16, "net_arch": [256, 256], "schedule_timesteps": 50_000},
    {"t_ready": 5_120, "max_budget": 51_200})


class DQNMember(OffPolicyMember):
    """SB3 DQN on a gymnasium id with discrete actions."""

    settings_cls = DQNSettings
    settings: DQNSettings
    model: _DQN
    default_space = "dqn_classic.yaml"
    algorithm = _DQN
    algo = "dqn"
    name = "DQN"
    live = (*OffPolicyMember.live, "target_update_interval", "max_grad_norm")
    counters = ("_n_calls",)
    checkpoint_keys = (*OffPolicyMember.checkpoint_keys, "n_calls")
    action_spaces = (spaces.Discrete,)
    defaults = {
        CLASSIC.name: _CLASSIC,
        # rl-zoo's LunarLander (discrete actions; lr, gamma, final epsilon and batch size in the space)
        BOX2D.name: AgentDefaults("dqn_box2d.yaml", {
            "buffer_size": 50_000, "learning_starts": 0, "target_update_interval": 250, "train_freq": 4,
            "gradient_steps": -1, "exploration_fraction": 0.12, "net_arch": [256, 256],
            "schedule_timesteps": 100_000}, {"t_ready": 10_000, "max_budget": 100_000}),
        # rl-zoo's atari row (lr 1e-4, batch 32 and final epsilon 0.01 in the space) over its 10M steps, as
        # rl-zoo v1.2.0 to v1.5.0 have it: a 100k buffer storing each observation once (the module docstring)
        ATARI.name: AgentDefaults("dqn_atari.yaml", {
            "buffer_size": 100_000, "learning_starts": 100_000, "target_update_interval": 1_000, "train_freq": 4,
            "gradient_steps": 1, "exploration_fraction": 0.1, "schedule_timesteps": 10_000_000,
            "optimize_memory_usage": True},
            {"t_ready": 250_000, "max_budget": 10_000_000}),
        # any other gymnasium id: classic control's
        OTHER.name: _CLASSIC,
    }

    def _build(self, hp: Mapping[str, Any], image: bool) -> _DQN:
        s = self.settings
        model = _DQN(**self._algorithm_kwargs(hp, image), exploration_initial_eps=s.exploration_initial_eps)
        model.schedule_timesteps = s.schedule_timesteps
        return model

    def _set(self, hp: Mapping[str, Any]) -> None:
        super()._set(hp)
        model = self.model
        model.exploration_fraction, model.exploration_final_eps = hp["exploration_fraction"], hp["exploration_final_eps"]
        model.exploration_schedule = LinearSchedule(model.exploration_initial_eps, model.exploration_final_eps,
                                                    model.exploration_fraction)
        model._update_current_progress_remaining(model.num_timesteps, model.schedule_timesteps)
        model.exploration_rate = model.exploration_schedule(model._current_progress_remaining)
