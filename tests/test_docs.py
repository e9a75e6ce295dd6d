"""Every command in ``docs/`` runs as written.

Blocks marked ``<!-- quick -->`` run for real, in a scratch folder that sees
the repository's ``docs/`` and ``experiments/``. The others (hours on a GPU) go as far as they can
without training: ``pbx.train`` commands through argument parsing, config
resolution and run-folder checks, up to where the runner would start; other
commands' flags must be among those their ``--help`` lists. The worked
examples of a new strategy and a new member are imported and run.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import pbx.runners.start
import pbx.train
from pbx.history import read_csv

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- quick -->\s*\n)?```sh\n(.*?)```", re.S)


def _commands(quick: bool) -> list[tuple[str, str]]:
    """(page, command) of every shell line in the docs' ``sh`` blocks, quick ones or the others."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for match in BLOCK.finditer(page.read_text()):
            if bool(match.group(1)) == quick:
                for line in match.group(2).splitlines():
                    for part in line.split("&&"):  # the install line chains venv, pip and the first run
                        if part.strip():
                            found.append((page.name, part.strip()))
    return found


def _argv(command: str) -> list[str] | None:
    """The Python argv of a documented command (``python`` = this interpreter), None for non-Python ones."""
    words = shlex.split(command.split("#")[0])
    if words[:1] == ["mpiexec"]:
        words = words[3:]  # mpiexec -n N: the run's settings are checked here without MPI
    if not words or Path(words[0]).name not in ("python", "python3") or words[1:2] == ["-m"] and words[2] == "venv":
        return None
    return words[1:]


QUICK = _commands(quick=True)
OTHERS = [(page, command) for page, command in _commands(quick=False) if _argv(command) is not None]


def test_the_docs_have_quick_and_long_commands() -> None:
    assert len(QUICK) >= 5 and len(OTHERS) >= 5, (QUICK, OTHERS)


QUICK_PAGES = sorted({page for page, _ in QUICK})


@pytest.mark.parametrize("page", QUICK_PAGES)
def test_quick_commands_run_as_written(page: str, tmp_path: Path) -> None:
    """Each page's quick commands in order, from a folder of their own (a page's later commands read what its
    earlier ones wrote); one test per page, so the pages run side by side."""
    for folder in ("docs", "experiments"):  # what a clone of the repository has beside the commands' outputs
        (tmp_path / folder).symlink_to(ROOT / folder)
    for command in [command for on, command in QUICK if on == page]:
        argv = _argv(command)
        assert argv is not None, f"{page}: {command}"
        proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{page}: {command}\n{proc.stderr}"


class _Reached(Exception):
    """The command got as far as building its runner: everything it was given checked out."""


class _StopRunner:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise _Reached


@pytest.mark.parametrize("page, command", OTHERS, ids=[f"{p}:{c[:60]}" for p, c in OTHERS])
def test_long_commands_parse_and_resolve(page: str, command: str, tmp_path: Path, monkeypatch, capsys) -> None:
    argv = _argv(command)
    assert argv is not None
    monkeypatch.chdir(ROOT)
    if argv[:2] == ["-m", "pbx.train"]:
        monkeypatch.setattr(pbx.runners.start, "SyncRunner", _StopRunner)
        run_dir = tmp_path / "run"
        if "--resume" in argv:  # a run folder to continue: a tiny toy run stands in for it
            assert pbx.train.main(["--env", "toy", "--run-dir", str(run_dir)]) == 0
            argv[argv.index("--resume") + 1] = str(run_dir)
        else:
            argv += ["--run-dir", str(run_dir)]
        with pytest.raises(_Reached):
            pbx.train.main(argv[2:])
        return
    launch = tuple(argv[:2] if argv[0] == "-m" else argv[:1])  # ("-m", module) or (script,)
    for flag in (word.split("=")[0] for word in argv if word.startswith("--")):
        assert flag in _help(launch), f"{page}: {command}: {flag} is not an option of {launch[-1]}"


@functools.cache
def _help(launch: tuple[str, ...]) -> str:
    """A command's ``--help``: pbx's own from its parser in this process (the help that
    ``docs/cli.md`` is checked against), any other from a subprocess."""
    if launch[0] == "-m" and launch[1].startswith("pbx."):
        return importlib.import_module(launch[1]).build_parser().format_help()
    helped = subprocess.run([sys.executable, *launch, "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0, helped.stderr
    return helped.stdout


def test_the_example_strategy_and_member_train_and_resume(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(DOCS / "examples"))
    import jitter
    import quadratic

    from pbx.strategies import STRATEGIES
    from pbx.members import REGISTERED

    assert STRATEGIES["jitter"] is jitter.Jitter and REGISTERED["quadratic"] is quadratic.Quadratic
    run = tmp_path / "jitter"
    assert pbx.train.main(["--env", "toy", "--search", "jitter", "-m", "spread=3", "--run-dir", str(run)]) == 0
    frame = read_csv(run / "history.csv")
    changed = frame[frame["explored"]]
    assert len(changed) > 0 and changed["parent"].ne(changed["member"]).all()
    # the worked member: PBT finds a better final state than its worst fixed step size
    run = tmp_path / "quadratic"
    assert pbx.train.main(["--env", "quadratic", "--search", "PBT", "--run-dir", str(run)]) == 0
    assert pbx.train.main(["--resume", str(run), "-m", "max_budget=300"]) == 0
    frame = read_csv(run / "history.csv")
    assert frame["round"].max() == 29 and frame["steps"].max() == 300
    final = frame[frame["round"] == 29]["score"]
    assert final.max() > -0.05  # x within about 0.2 of the optimum 3 from its start at 0


def test_the_command_line_reference_matches_the_commands() -> None:
    """The page as a fresh interpreter makes it: the help of ``--search`` and ``--algo`` is built from the
    registries, which other tests in this process extend (the worked examples register ``jitter`` and
    ``quadratic``)."""
    spec = importlib.util.spec_from_file_location("make_cli", DOCS / "make_cli.py")
    make_cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_cli)
    assert set(make_cli.COMMANDS) == {p.stem for p in (ROOT / "pbx").glob("*.py") if "__main__" in p.read_text()}
    page = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.stdout.write(runpy.run_path(sys.argv[1])"
                           "['reference']())", str(DOCS / "make_cli.py")], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    assert (DOCS / "cli.md").read_text() == page, "docs/cli.md is stale: python docs/make_cli.py"


@pytest.mark.parametrize("page", ["getting-started.md", "reference.md", "concepts.md"])
def test_the_run_folder_listings_name_kept_and_the_replay_segments(page: str) -> None:
    """What a run folder holds, as pbx/run_dir.py's docstring lists it: BG-PBT's and IPBT's kept/ and an off-policy
    agent's replay segments beside its checkpoints were missing from every listing."""
    from pbx.run_dir import __doc__ as listing

    assert "runs/<name>/kept/" in listing
    text = (DOCS / page).read_text()
    assert "kept/" in text, page
    assert "member_<i>.replay." in text or "replay segments" in " ".join(text.split()), page


def test_the_code_map_names_every_module() -> None:
    """reference.md's code map is where a contributor looks for a module: a module added without a line there is
    a module nobody finds."""
    text = (DOCS / "reference.md").read_text()
    section = text[text.index("## Code map"):text.index("## Benchmarks")]
    modules = sorted(p.relative_to(ROOT) for p in (ROOT / "pbx").rglob("*.py") if p.name != "__init__.py")
    unnamed = [str(p) for p in modules if f"`{p.name}`" not in section and f"`{p}`" not in section
               and f"/{p.name}`" not in section]
    assert not unnamed, f"not in reference.md's code map: {unnamed}"
