"""The line a run starts with: what will be trained (the strategy, the member and the space it searches, the
rounds), and notes where the rounds or the code differ from what the settings alone suggest."""

from __future__ import annotations

from typing import Any, Mapping

from pbx.config import RunConfig
from pbx.console import counted
from pbx.fingerprint import ENV_CODE, ENV_CONTINUED, LIBRARIES, LIBRARIES_CONTINUED, provenance
from pbx.history import complete_rounds, read_csv, restart_marks
from pbx.run_dir import RunDir


def start_line(cfg: RunConfig, run_dir: RunDir, ranks: int = 1, resumed: bool = False) -> str:
    """What will be trained: the strategy, the member and the space it searches; a member that rounds a round's
    steps (PPO: whole rollouts) says what it really trains, and a resume by another pbx, env code or library
    versions than those that started the run says so, as does a resume whose envs restart their episodes."""
    run = cfg.run
    where = f" on {ranks} MPI ranks ({run.comm})" if ranks > 1 else ""
    # BG-PBT's and IPBT's larger first population takes more than one round of the budget
    marks = restart_marks(complete_rounds(read_csv(run_dir.history, cfg.space), run.pop_size, str(run_dir.history),
                                          cfg.rules.size)) if resumed else []
    plan = cfg.rules.planned(marks)
    line = (f"pbx: {run.search} on {run.env}, {cfg.member_cls.describe(cfg.member)} over {cfg.space_source} "
            f"({', '.join(cfg.space.names)}), {counted(run.pop_size, 'member')}{where} x {run.max_budget:,} steps "
            f"({plan.rounds} rounds of {run.t_ready:,}), seed {run.seed} -> {run_dir.path}")
    if cfg.init_size > run.pop_size or plan.rules.nominal_length(1) != run.t_ready:
        line += (f"\nnote: {run.search} trains {cfg.init_size} members in round 0, which takes "
                 f"{cfg.init_size / run.pop_size:g} rounds of the budget (the best {run.pop_size} go on), and "
                 f"restarts a stagnant population (history.csv's restart column)"
                 + (f", each restart making the rounds after it {cfg.rules.growth:g} times as long"
                    if cfg.rules.growth != 1 else ""))
    trained = [plan.trained_steps(r) for r in range(plan.rounds)]
    if trained != plan.nominal_steps:
        last = f" ({trained[-1]:,} in the last)" if trained[-1] != trained[0] else ""
        line += (f"\nnote: t_ready or max_budget is not whole rollouts: each member really trains "
                 f"{trained[0]:,} steps per round{last}, {plan.trained_ends[-1]:,} in total")
    restart = cfg.member_cls.resume_note(run.env) if resumed else ""
    if restart:
        line += f"\nnote: {restart}"
    if resumed and not _started_by_this_pbx(cfg.provenance):
        line += "\nnote: " + (f"this run was started by {_pbx(cfg.provenance)}" if cfg.provenance is not None else
                              "this run's config.yaml does not say which pbx started it (it predates the record)")
        line += (f"; it continues with {_pbx(provenance())}, which trains the rounds from here on (config.yaml "
                 f"keeps its record of the start and lists each other code that trained rounds under "
                 f"pbx.continued: the run pools only with runs trained by the same codes)")
    if resumed and cfg.provenance is not None:
        line += "".join(f"\nnote: {note}" for note in _other_env_or_libraries(cfg.provenance, cfg.run.env))
    return line


def _other_env_or_libraries(record: Mapping[str, Any], env: str) -> list[str]:
    """What a resume says of the env's own code and the library versions where they are not those the run was
    started with (a record from before either holds no such entry and gets no note). ``record`` is the resumed
    run's, with what runs now last in its ``*_continued`` lists (:func:`pbx.fingerprint.continued`)."""
    notes = []
    if ENV_CODE in record:
        start, now = record[ENV_CODE], [record[ENV_CODE], *record.get(ENV_CONTINUED, [])][-1]
        if now != start:
            module = env.rpartition(":")[0]
            notes.append(f"the code of {module} (the env's own, hash {now}) is not the code this run was started "
                         f"with ({start}); it runs the rounds from here on (config.yaml lists it under "
                         f"pbx.{ENV_CONTINUED}: the run pools only with runs of the same env codes)")
    started = record.get(LIBRARIES)
    if isinstance(started, Mapping):
        now = [started, *record.get(LIBRARIES_CONTINUED, [])][-1]
        changed = [f"{name} {started.get(name, 'unrecorded')} -> {version}"
                   for name, version in now.items() if started.get(name) != version]
        if changed:
            notes.append(f"this run was started with other library versions ({', '.join(changed)}); the rounds "
                         f"from here on run these (config.yaml lists them under pbx.{LIBRARIES_CONTINUED}, and "
                         f"pbx.report notes where it pools runs of other versions)")
    return notes


def _started_by_this_pbx(record: Mapping[str, Any] | None) -> bool:
    """Whether the run's record says this very code started it (by its hash; by version and commit where the
    record predates the hash)."""
    if record is None:
        return False
    if "code" in record:
        return record["code"] == provenance()["code"]
    return (record.get("version"), record.get("commit")) == (provenance()["version"], provenance()["commit"])


def _pbx(record: Mapping[str, Any]) -> str:
    """``pbx 0.1.0 (code 1a2b..., commit abc...)``, less what the record lacks (a plain install has no commit, a
    record from before code hashes no code)."""
    parts = [f"{key} {record[key]}" for key in ("code", "commit") if record.get(key)]
    return f"pbx {record.get('version')}" + (f" ({', '.join(parts)})" if parts else "")
