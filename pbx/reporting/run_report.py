"""One run's own report, ``RUN_DIR/report/``:

- ``scores.png``: train and test score vs env steps, one line per member;
- ``schedules.png``: each hyperparameter's schedule per member, exploits marked
  (the lineage view of the PBT papers);
- ``summary.md``: each member's final scores, config and exploits, the run's
  headline numbers, and for a categorical hyperparameter each choice's share.
"""

from __future__ import annotations

from pathlib import Path

from pbx.standings import best_rows, generation_ends, member_row
from pbx.reporting.plots import plot_member_scores, plot_schedules
from pbx.reporting.runs import Run
from pbx.reporting.scores import FINAL_SCORE_NOTE, LAST_K, headline
from pbx.reporting.tables import fmt, markdown_table
from pbx.run_dir import RunDir
from pbx.space import Categorical


def write_run_report(run: Run, k: int = LAST_K) -> list[Path]:
    """Write ``RUN_DIR/report/``: score and schedule plots and ``summary.md``."""
    out = RunDir(run.path).report
    subject = f"{run.env} · {run.strategy}"
    paths = [
        plot_member_scores(run.frame, f"{subject}: score per member ({run.name})", out / "scores.png",
                           run.curves),
        plot_schedules(run.frame, run.space, f"{subject}: hyperparameter schedules ({run.name})",
                       out / "schedules.png"),
    ]
    (out / "summary.md").write_text(_run_summary(run, k))
    return paths + [out / "summary.md"]


def _run_summary(run: Run, k: int) -> str:
    frame = run.frame
    last = frame[frame["round"] == frame["round"].max()].sort_values("member")
    best = int(best_rows(run.results).iloc[-1]["member"])
    copied = frame[frame["parent"] != frame["member"]]
    received = copied["member"].value_counts()
    given = copied["parent"].value_counts()
    rows = []
    for _, row in last.iterrows():
        m = int(row["member"])
        rows.append([f"**{m}** (best)" if m == best else str(m), fmt(row["score"]), fmt(row["test_score"]),
                     str(received.get(m, 0)), str(given.get(m, 0)), *(fmt(row[n]) for n in run.space.names)])
    header = ["member", "train score", "test score", "exploits (copied a donor)", "times donor",
              *run.space.names]
    head = headline(run, k)
    train, test = head.best
    settings = run.config["run"]
    return "\n".join([
        f"# {run.name}: {run.strategy} on {run.env}", "",
        f"Selection {run.selection}, {len(last)} members in the last round, {frame['round'].max() + 1} rounds, "
        f"{fmt(frame['steps'].max())} env steps per member, {fmt(frame['wall_s'].max())} s wall time, "
        f"seed {settings.get('seed', 'n/a')}.", "",
        f"**Final score: train {fmt(train)}, test {fmt(test)}** (member {best}). "
        f"Population mean in the last round: train {fmt(head.population[0])}, test {fmt(head.population[1])}. "
        f"Best member's mean over the last {head.k} rounds: train {fmt(head.last_k[0])}, "
        f"test {fmt(head.last_k[1])}. Over the run, per step trained (the area): best member train "
        f"{fmt(head.area[0])}, test {fmt(head.area[1])}; population mean train {fmt(head.population_area[0])}, "
        f"test {fmt(head.population_area[1])}.", "",
        *_kept_answer(run),
        markdown_table(header, rows), "",
        "Scores and configs are the members' in the last round. " + FINAL_SCORE_NOTE, "",
        *_category_shares(run),
    ])


def _kept_answer(run: Run) -> list[str]:
    """BG-PBT's and IPBT's answer, where a restart kept a generation's best member (``--member kept`` evaluates
    it): a restart can drop a generation whose best scored above the final population's. No lines for a run that
    never restarted, whose kept answer is its final score."""
    ends = generation_ends(run.results)
    if not ends:
        return []
    kept = member_row(run.results, "kept")
    where = (f"member {int(kept['member'])}'s best, kept at the restart after round {int(kept['round']) + 1}"
             if int(kept["round"]) in ends else f"member {int(kept['member'])} of the last round")
    return [f"**Kept answer: train {fmt(kept['score'])}, test {fmt(kept['test_score'])}** ({where}; the best on "
            f"train score of the {len(ends) + 1} generations' best members, what `--member kept` evaluates).", ""]


def _category_shares(run: Run) -> list[str]:
    """For each categorical hyperparameter, each choice's share of member-rounds, over the run and in the
    last round (what a categorical strategy such as EXP3 settled on); no lines for a space without one."""
    frame = run.frame
    last = frame[frame["round"] == frame["round"].max()]
    rows = []
    for name, param in run.space.params.items():
        if isinstance(param, Categorical):
            whole, final = (part[name].map(str).value_counts(normalize=True) for part in (frame, last))
            rows += [[name, str(c), f"{whole.get(str(c), 0.0):.0%}", f"{final.get(str(c), 0.0):.0%}"]
                     for c in param.choices]
    if not rows:
        return []
    return [markdown_table(["hyperparameter", "choice", "share of member-rounds", "share in the last round"],
                           rows), ""]
