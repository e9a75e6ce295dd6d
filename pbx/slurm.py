"""Sweeps on Slurm: the experiment file's ``slurm:`` section and the job array ``pbx.sweep --print-slurm`` writes.

One array task per run of the sweep: task i runs ``python -m pbx.sweep FILE
--only i``, which starts, resumes or skips run i, so a requeued task, or the
array resubmitted after a time limit, completes the sweep. Tasks with several
MPI ranks start them with ``mpiexec`` (the mpich wheel pbx installs) or ``srun
--kill-on-bad-exit=1`` (an MPI built for Slurm's PMI; without the flag srun
leaves the other tasks waiting when one is killed outright).
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pbx.settings import build
from pbx.errors import UsageError

if TYPE_CHECKING:
    from pbx.sweep_file import Sweep

LAUNCHERS = ("mpiexec", "srun")


@dataclass(frozen=True)
class SlurmSettings:
    """The experiment file's ``slurm:`` section: what one array task (one run) asks for."""

    ranks: int = 1
    """MPI ranks per run (the population is spread over them); 1 starts no launcher."""
    launcher: str = "mpiexec"
    """How ranks start: ``mpiexec`` (the mpich wheel pbx installs) or ``srun`` (an MPI built for Slurm's PMI)."""
    time: str | None = None
    """Time limit of a task (``HH:MM:SS`` or ``D-HH:MM:SS``); a requeued or resubmitted task resumes its run."""
    gpus: int = 0
    """GPUs per task (the ranks share them round robin)."""
    cpus_per_task: int | None = None
    """CPU cores per rank."""
    mem: str | None = None
    """Memory per task (``32G``)."""
    partition: str | None = None
    max_parallel: int | None = None
    """At most this many tasks at once (``--array=0-N%K``)."""
    sbatch: list[str] = field(default_factory=list)
    """Further ``#SBATCH`` options, e.g. ``[--account=rl, --qos=long]``."""

    def __post_init__(self) -> None:
        counts = (self.ranks, 1 if self.cpus_per_task is None else self.cpus_per_task,
                  1 if self.max_parallel is None else self.max_parallel)
        if min(counts) < 1 or self.gpus < 0:
            raise UsageError(f"slurm: ranks, cpus_per_task and max_parallel must be positive, gpus at least 0: "
                             f"{self}")
        for name in ("time", "mem", "partition"):  # an empty one would write an #SBATCH line sbatch refuses
            value = getattr(self, name)
            if value is not None and not str(value).strip():
                raise UsageError(f"slurm: {name} must name a value or be left out, got {value!r}")
        if self.launcher not in LAUNCHERS:
            raise UsageError(f"slurm: launcher must be {' or '.join(LAUNCHERS)}, got {self.launcher!r}")
        if not isinstance(self.sbatch, list) or not all(isinstance(o, str) for o in self.sbatch):
            raise UsageError(f"slurm: sbatch must be a list of options such as --account=NAME, got {self.sbatch!r}")


def slurm_settings(section: Any, file: Path) -> SlurmSettings:
    """The ``slurm:`` section of the experiment ``file`` (None: the defaults)."""
    section = section or {}
    names = [f.name for f in dataclasses.fields(SlurmSettings)]
    if not isinstance(section, dict) or set(section) - set(names):
        raise UsageError(f"{file}: slurm: takes {', '.join(names)}, got {section!r}")
    if isinstance(section.get("time"), int):  # YAML 1.1 reads 12:00:00 as 43200
        raise UsageError(f"{file}: slurm: time must be quoted, e.g. time: '12:00:00', got {section['time']!r}")
    return build(SlurmSettings, section)


def slurm_script(sweep: Sweep, keep_stored: bool = False) -> str:
    """A Slurm job array with one task per run; task i runs ``--only i``, which starts, resumes or skips it
    (``keep_stored``: with ``--keep-stored``)."""
    s, runs = sweep.slurm, sweep.runs
    out = sweep.out.resolve()
    array = f"0-{len(runs) - 1}" + (f"%{s.max_parallel}" if s.max_parallel else "")
    options = [f"--job-name=pbx-{sweep.out.name}", f"--array={array}", f"--output={out}/slurm/%A_%a.out",
               "--open-mode=append", "--requeue", f"--ntasks={s.ranks}"]
    options += [f"--cpus-per-task={s.cpus_per_task}"] if s.cpus_per_task else []
    options += [f"--gpus={s.gpus}"] if s.gpus else []
    options += [f"--{key}={value}" for key in ("time", "mem", "partition") if (value := getattr(s, key))]
    options += s.sbatch
    python = Path(sys.executable)
    launch: list[str] = []
    if s.ranks > 1:
        mpiexec = python.parent / "mpiexec"
        # srun leaves the other tasks running when one dies unless told; pbx's own failures end the job by MPI_Abort
        launch = ["srun", "--kill-on-bad-exit=1"] if s.launcher == "srun" else \
            [str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", str(s.ranks)]
    task = shlex.join([*launch, str(python), "-m", "pbx.sweep", str(sweep.file.resolve()), "--seeds",
                       ",".join(map(str, sweep.seeds)), "--out", str(out),
                       *(["-m", *sweep.overrides] if sweep.overrides else []),
                       *(["--keep-stored"] if keep_stored else [])])
    return "\n".join([
        "#!/bin/bash",
        *(f"#SBATCH {option}" for option in options),
        f"# pbx sweep of {sweep.file}: {len(sweep.variants)} variants x {len(sweep.seeds)} seeds, one array task",
        "# per run. A task starts its run, resumes it (requeued, or resubmitted after a time limit) or skips it",
        "# when finished. Task: run",
        *(f"#   {spec.index}: {spec.label}" for spec in runs),
        "set -euo pipefail",
        f"cd {shlex.quote(str(Path.cwd()))}",
        f'exec {task} --only "$SLURM_ARRAY_TASK_ID"',
        "",
    ])
