"""The reference side: what the side-by-side adds to a checkout of the IPBT authors' code, and how it runs it.

The checkout is ``AwesomeLemon/IPBT`` (its ``algo/bgpbt.py`` is the BG-PBT the IPBT
paper ran) plus ``task/toy_plain.py`` and ``task/toy_deceptive.py`` from ``AwesomeLemon/PBT-Zoo``; how to get them
is in ``run_side_by_side.py``. :func:`prepare` writes its adapters and configs into it and
changes none of the authors' files:

- ``task/toy_plain_fresh.py`` (:data:`FRESH_TASK`): IPBT's restart builds a fresh
  model (``task.get_fresh_model``) and shrink-perturbs the checkpoint's
  ``model_state_dict`` parameter by parameter, which needs a name -> tensor dict;
  ToyPlain stores theta as a bare tensor and has no model. The adapter keeps the
  state as ``{"theta": theta}``, hands ToyPlain the bare tensor, and its fresh
  model is one parameter ``theta = 0.9``. The arithmetic is ToyPlain's own. BG-PBT
  (``reinit_weights_strategy: copy``) never touches the weights and runs ToyPlain
  as it is;
- ``search_space/cs_int_indices.py`` (:data:`INT_INDICES_SPACE`): the authors' BG-PBT
  (``algo/bgpbt.py``) stops at its first explore on a space without integer
  hyperparameters: ``get_int_indices()`` returns ``[]``, ``np.array([])`` is a float
  array, and ``_compute_limits`` indexes with it (``IndexError: arrays used as indices
  must be of integer (or boolean) type``; the paper's spaces all had integers, and
  ``algo/ipbt.py`` guards the same lines with ``if len(int_dims) > 0``). The adapter
  returns the same indices as an integer array, which every caller wraps in
  ``np.array`` unchanged; BG-PBT's config uses it, IPBT's keeps the authors' class;
- ``config/{toyplain,toydeceptive}_{ipbt,bgpbt}_t<t_step>_b<t_max>.yaml`` (:func:`config_text`):
  pop 8, the study's ``t_step`` and ``t_max``, PBT-Zoo's toy space (``lr`` uniform on
  [1e-4, 1.1]) and seed base (71173, plus the seed). ToyDeceptive (PBT-Zoo's
  ``task/toy_deceptive.py``, copied into the checkout as ToyPlain is) gets the same
  fresh-model adapter for IPBT, which keeps its ``lr_history`` as it is;
- ``run_cpu.py`` (:data:`LAUNCHER`), which runs ``run.py``'s ``main`` after one CPU
  override: ``BaseAlgo._task_fn_ray``, the Ray task that trains or scores one member,
  is declared with a quarter of a GPU, and Ray gives a task that asks for a GPU
  ``max_calls=1``, a new worker process per call, so that GPU memory is freed. On
  the CPU that frees nothing and costs a process start (seconds on 2 cores) per
  member and round, hours per run on a toy whose training takes microseconds. The
  launcher declares the same function without the GPU, so Ray reuses its workers;
  ``.options(num_cpus=..., num_gpus=...)`` at each call, the authors' code, sets
  the resources as before. What a call computes does not change, and nothing else
  does: the authors' code decides every restart;
- ``run_cpu_guarded.py`` (:data:`GUARDED_LAUNCHER`), only for the side ``reference-guarded``
  (``run_side_by_side.py --sides reference-guarded``), a departure of the harness, not
  the authors' code: the same launcher, plus a guard on IPBT's stagnation smoother at
  a flat generation (its round bests all equal, as on ToyDeceptive after a restart).
  There the z-scores are NaN (std 0), and the authors' code stops with a traceback
  (GPyTorch's ``Normal`` refuses NaN targets; with that check off, its Cholesky of the
  NaN-trained kernel does): that crash is a finding of the reference, which the
  default launcher lets happen and the runner records (``run_side_by_side.py``). The
  guard answers "not improved", the value of the authors' comparison on NaN means and
  pbx's rule (``pbx/strategies/generational/stagnation.py``), and prints ``pbx guard`` in the run's
  log each time: a guarded run's later restarts are decided by pbx's rule, so
  ``compare.py`` never counts it as the reference;
- ``task/toy_plain_fresh.py``'s ``ToyPlainNoisy*Task`` (:data:`FRESH_TASK`, the toy ``toy-plain-noisy``):
  ToyPlain with Gaussian observation noise of standard deviation ``noise`` (the pbx
  member's ``toy_plain.NOISE``) on every score the algorithm sees (a round's fitness
  and the eval-only call before a generation, ``val``); the final answer's test
  (``best_info.yaml``'s ``test``) is noise-free. Each call's noise-free and observed
  score goes to ``true_fitness.jsonl`` in the run's folder, from which ``compare.py``
  takes the true score of the final population's best.

The other CPU settings are Hydra overrides on the command line (:func:`command`):
``general.num_gpus=0 general.num_cpus=1`` for the training tasks, the run folder
for ``path.dir_exp`` (the authors' ``base.yaml`` points at their cluster), and
``server.ray_address=null`` so that ``run.py``'s ``ray.init`` starts a private Ray
instance for the run and stops it at exit. ``run.py`` builds the task in a Ray task
that asks for a quarter of a GPU, which never schedules on a machine without one:
:func:`environment` gives that private instance one CPU and one logical GPU
(``RAY_OVERRIDE_RESOURCES``; the training tasks ask for none), one BLAS thread
(the 2-core machine runs one heavy process at a time), and
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` so ``torch.load`` unpickles the authors' own
checkpoints as their torch 2.0 did.
"""

from __future__ import annotations

import os
from pathlib import Path

from toy_plain import NOISE

GUARD_LINE = "pbx guard: flat generation"
"""How the guarded launcher's flat-generation guard begins the line it prints each time it answers
(:data:`GUARDED_LAUNCHER`)."""
TRUE_SCORES = "true_fitness.jsonl"
"""The noisy toy's record of each call's noise-free and observed score, in the run's folder."""
ALGOS = {"BGPBT": "bgpbt", "IPBT": "ipbt"}
"""pbx's ``--search`` name -> the reference's ``config/algo`` name."""
SEED_BASE = 71173
"""PBT-Zoo's seed base for the toy tasks (``config/toyplain_*_00.yaml``); a run's seed is this plus its offset."""
NEEDED = ["run.py", "utils.py", "algo/base.py", "algo/bayes_mixin.py", "algo/pbt.py", "algo/pbt_utils.py",
          "algo/plot_utils.py", "algo/bgpbt.py", "algo/bgpbt_utils.py", "algo/ipbt.py", "algo/ipbt_utils.py",
          "search_space/cs.py", "config/base.yaml", "config/algo/ipbt.yaml", "config/algo/bgpbt.yaml",
          "task/toy_plain.py", "task/toy_deceptive.py"]
"""The checkout's files a run reads (the authors' code, and PBT-Zoo's ToyPlain)."""

FRESH_TASK = '''"""Adapter written by pbx's side-by-side (benchmarks/peers/ipbt/reference.py), not the authors' code.

ToyPlain with what IPBT's restart needs: a fresh model (get_fresh_model) and a model_state_dict that maps
parameter names to tensors, {"theta": theta}. ToyPlain itself computes every step and score. ToyPlainNoisy*Task:
the same with observation noise on the scores the algorithm sees.
"""
import json
from pathlib import Path

import numpy as np
import torch

from task.toy_deceptive import ToyDeceptiveTask
from task.toy_plain import ToyPlainTask


class ToyPlainModel(torch.nn.Module):
    """ToyPlain's fresh weights as a module: one parameter, theta = 0.9 (ToyPlain's prepare_initial_ckpt)."""

    def __init__(self, n):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor([0.9] * n))


class ToyPlainFreshModelTask(ToyPlainTask):
    def __call__(self, seed, solution, t, t_step, cpkt_loaded, tb_dir, only_evaluate):
        bare = dict(cpkt_loaded, model_state_dict=cpkt_loaded['model_state_dict']['theta'].detach().clone())
        out = super().__call__(seed, solution, t, t_step, bare, tb_dir, only_evaluate)
        if 'dict_to_save' in out:
            out['dict_to_save'] = {'model_state_dict': {'theta': out['dict_to_save']['model_state_dict']}}
        return out

    def prepare_initial_ckpt(self, solution):
        return {'model_state_dict': {'theta': super().prepare_initial_ckpt(solution)['model_state_dict']}}

    def get_fresh_model(self, solution):
        return ToyPlainModel(len(solution))


class ToyDeceptiveFreshModelTask(ToyDeceptiveTask):
    """ToyDeceptive the same way: the checkpoint's lr_history stays as it is."""

    def __call__(self, seed, solution, t, t_step, cpkt_loaded, tb_dir, only_evaluate):
        bare = dict(cpkt_loaded, model_state_dict=cpkt_loaded['model_state_dict']['theta'].detach().clone())
        out = super().__call__(seed, solution, t, t_step, bare, tb_dir, only_evaluate)
        if 'dict_to_save' in out:
            out['dict_to_save'] = dict(out['dict_to_save'],
                                       model_state_dict={'theta': out['dict_to_save']['model_state_dict']})
        return out

    def prepare_initial_ckpt(self, solution):
        ckpt = super().prepare_initial_ckpt(solution)
        return dict(ckpt, model_state_dict={'theta': ckpt['model_state_dict']})

    def get_fresh_model(self, solution):
        return ToyPlainModel(len(solution))


class NoisyScores:
    """Gaussian observation noise of standard deviation noise on every score the algorithm sees (a round's fitness,
    the eval-only call before a generation); the eval-only call for the final answer's test is noise-free. The draw
    comes from the call's seed, t, t_step, lr and noise-free score. Each call's noise-free and observed score is
    appended to true_fitness.jsonl in the run's folder."""

    def __init__(self, noise, cfg, **kwargs):
        super().__init__(**kwargs)
        self.noise = float(noise)
        self.record = Path(cfg.path.dir_exp) / 'true_fitness.jsonl'

    def __call__(self, seed, solution, t, t_step, cpkt_loaded, tb_dir, only_evaluate):
        out = super().__call__(seed, solution, t, t_step, cpkt_loaded, tb_dir, only_evaluate)
        true = out['fitness']
        if not (only_evaluate and 'test' in only_evaluate):
            bits = [int(np.float32(solution[0]).view(np.uint32)),
                    *(int(b) for b in np.array([true], dtype=np.float64).view(np.uint32))]
            rng = np.random.default_rng([int(seed), int(t), int(t_step), *bits])
            observed = true + float(rng.normal(0.0, self.noise))
            out = dict(out, fitness=observed, **({'val': observed} if only_evaluate else {}))
        with open(self.record, 'a') as f:
            f.write(json.dumps({'seed': int(seed), 't': int(t), 't_step': int(t_step), 'lr': float(solution[0]),
                                'eval': list(only_evaluate or []), 'true': true, 'observed': out['fitness']}) + '\\n')
        return out


class ToyPlainNoisyTask(NoisyScores, ToyPlainTask):
    """BG-PBT's noisy ToyPlain."""


class ToyPlainNoisyFreshModelTask(NoisyScores, ToyPlainFreshModelTask):
    """IPBT's noisy ToyPlain, with the fresh model its restart needs."""
'''


_LAUNCHER_HEAD = '''"""A launcher from pbx's side-by-side (benchmarks/peers/ipbt/reference.py), not the authors' code.

Runs run.py's main with the per-member Ray task declared without a GPU, so that Ray reuses its workers (a task
declared with a GPU gets max_calls=1: a new process per call, to free GPU memory, which a CPU run does not use).
"""
import os
import runpy

import ray

import algo.base
import algo.ipbt

_declared = algo.base.BaseAlgo.__dict__['_task_fn_ray'].__func__  # the RemoteFunction: num_cpus=1, num_gpus=0.25
algo.base.BaseAlgo._task_fn_ray = staticmethod(ray.remote(num_cpus=1, num_gpus=0)(_declared._function))
'''

_GUARD = '''
# A departure of the harness (run_cpu_guarded.py only): pbx's rule answers for the authors' smoother at a flat
# generation, where the authors' code stops with a traceback.
_gauge = algo.ipbt.train_approximate_gp_and_gauge_improvement


def _gauge_or_flat(train_x, train_y, inducing_points, path, title='', training_iterations=50):
    """IPBT's smoother, except on z-scores of a flat generation (std 0: all NaN), which GPyTorch cannot fit
    (its Normal refuses NaN targets; without that check its Cholesky does): the round has not improved, the
    value of the authors' comparison mean[-1] > mean[-2] on NaN means."""
    if bool(train_y.isnan().any()):
        print(f'pbx guard: flat generation bests at {title}: not improved', flush=True)
        path.mkdir(parents=True, exist_ok=True)  # the caller writes its record there
        return False
    return _gauge(train_x, train_y, inducing_points, path, title=title, training_iterations=training_iterations)


algo.ipbt.train_approximate_gp_and_gauge_improvement = _gauge_or_flat
'''

_LAUNCHER_MAIN = '''
if __name__ == '__main__':
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, 'run.py'), run_name='__main__')
'''

LAUNCHER = _LAUNCHER_HEAD + _LAUNCHER_MAIN
"""``run_cpu.py``: the authors' code with the CPU override only."""
GUARDED_LAUNCHER = _LAUNCHER_HEAD + _GUARD + _LAUNCHER_MAIN
"""``run_cpu_guarded.py``: :data:`LAUNCHER` plus the flat-generation guard (the side ``reference-guarded``)."""
LAUNCHERS = {False: "run_cpu.py", True: "run_cpu_guarded.py"}
"""Guarded or not -> the launcher's file in the checkout."""


INT_INDICES_SPACE = '''"""Written by pbx's side-by-side (benchmarks/peers/ipbt/reference.py), not the authors' code.

The authors' search space with get_int_indices as an integer array: algo/bgpbt.py indexes arrays with
np.array(get_int_indices()), a float array (an IndexError) when the space has no integer hyperparameter.
"""
import numpy as np

from search_space.cs import ConfigSpaceSearchSpace


class ConfigSpaceSearchSpaceIntIndices(ConfigSpaceSearchSpace):
    def get_int_indices(self):
        return np.array(super().get_int_indices(), dtype=int)
'''


TOYS = {"toy-plain": ("toyplain", "ToyPlain", "toy_plain"),
        "toy-deceptive-zoo": ("toydeceptive", "ToyDeceptive", "toy_deceptive"),
        "toy-plain-noisy": ("toyplainnoisy", "ToyPlainNoisy", "toy_plain_fresh")}
"""pbx's env name -> the config's name part, the task's class name part and its module (PBT-Zoo's, or the
adapter's for the noisy toy)."""
NOISY = {"toy-plain-noisy": NOISE}
"""The toys with observation noise -> its standard deviation (the pbx member's)."""


def config_text(algo: str, toy: str = "toy-plain", t_step: int = 10, t_max: int = 1000) -> str:
    """The Hydra config of a run of ``algo`` (``bgpbt`` or ``ipbt``) on ``toy`` (a key of :data:`TOYS`)."""
    short, cls, module = TOYS[toy]
    task = f"task.toy_plain_fresh.{cls}FreshModelTask" if algo == "ipbt" else f"task.{module}.{cls}Task"
    noise = f"\n  noise: {NOISY[toy]}" if toy in NOISY else ""
    space = "search_space.cs.ConfigSpaceSearchSpace" if algo == "ipbt" else \
        "search_space.cs_int_indices.ConfigSpaceSearchSpaceIntIndices"
    return f"""# Written by pbx's side-by-side (benchmarks/peers/ipbt/reference.py), not the authors' code.
defaults:
  - base
  - algo: {algo}
  - _self_

general:
  exp_name: '{algo}_{short}'
  seed_base: {SEED_BASE}

algo:
  pop_size: 8
  t_step: {t_step}
  t_max: {t_max}

task:
  _target_: {task}
  t_max: ${{algo.t_max}}{noise}

search_space:
  _target_: {space}
  hyperparameters:
    - name: lr
      type: Float
      distribution: Uniform
      bounds: [ 1e-4, 1.1 ]
      log: False
"""


def config_name(algo: str, toy: str, t_step: int, t_max: int) -> str:
    """The name of the config :func:`prepare` writes for ``algo`` (pbx's name) on ``toy``."""
    return f"{TOYS[toy][0]}_{ALGOS[algo]}_t{t_step}_b{t_max}"


def prepare(checkout: Path, setups: tuple[tuple[str, int, int], ...] = (("toy-plain", 10, 1000),)) -> None:
    """Write the adapter and the configs (one per algorithm and ``(toy, t_step, t_max)`` of ``setups``) into
    ``checkout``; raise if a file a run reads is missing."""
    missing = [name for name in NEEDED if not (checkout / name).is_file()]
    if missing:
        raise SystemExit(f"{checkout}: not a checkout of AwesomeLemon/IPBT with PBT-Zoo's task/toy_plain.py "
                         f"(missing {', '.join(missing)}); see run_side_by_side.py's docstring")
    (checkout / "task" / "toy_plain_fresh.py").write_text(FRESH_TASK)
    (checkout / LAUNCHERS[False]).write_text(LAUNCHER)
    (checkout / LAUNCHERS[True]).write_text(GUARDED_LAUNCHER)
    (checkout / "search_space" / "cs_int_indices.py").write_text(INT_INDICES_SPACE)
    for algo in ALGOS:
        for toy, t_step, t_max in setups:
            (checkout / "config" / f"{config_name(algo, toy, t_step, t_max)}.yaml").write_text(
                config_text(ALGOS[algo], toy, t_step, t_max))


def command(python: str, checkout: Path, algo: str, seed: int, folder: Path, toy: str = "toy-plain",
            t_step: int = 10, t_max: int = 1000, guarded: bool = False) -> list[str]:
    """The command that runs ``algo`` (pbx's name) on ``toy`` with ``seed`` into ``folder`` (which ``run.py``
    empties): the authors' code, or with ``guarded`` the launcher with pbx's flat-generation guard."""
    return [python, str(checkout / LAUNCHERS[guarded]), "--config-name", config_name(algo, toy, t_step, t_max),
            f"++general.seed_offset={seed}", f"path.dir_exp={folder}", f"path.dir_my={folder.parent}",
            "general.num_gpus=0", "general.num_cpus=1", "++server.ray_address=null",
            f"hydra.run.dir={folder.parent / '.hydra' / folder.name}", "hydra.job.chdir=False"]


def environment(checkout: Path) -> dict[str, str]:
    """The process environment of a reference run: the checkout importable (by the driver and Ray's
    workers), the private Ray instance's resources, torch.load as torch 2.0 had it."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")}
    env.update(PYTHONPATH=str(checkout), RAY_OVERRIDE_RESOURCES='{"CPU": 1, "GPU": 1}',
               TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               RAY_DEDUP_LOGS="0", MPLBACKEND="Agg")
    return env
