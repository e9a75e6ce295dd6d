"""A member's learner as SB3 saves it: what a checkpoint holds, an exploit copies and a diverged update undoes.

SB3 keeps one table of what ``save()`` writes besides pickled attributes
(``_get_torch_save_params``): the modules and optimizers whose state dicts make up the
learner, and loose tensors. For PPO and A2C that is the policy and its optimizer; for
SAC the policy (actor, critics and target critics), the actor's and the critics'
optimizers, and the learned entropy coefficient ``log_ent_coef`` with its optimizer; for
TD3 the policy (with its target actor and critics) and two optimizers; for DQN the
policy (Q-network and target) and its optimizer. :class:`Learner` reads that table
from the algorithm itself, so an agent's file lists nothing and an SB3 release that
adds an entry is followed.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import recursive_getattr


def learner_key(name: str) -> str:
    """The checkpoint key of an entry of SB3's save table (``policy.optimizer`` -> ``optimizer``)."""
    return name.removeprefix("policy.").replace(".", "_")


class Learner:
    """The learner entries of ``model`` by checkpoint key (see the module docstring)."""

    def __init__(self, model: BaseAlgorithm) -> None:
        self.model = model

    def parts(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The modules and optimizers (state dicts), and the loose tensors."""
        dicts, tensors = self.model._get_torch_save_params()
        return ({learner_key(n): recursive_getattr(self.model, n) for n in dicts},
                {learner_key(n): recursive_getattr(self.model, n) for n in tensors})

    def keys(self) -> tuple[str, ...]:
        modules, tensors = self.parts()
        return (*modules, *tensors)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        modules, _ = self.parts()
        return [m for m in modules.values() if isinstance(m, torch.optim.Optimizer)]

    def state(self) -> dict[str, Any]:
        """The state dicts and tensors, by checkpoint key (references: copy before keeping)."""
        modules, tensors = self.parts()
        return {key: m.state_dict() for key, m in modules.items()} | tensors

    def load(self, state: Mapping[str, Any]) -> None:
        """Take ``state`` (a :meth:`state`, or a checkpoint holding one) into the modules, optimizers, tensors."""
        modules, tensors = self.parts()
        for key, module in modules.items():
            module.load_state_dict(state[key])
        with torch.no_grad():  # in place: the optimizers hold these very tensors
            for key, tensor in tensors.items():
                tensor.copy_(state[key])

    def finite(self) -> bool:
        """Whether the weights and the loose tensors are all finite numbers."""
        _, tensors = self.parts()
        return (all(bool(torch.isfinite(p).all()) for p in self.model.policy.parameters())
                and all(bool(torch.isfinite(t).all()) for t in tensors.values()))
