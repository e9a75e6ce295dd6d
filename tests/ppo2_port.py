"""A plain PyTorch port of OpenAI baselines' ``ppo2`` as train-procgen runs it, for ``tests/test_ppo_reference.py``.

This is a reference, not pbx code: it follows the sources line by line, in their order and with their names,
so that a reader can hold it beside them. The sources are openai/baselines at 9ee399f (the commit
train-procgen's README installs; none of the files below changed up to ea25b9e):

- ``baselines/ppo2/ppo2.py``: ``learn``'s minibatch loop (one update);
- ``baselines/ppo2/runner.py``: ``Runner.run`` (GAE) and ``sf01``;
- ``baselines/ppo2/model.py``: ``Model``'s loss and ``Model.train``;
- ``baselines/common/vec_env/vec_normalize.py``: ``VecNormalize`` (train-procgen: ``VecNormalize(venv=venv,
  ob=False)``, so gamma 0.99 and cliprew 10 are the constructor's defaults);
- ``baselines/common/running_mean_std.py``: ``RunningMeanStd``;
- ``baselines/common/models.py``: ``build_impala_cnn``; ``baselines/common/policies.py``:
  ``PolicyWithValue``; ``baselines/common/distributions.py``: ``CategoricalPd``; ``baselines/a2c/utils.py``:
  ``fc``;
- TensorFlow 1.15 (train-procgen's ``environment.yml``): ``tf.train.AdamOptimizer``
  (``python/training/adam.py``, ``core/kernels/training_ops.cc`` ``ApplyAdamNonCuda``) and
  ``tf.clip_by_global_norm`` (``python/ops/clip_ops.py``).

train-procgen's settings (``train_procgen/train.py``): lr 5e-4, ent_coef 0.01, gamma 0.999, lam 0.95, nsteps
256, nminibatches 8, ppo_epochs 3, cliprange 0.2, vf_coef 0.5, max_grad_norm 0.5, IMPALA CNN depths
[16, 32, 32]. One process, so ``tf.train.AdamOptimizer`` rather than ``MpiAdamOptimizer``.

Two things the port cannot take from a TF run and takes from the caller instead: the network's variables
(TF's initialisers are not reproduced; :class:`Model` takes them by TF variable name, in TF's layouts), and
the environment (:class:`RecordedVecEnv` plays back a recorded rollout, actions included, in place of
ProcGen and of the policy's sampling). ``np.random`` (ppo2's minibatch shuffle) is a ``RandomState`` the
caller passes in a given state.

Where pbx departs from the reference on purpose, :class:`Choices` has a switch; :data:`REFERENCE` is the
reference everywhere, :data:`PBX` pbx's choice everywhere. ``docs/algorithms.md`` lists the departures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Choices:
    """Where the port may depart from ``ppo2``, one switch per departure of pbx's; each default is the reference's."""

    adam: str = "tf"
    """``"tf"``: TF's Adam, ``eps`` added to the uncorrected ``sqrt(v)``; ``"torch"``: ``torch.optim.Adam``, ``eps``
    added to ``sqrt(v / (1 - beta2^t))`` (SB3's optimizer)."""
    advantage_ddof: int = 0
    """Delta degrees of freedom of the std that normalises a minibatch's advantages: 0 (numpy's ``std()``, ppo2)
    or 1 (torch's ``std()``, SB3)."""
    grad_clip: str = "tf"
    """``"tf"``: ``tf.clip_by_global_norm``, scale ``clip / max(norm, clip)``; ``"torch"``:
    ``torch.nn.utils.clip_grad_norm_``, scale ``min(clip / (norm + 1e-6), 1)`` (SB3)."""
    max_pool: str = "same"
    """``"same"``: TF's 'SAME' padding of the 3x3 stride-2 max-pool (on an even size: 0 before, 1 after);
    ``"pad1"``: PyTorch's ``padding=1`` (1 on each side, windows shifted by a pixel; pbx's ImpalaCNN)."""
    shuffle: str = "in_place"
    """``"in_place"``: ppo2 shuffles one index array in place each epoch, so epoch ``k``'s order is the product of
    ``k`` shuffles; ``"fresh"``: each epoch a permutation of ``arange`` (SB3's ``RolloutBuffer.get`` calls
    ``np.random.permutation``). Both draw the same numbers, so the first epoch's order is the same."""


REFERENCE = Choices()
"""ppo2 as train-procgen runs it."""
PBX = Choices(adam="torch", advantage_ddof=1, grad_clip="torch", max_pool="pad1", shuffle="fresh")
"""pbx's PPO member (SB3's PPO with the reference value loss, pbx's ImpalaCNN)."""

# train_procgen/train.py, train_fn: the settings it passes to ppo2.learn (nsteps 256 and 64 envs are the test's
# to shrink; VecNormalize's gamma is its constructor's default)
learning_rate = 5e-4
ent_coef = .01
gamma = .999
lam = .95
nminibatches = 8
ppo_epochs = 3
clip_range = .2
vf_coef = 0.5
max_grad_norm = 0.5
normalize_gamma = 0.99


# --- baselines/common/running_mean_std.py -------------------------------------------------------------------

class RunningMeanStd(object):
    # https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance#Parallel_algorithm
    def __init__(self, epsilon: float = 1e-4, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, 'float64')
        self.var = np.ones(shape, 'float64')
        self.count = epsilon

    def update(self, x: np.ndarray) -> None:
        batch_mean = np.mean(x, axis=0)
        batch_var = np.var(x, axis=0)
        batch_count = x.shape[0]
        self.update_from_moments(batch_mean, batch_var, batch_count)

    def update_from_moments(self, batch_mean: Any, batch_var: Any, batch_count: int) -> None:
        self.mean, self.var, self.count = update_mean_var_count_from_moments(
            self.mean, self.var, self.count, batch_mean, batch_var, batch_count)


def update_mean_var_count_from_moments(mean: Any, var: Any, count: Any, batch_mean: Any, batch_var: Any,
                                       batch_count: int) -> tuple[Any, Any, Any]:
    delta = batch_mean - mean
    tot_count = count + batch_count

    new_mean = mean + delta * batch_count / tot_count
    m_a = var * count
    m_b = batch_var * batch_count
    M2 = m_a + m_b + np.square(delta) * count * batch_count / tot_count
    new_var = M2 / tot_count
    new_count = tot_count

    return new_mean, new_var, new_count


# --- the environment: a recorded rollout played back -------------------------------------------------------

class RecordedVecEnv:
    """A baselines-style VecEnv that plays back one recorded rollout of ``nsteps`` vector steps.

    Args:
        obs: (nsteps + 1, nenv, H, W, C) uint8, what ProcgenEnv's ``rgb`` observation gave: the observation
            before each step and, last, the one after the last step (the bootstrap's).
        actions: (nsteps, nenv), the actions taken (the recording's draws of the policy).
        rewards: (nsteps, nenv), the raw rewards of each step.
        dones: (nsteps, nenv) bool, ``news`` of each step (the episode ended with it).
    """

    def __init__(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.obs, self.actions, self.rewards, self.dones = obs, actions, rewards, dones
        self.num_envs = obs.shape[1]
        self.t = 0

    def reset(self) -> np.ndarray:
        self.t = 0
        return self.obs[0]

    def recorded_actions(self) -> np.ndarray:
        """The actions the recording took at this step (what ``self.pd.sample()`` drew when it was recorded)."""
        return self.actions[self.t]

    def step_async(self, actions: np.ndarray) -> None:
        assert np.array_equal(actions, self.actions[self.t]), "the rollout is played back with its own actions"

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        t = self.t
        self.t += 1
        return self.obs[t + 1], self.rewards[t], self.dones[t], [{} for _ in range(self.num_envs)]

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self.step_async(actions)
        return self.step_wait()


# --- baselines/common/vec_env/vec_normalize.py --------------------------------------------------------------

class VecNormalize:
    """
    A vectorized wrapper that normalizes the observations
    and returns from an environment.
    """

    def __init__(self, venv: RecordedVecEnv, ob: bool = True, ret: bool = True, clipob: float = 10.,
                 cliprew: float = 10., gamma: float = 0.99, epsilon: float = 1e-8) -> None:
        # VecEnvWrapper.__init__(self, venv)
        self.venv = venv
        self.num_envs = venv.num_envs
        assert not ob, "train-procgen normalises no observations (ob=False); the port has no ob_rms"
        self.ob_rms = None
        self.ret_rms = RunningMeanStd(shape=()) if ret else None
        self.clipob = clipob
        self.cliprew = cliprew
        self.ret = np.zeros(self.num_envs)
        self.gamma = gamma
        self.epsilon = epsilon

    def step_async(self, actions: np.ndarray) -> None:
        self.venv.step_async(actions)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self.step_async(actions)
        return self.step_wait()

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rews, news, infos = self.venv.step_wait()
        self.ret = self.ret * self.gamma + rews
        obs = self._obfilt(obs)
        if self.ret_rms:
            self.ret_rms.update(self.ret)
            rews = np.clip(rews / np.sqrt(self.ret_rms.var + self.epsilon), -self.cliprew, self.cliprew)
        self.ret[news] = 0.
        return obs, rews, news, infos

    def _obfilt(self, obs: np.ndarray) -> np.ndarray:
        return obs  # ob=False

    def reset(self) -> np.ndarray:
        self.ret = np.zeros(self.num_envs)
        obs = self.venv.reset()
        return self._obfilt(obs)

    def recorded_actions(self) -> np.ndarray:
        return self.venv.recorded_actions()


# --- the network: baselines/common/models.py, a2c/utils.py, common/policies.py, common/distributions.py -------

def variable_shapes(ob_shape: Sequence[int], ncat: int, depths: Sequence[int] = (16, 32, 32)) -> dict[str, tuple]:
    """Every trainable variable of ``tf.trainable_variables('ppo2_model')`` with its shape, in creation order
    (the order ``tf.clip_by_global_norm`` sums them in): ``build_impala_cnn``'s layers, then the policy's
    ``pi`` and the value's ``vf`` heads. TF layouts: conv kernels (h, w, in, out), dense kernels (in, out)."""
    height, width, channels = ob_shape
    shapes: dict[str, tuple] = {}
    layer = 0

    def conv(cin: int, cout: int) -> None:
        nonlocal layer
        shapes[f"ppo2_model/pi/layer_{layer}/kernel"] = (3, 3, cin, cout)
        shapes[f"ppo2_model/pi/layer_{layer}/bias"] = (cout,)
        layer += 1

    for depth in depths:
        conv(channels, depth)
        height, width = math.ceil(height / 2), math.ceil(width / 2)  # max-pool stride 2, 'same'
        for _ in range(4):  # two residual blocks of two convs
            conv(depth, depth)
        channels = depth
    shapes[f"ppo2_model/pi/layer_{layer}/kernel"] = (height * width * channels, 256)
    shapes[f"ppo2_model/pi/layer_{layer}/bias"] = (256,)
    shapes["ppo2_model/pi/w"], shapes["ppo2_model/pi/b"] = (256, ncat), (ncat,)
    shapes["ppo2_model/vf/w"], shapes["ppo2_model/vf/b"] = (256, 1), (1,)
    return shapes


def max_pooling2d(inputs: torch.Tensor, pool_size: int, strides: int, padding: str) -> torch.Tensor:
    """``tf.layers.max_pooling2d(inputs, pool_size, strides, padding='same')`` on NCHW, or (``padding="pad1"``)
    PyTorch's ``MaxPool2d(pool_size, strides, padding=1)``."""
    if padding == "pad1":
        return F.max_pool2d(inputs, pool_size, strides, padding=1)
    assert padding == "same"
    pads = []
    for size in (inputs.shape[3], inputs.shape[2]):  # F.pad's order: width first
        # TF's 'SAME': out = ceil(in / stride); the padding it needs, the smaller half before the window
        out = -(-size // strides)
        total = max((out - 1) * strides + pool_size - size, 0)
        pads += [total // 2, total - total // 2]
    # TF's max-pool never picks a padded position: pad with -inf
    return F.max_pool2d(F.pad(inputs, pads, value=-math.inf), pool_size, strides)


def build_impala_cnn(params: dict[str, torch.Tensor], unscaled_images: torch.Tensor,
                     depths: Sequence[int] = (16, 32, 32), max_pool: str = "same") -> torch.Tensor:
    """
    Model used in the paper "IMPALA: Scalable Distributed Deep-RL with
    Importance Weighted Actor-Learner Architectures" https://arxiv.org/abs/1802.01561

    (baselines/common/models.py; ``unscaled_images`` NHWC as TF has them. The port convolves in PyTorch's
    NCHW and goes back to NHWC to flatten, so the dense layer's kernel is TF's.)
    """

    layer_num = 0

    def get_layer_num_str() -> str:
        nonlocal layer_num
        num_str = str(layer_num)
        layer_num += 1
        return num_str

    def conv_layer(out: torch.Tensor, depth: int) -> torch.Tensor:
        # tf.layers.conv2d(out, depth, 3, padding='same', name='layer_' + get_layer_num_str()): 3x3 stride 1
        # 'same' pads 1 on each side; TF's kernel (h, w, in, out) is torch's (out, in, h, w) transposed
        name = 'ppo2_model/pi/layer_' + get_layer_num_str()
        kernel, bias = params[name + '/kernel'], params[name + '/bias']
        assert kernel.shape[-1] == depth
        return F.conv2d(out, kernel.permute(3, 2, 0, 1), bias, padding=1)

    def residual_block(inputs: torch.Tensor) -> torch.Tensor:
        depth = inputs.shape[1]

        out = F.relu(inputs)

        out = conv_layer(out, depth)
        out = F.relu(out)
        out = conv_layer(out, depth)
        return out + inputs

    def conv_sequence(inputs: torch.Tensor, depth: int) -> torch.Tensor:
        out = conv_layer(inputs, depth)
        out = max_pooling2d(out, pool_size=3, strides=2, padding=max_pool)
        out = residual_block(out)
        out = residual_block(out)
        return out

    # scaled in float32 (as TF's graph and SB3's preprocess_obs scale), then in the variables' dtype: float32 but
    # in the test's float64 replay of the iteration
    out = (unscaled_images.to(torch.float32) / 255.).to(params['ppo2_model/pi/layer_0/kernel'].dtype)
    out = out.permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW for torch's convolutions

    for depth in depths:
        out = conv_sequence(out, depth)

    out = out.permute(0, 2, 3, 1).flatten(1)  # tf.layers.flatten of NHWC: (h, w, c) order
    out = F.relu(out)
    # tf.layers.dense(out, 256, activation=tf.nn.relu, name='layer_' + get_layer_num_str())
    name = 'ppo2_model/pi/layer_' + get_layer_num_str()
    out = F.relu(out @ params[name + '/kernel'] + params[name + '/bias'])

    return out


def fc(params: dict[str, torch.Tensor], x: torch.Tensor, scope: str) -> torch.Tensor:
    """baselines/a2c/utils.py ``fc``: ``tf.matmul(x, w) + b`` (``init_scale`` only chose w's initial values)."""
    return x @ params[f"ppo2_model/{scope}/w"] + params[f"ppo2_model/{scope}/b"]


class CategoricalPd(object):
    """baselines/common/distributions.py."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def neglogp(self, x: torch.Tensor) -> torch.Tensor:
        # x = tf.one_hot(x, ...); tf.nn.softmax_cross_entropy_with_logits_v2(logits=self.logits, labels=x)
        x = F.one_hot(x.long(), self.logits.shape[-1]).to(self.logits.dtype)
        return -(x * F.log_softmax(self.logits, dim=-1)).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        a0 = self.logits - self.logits.max(dim=-1, keepdim=True).values
        ea0 = torch.exp(a0)
        z0 = ea0.sum(dim=-1, keepdim=True)
        p0 = ea0 / z0
        return (p0 * (torch.log(z0) - a0)).sum(dim=-1)


class PolicyWithValue(object):
    """baselines/common/policies.py (``build_policy`` with the IMPALA CNN and a shared latent): ``pd`` from
    ``pdfromlatent(latent, init_scale=0.01)`` (``fc`` scope ``pi``), ``vf = fc(vf_latent, 'vf', 1)[:, 0]``."""

    def __init__(self, params: dict[str, torch.Tensor], observations: torch.Tensor, max_pool: str) -> None:
        self.X = observations
        latent = build_impala_cnn(params, observations, depths=[16, 32, 32], max_pool=max_pool)
        vf_latent = latent
        self.pd = CategoricalPd(fc(params, latent, 'pi'))
        self.vf = fc(params, vf_latent, 'vf')[:, 0]


# --- tf.train.AdamOptimizer and tf.clip_by_global_norm (TF 1.15) ----------------------------------------------

class AdamOptimizer:
    """``tf.train.AdamOptimizer(learning_rate=LR, epsilon=1e-5)`` (beta1 0.9, beta2 0.999), in the variables'
    dtype (float32 as TF runs it; float64 in the test's float64 replay).

    With ``choice="torch"``, ``torch.optim.Adam(eps=1e-5)``'s step instead (``torch/optim/adam.py``,
    ``_single_tensor_adam``, the CPU path): the same moments, the bias corrections applied to each, ``eps``
    added after the second one's.
    """

    def __init__(self, var_list: Sequence[torch.Tensor], epsilon: float = 1e-5, beta1: float = 0.9,
                 beta2: float = 0.999, choice: str = "tf") -> None:
        assert choice in ("tf", "torch")
        self._beta1, self._beta2, self._epsilon, self.choice = beta1, beta2, epsilon, choice
        # _create_slots: "m" and "v" zeros per variable; beta1_power, beta2_power float32 variables at beta1, beta2
        self.m = [torch.zeros_like(v) for v in var_list]
        self.v = [torch.zeros_like(v) for v in var_list]
        self.dtype = torch.zeros((), dtype=var_list[0].dtype).numpy().dtype
        self.beta1_power, self.beta2_power = self.dtype.type(beta1), self.dtype.type(beta2)
        self.step = 0

    @torch.no_grad()
    def apply_gradients(self, grads_and_vars: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
        self.step += 1
        if self.choice == "torch":
            self._torch_step(grads_and_vars, lr)
            return
        T = self.dtype.type
        beta1, beta2, epsilon = T(self._beta1), T(self._beta2), T(self._epsilon)
        # training_ops.cc ApplyAdamNonCuda, in T = float32 (or T = double)
        alpha = T(lr) * np.sqrt(T(1) - self.beta2_power) / (T(1) - self.beta1_power)
        for (g, var), m, v in zip(grads_and_vars, self.m, self.v):
            m += (g - m) * float(T(1) - beta1)
            v += (g.square() - v) * float(T(1) - beta2)
            var -= (m * float(alpha)) / (v.sqrt() + float(epsilon))
        # _finish: beta1_power * beta1, beta2_power * beta2 (float32 variables)
        self.beta1_power, self.beta2_power = self.beta1_power * beta1, self.beta2_power * beta2

    def _torch_step(self, grads_and_vars: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
        beta1, beta2, eps, step = self._beta1, self._beta2, self._epsilon, self.step
        for (grad, param), exp_avg, exp_avg_sq in zip(grads_and_vars, self.m, self.v):
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = lr / bias_correction1
            bias_correction2_sqrt = bias_correction2 ** 0.5
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


def clip_by_global_norm(t_list: Sequence[torch.Tensor], clip_norm: float,
                        choice: str = "tf") -> tuple[list[torch.Tensor], torch.Tensor]:
    """``tf.clip_by_global_norm(t_list, clip_norm)`` (python/ops/clip_ops.py): the list scaled by
    ``clip_norm * min(1 / global_norm, 1 / clip_norm)``, and the global norm.

    With ``choice="torch"``, ``torch.nn.utils.clip_grad_norm_``'s scale instead: ``min(clip_norm / (norm + 1e-6),
    1)`` (torch/nn/utils/clip_grad.py).
    """
    if choice == "torch":
        total_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2) for g in t_list]), 2)
        clip_coef = clip_norm / (total_norm + 1e-6)
        clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
        return [g * clip_coef_clamped for g in t_list], total_norm
    assert choice == "tf"
    # global_norm: sqrt(2 * sum of l2_loss(t) = sum(t ** 2) / 2)
    half_squared_norms = torch.stack([(t ** 2).sum() / 2 for t in t_list])
    use_norm = torch.sqrt(half_squared_norms.sum() * 2.0)
    scale = clip_norm * torch.minimum(1.0 / use_norm, torch.tensor(1.0 / clip_norm, dtype=use_norm.dtype))
    return [t * scale for t in t_list], use_norm


# --- baselines/ppo2/model.py -----------------------------------------------------------------------------------

class Model(object):
    """
    We use this object to :
    __init__:
    - Creates the step_model
    - Creates the train_model

    train():
    - Make the training part (feedforward and retropropagation of gradients)

    (baselines/ppo2/model.py. ``params``: the variables by TF name, as :func:`variable_shapes` lists them;
    the model trains copies.)
    """

    def __init__(self, *, params: dict[str, torch.Tensor], ent_coef: float, vf_coef: float, max_grad_norm: float,
                 choices: Choices = REFERENCE) -> None:
        self.params = {name: p.detach().clone() for name, p in params.items()}
        self.ent_coef, self.vf_coef, self.max_grad_norm, self.choices = ent_coef, vf_coef, max_grad_norm, choices
        # params = tf.trainable_variables('ppo2_model'); self.trainer = tf.train.AdamOptimizer(LR, epsilon=1e-5)
        self.trainer = AdamOptimizer(list(self.params.values()), epsilon=1e-5, choice=choices.adam)
        self.initial_state = None

    def _policy(self, obs: np.ndarray) -> PolicyWithValue:
        return PolicyWithValue(self.params, torch.as_tensor(obs), self.choices.max_pool)

    @torch.no_grad()
    def step(self, obs: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, None, np.ndarray]:
        """act_model.step: (action, value, state, neglogp); the action is the recording's, in place of
        ``self.pd.sample()``, and neglogp is that action's."""
        policy = self._policy(obs)
        neglogp = policy.pd.neglogp(torch.as_tensor(actions))
        return actions, policy.vf.numpy(), None, neglogp.numpy()

    @torch.no_grad()
    def value(self, obs: np.ndarray, S: Any = None, M: Any = None) -> np.ndarray:
        return self._policy(obs).vf.numpy()

    def loss(self, cliprange: float, obs: np.ndarray, A: np.ndarray, ADV: np.ndarray, R: np.ndarray,
             OLDNEGLOGPAC: np.ndarray, OLDVPRED: np.ndarray) -> torch.Tensor:
        """The graph ``Model.__init__`` builds from the placeholders to ``loss``."""
        train_model = self._policy(obs)
        A, ADV, R, OLDNEGLOGPAC, OLDVPRED = (torch.as_tensor(x) for x in (A, ADV, R, OLDNEGLOGPAC, OLDVPRED))
        CLIPRANGE = cliprange

        neglogpac = train_model.pd.neglogp(A)

        # Calculate the entropy
        # Entropy is used to improve exploration by limiting the premature convergence to suboptimal policy.
        entropy = torch.mean(train_model.pd.entropy())

        # CALCULATE THE LOSS
        # Total loss = Policy gradient loss - entropy * entropy coefficient + Value coefficient * value loss

        # Clip the value to reduce variability during Critic training
        # Get the predicted value
        vpred = train_model.vf
        vpredclipped = OLDVPRED + torch.clamp(train_model.vf - OLDVPRED, - CLIPRANGE, CLIPRANGE)
        # Unclipped value
        vf_losses1 = torch.square(vpred - R)
        # Clipped value
        vf_losses2 = torch.square(vpredclipped - R)

        vf_loss = .5 * torch.mean(torch.maximum(vf_losses1, vf_losses2))

        # Calculate ratio (pi current policy / pi old policy)
        ratio = torch.exp(OLDNEGLOGPAC - neglogpac)

        # Defining Loss = - J is equivalent to max J
        pg_losses = -ADV * ratio

        pg_losses2 = -ADV * torch.clamp(ratio, 1.0 - CLIPRANGE, 1.0 + CLIPRANGE)

        # Final PG loss
        pg_loss = torch.mean(torch.maximum(pg_losses, pg_losses2))

        # Total loss
        return pg_loss - entropy * self.ent_coef + vf_loss * self.vf_coef

    def gradients(self, cliprange: float, obs: np.ndarray, returns: np.ndarray, masks: np.ndarray,
                  actions: np.ndarray, values: np.ndarray, neglogpacs: np.ndarray) -> list[torch.Tensor]:
        """What ``train``'s ``sess.run`` computes before ``apply_gradients``: the clipped gradients, one per
        variable in ``self.params``'s order."""
        # Here we calculate advantage A(s,a) = R + yV(s') - V(s)
        # Returns = R + yV(s')
        advs = returns - values

        # Normalize the advantages
        advs = (advs - advs.mean()) / (advs.std(ddof=self.choices.advantage_ddof) + 1e-8)

        params = list(self.params.values())
        for p in params:
            p.requires_grad_(True)
        loss = self.loss(cliprange, obs, actions, advs, returns, neglogpacs, values)
        # 3. Calculate the gradients
        grads = list(torch.autograd.grad(loss, params))
        for p in params:
            p.requires_grad_(False)
        # Clip the gradients (normalize)
        grads, _grad_norm = clip_by_global_norm(grads, self.max_grad_norm, self.choices.grad_clip)
        return grads

    def train(self, lr: float, cliprange: float, obs: np.ndarray, returns: np.ndarray, masks: np.ndarray,
              actions: np.ndarray, values: np.ndarray, neglogpacs: np.ndarray, states: Any = None) -> None:
        grads = self.gradients(cliprange, obs, returns, masks, actions, values, neglogpacs)
        grads_and_var = list(zip(grads, self.params.values()))
        self.trainer.apply_gradients(grads_and_var, lr)


# --- baselines/ppo2/runner.py ---------------------------------------------------------------------------------

class Runner(object):
    """
    We use this object to make a mini batch of experiences
    __init__:
    - Initialize the runner

    run():
    - Make a mini batch
    """

    def __init__(self, *, env: VecNormalize, model: Model, nsteps: int, gamma: float, lam: float) -> None:
        # AbstractEnvRunner.__init__ (baselines/common/runners.py)
        self.env = env
        self.model = model
        self.nenv = nenv = env.num_envs
        self.obs = np.array(env.reset())
        self.nsteps = nsteps
        self.states = model.initial_state
        self.dones = [False for _ in range(nenv)]
        # Lambda used in GAE (General Advantage Estimation)
        self.lam = lam
        # Discount rate
        self.gamma = gamma

    def run(self) -> tuple[Any, ...]:
        # Here, we init the lists that will contain the mb of experiences
        mb_obs, mb_rewards, mb_actions, mb_values, mb_dones, mb_neglogpacs = [], [], [], [], [], []
        mb_states = self.states
        epinfos: list[Any] = []
        # For n in range number of steps
        for _ in range(self.nsteps):
            # Given observations, get action value and neglopacs
            # We already have self.obs because Runner superclass run self.obs[:] = env.reset() on init
            actions, values, self.states, neglogpacs = self.model.step(self.obs, self.env.recorded_actions())
            mb_obs.append(self.obs.copy())
            mb_actions.append(actions)
            mb_values.append(values)
            mb_neglogpacs.append(neglogpacs)
            mb_dones.append(self.dones)

            # Take actions in env and look the results
            # Infos contains a ton of useful informations
            self.obs[:], rewards, self.dones, infos = self.env.step(actions)
            mb_rewards.append(rewards)
        #batch of steps to batch of rollouts
        mb_obs = np.asarray(mb_obs, dtype=self.obs.dtype)
        mb_rewards = np.asarray(mb_rewards, dtype=np.float32)
        mb_actions = np.asarray(mb_actions)
        mb_values = np.asarray(mb_values, dtype=np.float32)
        mb_neglogpacs = np.asarray(mb_neglogpacs, dtype=np.float32)
        mb_dones = np.asarray(mb_dones, dtype=bool)
        last_values = self.model.value(self.obs, S=self.states, M=self.dones)

        # discount/bootstrap off value fn
        mb_returns = np.zeros_like(mb_rewards)
        mb_advs = np.zeros_like(mb_rewards)
        lastgaelam = 0
        for t in reversed(range(self.nsteps)):
            if t == self.nsteps - 1:
                nextnonterminal = 1.0 - self.dones
                nextvalues = last_values
            else:
                nextnonterminal = 1.0 - mb_dones[t+1]
                nextvalues = mb_values[t+1]
            delta = mb_rewards[t] + self.gamma * nextvalues * nextnonterminal - mb_values[t]
            mb_advs[t] = lastgaelam = delta + self.gamma * self.lam * nextnonterminal * lastgaelam
        mb_returns = mb_advs + mb_values
        self.mb_rewards = mb_rewards  # kept for the test (ppo2 does not keep them)
        return (*map(sf01, (mb_obs, mb_returns, mb_dones, mb_actions, mb_values, mb_neglogpacs)),
                mb_states, epinfos)


def sf01(arr: np.ndarray) -> np.ndarray:
    """
    swap and then flatten axes 0 and 1
    """
    s = arr.shape
    return arr.swapaxes(0, 1).reshape(s[0] * s[1], *s[2:])


# --- baselines/ppo2/ppo2.py: learn, one update ------------------------------------------------------------------

def make_runner(*, env: RecordedVecEnv, params: dict[str, torch.Tensor], ret: np.ndarray,
                ret_rms: tuple[Any, Any, Any], choices: Choices = REFERENCE) -> Runner:
    """What ``learn`` and train-procgen set up before the first update: ``VecNormalize(venv, ob=False)`` over
    ``env`` with the normaliser's state ``ret`` and ``ret_rms`` = (mean, var, count), the model on ``params``
    (by TF name), and the runner."""
    venv = VecNormalize(venv=env, ob=False, gamma=normalize_gamma)
    venv.ret_rms.mean, venv.ret_rms.var, venv.ret_rms.count = ret_rms
    model = Model(params=params, ent_coef=ent_coef, vf_coef=vf_coef, max_grad_norm=max_grad_norm, choices=choices)
    runner = Runner(env=venv, model=model, nsteps=len(env.actions), gamma=gamma, lam=lam)
    # VecNormalize.reset zeroes ret; the rollout continues the returns it had
    venv.ret = np.array(ret, dtype=np.float64)
    return runner


@dataclass
class Update:
    """What one update of :func:`learn_one_update` leaves: the trained variables and, for the test, what it saw."""

    params: dict[str, torch.Tensor]
    runner: Runner
    batch: dict[str, np.ndarray]
    """The runner's flattened arrays: obs, returns, masks, actions, values, neglogpacs."""
    minibatches: list[np.ndarray]
    """Each minibatch's indices into the batch, in the order trained."""


def learn_one_update(*, env: RecordedVecEnv, params: dict[str, torch.Tensor], random: np.random.RandomState,
                     ret: np.ndarray, ret_rms: tuple[Any, Any, Any], choices: Choices = REFERENCE,
                     nminibatches: int = nminibatches, noptepochs: int = ppo_epochs) -> Update:
    """The first update of ``ppo2.learn`` with train-procgen's settings, on ``env``'s recorded rollout.

    Args:
        env: the rollout; its length is ``nsteps``.
        params: the variables' values before the update, by TF name.
        random: stands in for NumPy's global RandomState, which ppo2 shuffles with.
        ret, ret_rms: the reward normaliser's discounted returns and (mean, var, count) before the rollout.
    """
    runner = make_runner(env=env, params=params, ret=ret, ret_rms=ret_rms, choices=choices)
    model = runner.model
    lr, cliprange = learning_rate, clip_range

    # Get the nb of env
    nenvs = env.num_envs
    # Calculate the batch_size
    nbatch = nenvs * runner.nsteps
    nbatch_train = nbatch // nminibatches

    update, nupdates = 1, 1
    assert nbatch % nminibatches == 0
    frac = 1.0 - (update - 1.0) / nupdates
    lrnow = lr  # constfn(lr)(frac)
    cliprangenow = cliprange  # constfn(cliprange)(frac)
    assert frac == 1.0

    # Get minibatch
    obs, returns, masks, actions, values, neglogpacs, states, epinfos = runner.run()
    batch = dict(obs=obs, returns=returns, masks=masks, actions=actions, values=values, neglogpacs=neglogpacs)

    minibatches = []
    assert states is None  # nonrecurrent version
    # Index of each element of batch_size
    # Create the indices array
    inds = np.arange(nbatch)
    for _ in range(noptepochs):
        # Randomize the indexes
        inds = shuffle(random, inds, choices.shuffle)
        # 0 to batch_size with batch_train_size step
        for start in range(0, nbatch, nbatch_train):
            end = start + nbatch_train
            mbinds = inds[start:end]
            minibatches.append(mbinds.copy())
            slices = (arr[mbinds] for arr in (obs, returns, masks, actions, values, neglogpacs))
            model.train(lrnow, cliprangenow, *slices)
    return Update(params=model.params, runner=runner, batch=batch, minibatches=minibatches)


def shuffle(random: np.random.RandomState, inds: np.ndarray, choice: str) -> np.ndarray:
    """One epoch's order: ppo2's ``np.random.shuffle(inds)`` (in place), or with ``choice="fresh"`` SB3's
    ``np.random.permutation(len(inds))``."""
    if choice == "in_place":
        random.shuffle(inds)
        return inds
    assert choice == "fresh"
    return random.permutation(len(inds))


def minibatch_order(random: np.random.RandomState, nbatch: int, choices: Choices = REFERENCE,
                    nminibatches: int = nminibatches, noptepochs: int = ppo_epochs) -> list[np.ndarray]:
    """The minibatches :func:`learn_one_update` trains on, drawn from ``random`` as its loop draws them (the
    shuffle reads nothing the training writes), without training."""
    nbatch_train = nbatch // nminibatches
    minibatches = []
    inds = np.arange(nbatch)
    for _ in range(noptepochs):
        inds = shuffle(random, inds, choices.shuffle)
        for start in range(0, nbatch, nbatch_train):
            minibatches.append(inds[start:start + nbatch_train].copy())
    return minibatches
