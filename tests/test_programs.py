"""The programs lorasent runs (dvc, git): found beside the running Python without an
activated venv, named as programs when missing; a mistyped revision gets the names it could
have meant (issue 17, items 1 and 10). Fast: a tiny git + DVC repo, no training."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lorasent import programs
from lorasent.command_errors import user_errors
from lorasent.commands.review import compare as compare_command
from lorasent.errors import LorasentError
from lorasent.review.collect import check_revisions
from lorasent.review.compare import compare

BESIDE = Path(sys.executable).parent
# PATH without the venv (as without `source .venv/bin/activate`): git still on it, no dvc
NO_VENV_PATH = os.pathsep.join(d for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                               if d and not (Path(d) / "dvc").exists())
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
       "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A git + DVC repo: branches main and balanced-weight, tag v1, experiment lr-sweep."""
    root = tmp_path_factory.mktemp("revs")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_CONFIG_GLOBAL": os.devnull}

    def run(*argv: str) -> str:
        return subprocess.run(argv, cwd=root, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    run(*GIT, "init", "-q")
    run(str(BESIDE / "dvc"), "init", "-q")
    run(*GIT, "add", "-A")
    run(*GIT, "commit", "-q", "-m", "dvc init")
    run(*GIT, "branch", "balanced-weight")
    run(*GIT, "tag", "v1")
    head = run(*GIT, "rev-parse", "HEAD")
    # what `dvc exp run -n lr-sweep` leaves: refs/exps/<baseline[:2]>/<baseline[2:]>/<name>
    run(*GIT, "update-ref", f"refs/exps/{head[:2]}/{head[2:]}/lr-sweep", "HEAD")
    return root


# ------------------------------------------------------------ item 1: dvc not on PATH


def test_advice_names_dvc_as_it_is_typed_here(monkeypatch, tmp_path):
    from lorasent.tools.predict import AdapterFolderError, check_adapter_folder

    monkeypatch.setenv("PATH", NO_VENV_PATH)
    monkeypatch.chdir(BESIDE.parent.parent)  # the project that holds the venv
    typed = programs.as_typed("dvc")
    assert typed == str((BESIDE / "dvc").relative_to(Path.cwd()))  # .venv/bin/dvc
    with pytest.raises(AdapterFolderError) as err:
        check_adapter_folder(tmp_path / "none")
    assert f"get it back with `{typed} checkout models/adapter`" in str(err.value)
    monkeypatch.setenv("PATH", f"{BESIDE}{os.pathsep}{NO_VENV_PATH}")
    assert programs.as_typed("dvc") == "dvc"


def test_dvc_is_found_beside_python_without_an_activated_venv(monkeypatch):
    monkeypatch.setenv("PATH", NO_VENV_PATH)
    assert shutil.which("dvc") is None
    assert programs.program("dvc") == str(BESIDE / "dvc")
    assert programs.program("git") == shutil.which("git", path=NO_VENV_PATH)  # then PATH
    path = programs.environment()["PATH"].split(os.pathsep)
    assert path == [str(BESIDE), *NO_VENV_PATH.split(os.pathsep)]  # for dvc's `lorasent ...`


@pytest.mark.slow
def test_compare_runs_dvc_without_an_activated_venv(repo, monkeypatch):
    """`.venv/bin/lorasent compare` with the venv off PATH gets as far as DVC's answer
    (no metrics here), not `dvc: not found; run the earlier stages first`."""
    monkeypatch.setenv("PATH", NO_VENV_PATH)
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(compare_command, ["HEAD", "workspace"])
    assert result.exit_code == 1
    assert "neither HEAD nor workspace has metrics/eval.json" in result.output
    assert "not found" not in result.output


def _no_program(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, path=None: None)  # programs' shutil


def test_a_missing_program_is_named_with_how_to_get_it(monkeypatch, tmp_path):
    _no_program(monkeypatch)
    with pytest.raises(LorasentError) as err:
        programs.program("dvc")
    assert str(err.value) == (
        f"dvc: program not found, neither beside this Python ({BESIDE}) nor on PATH; "
        "`make setup` installs it into .venv; then run .venv/bin/lorasent, or activate .venv "
        "(source .venv/bin/activate)")
    with pytest.raises(LorasentError, match=r"^git: program not found.*apt-get install git"):
        programs.program("git")
    # through the CLI: a program, not a stage to run first
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(compare_command, ["HEAD", "workspace"])
    assert result.exit_code == 1
    assert "error: git: program not found" in result.output
    assert "earlier stages" not in result.output


@click.command()
@click.argument("what")
@user_errors
def _fails(what: str) -> None:
    if what == "program":
        subprocess.run(["lorasent-no-such-program", "--version"], check=False)
    elif what == "folder":
        subprocess.run(["git", "--version"], cwd="no-such-folder", check=False)
    else:
        Path("data/split/test.jsonl").read_text()


def test_user_errors_tell_a_missing_program_from_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(_fails, ["program"])
    assert result.exit_code == 1
    assert "error: lorasent-no-such-program: program not found, neither beside" in result.output
    assert "earlier stages" not in result.output
    result = CliRunner().invoke(_fails, ["file"])
    assert "error: data/split/test.jsonl: not found; run the earlier stages first (dvc repro)" \
        in result.output
    result = CliRunner().invoke(_fails, ["folder"])
    assert "no-such-folder: not found" in result.output
    assert "program" not in result.output


# --------------------------------------------------------- item 10: a mistyped revision


@pytest.mark.slow
def test_a_mistyped_revision_gets_the_names_it_could_have_meant(repo):
    with pytest.raises(LorasentError) as err:
        compare("balanced-wieght", "workspace", repo=repo)
    assert str(err.value) == (
        "compare: unknown revision 'balanced-wieght' (A); did you mean 'balanced-weight'? "
        "Experiments: lr-sweep; branches: balanced-weight, main; tags: v1 "
        "(`git log --oneline` lists the commits)")
    assert "unknown Git revision" not in str(err.value)  # lorasent's own, not DVC's
    with pytest.raises(LorasentError, match=r"'lr-swep' \(B\); did you mean 'lr-sweep'\?"):
        compare("main", "lr-swep", repo=repo)
    with pytest.raises(LorasentError, match=r"^compare: unknown revision 'zzz' \(A\): not a "
                                            r"commit, branch, tag or experiment here\. "
                                            r"Experiments: lr-sweep;"):
        compare("zzz", "workspace", repo=repo)


def test_known_revisions_pass_the_check(repo):
    check_revisions(repo, {"A": ["main", "v1", "HEAD~0", "lr-sweep"],
                            "B": ["balanced-weight", "workspace"]})


@pytest.mark.slow
def test_a_mistyped_revision_through_make_compare(repo, monkeypatch):
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(compare_command, ["main", "lr-swep"])
    assert result.exit_code == 1
    assert result.output.startswith("lorasent compare: error: unknown revision "
                                    "'lr-swep' (B); did you mean 'lr-sweep'?")


def test_compare_outside_a_git_repository(tmp_path):
    with pytest.raises(LorasentError, match="is not in a git repository"):
        compare("HEAD", "workspace", repo=tmp_path)


@pytest.mark.slow  # dvc exp list in a subprocess
def test_an_unknown_revision_in_a_shallow_clone_says_the_clone_is_shallow(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
           "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=source, check=True)
    for n in (1, 2):
        (source / "f.txt").write_text(f"{n}\n", encoding="utf-8")
        subprocess.run(["git", "add", "f.txt"], cwd=source, check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"c{n}"], cwd=source, check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{source}", str(clone)],
                   check=True)
    check_revisions(source, {"A": ["HEAD~1"]})  # the full history knows it
    with pytest.raises(LorasentError) as err:
        check_revisions(clone, {"A": ["HEAD~1"]})
    assert str(err.value).startswith("compare: unknown revision 'HEAD~1' (A): not a commit, ")
    assert str(err.value).endswith(
        "(`git log --oneline` lists the commits). This clone is shallow: it lacks the older "
        "commits; `git fetch --unshallow` fetches them")


def test_predict_while_train_runs_says_train_is_writing_the_adapter(tmp_path, monkeypatch):
    from lorasent.atomic import atomic_dir, being_written
    from lorasent.tools.predict import AdapterFolderError, check_adapter_folder

    monkeypatch.chdir(tmp_path)
    with pytest.raises(AdapterFolderError, match="no such folder"):
        check_adapter_folder("models/adapter")
    with atomic_dir(Path("metrics/train")):  # as train holds its loss history while it runs
        assert being_written("metrics/train") and not being_written("models/adapter")
        with pytest.raises(AdapterFolderError) as err:
            check_adapter_folder("models/adapter")
        assert str(err.value) == (
            "models/adapter: not there yet: a train run is writing it now (DVC removes the "
            "last adapter when a train stage starts); wait until it finishes, then run again")
        with pytest.raises(AdapterFolderError, match="no such folder"):  # another folder
            check_adapter_folder(tmp_path / "elsewhere")
    assert not being_written("metrics/train")


def _rwlock(folder: Path, pid: int, cmd: str, mode: str = "write") -> None:
    """DVC's rwlock as ``dvc repro`` leaves it while a stage runs (dvc/rwlock.py)."""
    adapter = str((folder / "models" / "adapter").resolve())
    info = {"pid": pid, "cmd": cmd}
    lock = {"write": {adapter: info}, "read": {adapter: [info]}} if mode == "write" else {
        "read": {adapter: [info]}}
    (folder / ".dvc" / "tmp").mkdir(parents=True, exist_ok=True)
    (folder / ".dvc" / "tmp" / "rwlock").write_text(json.dumps(lock), encoding="utf-8")


def test_predict_in_the_first_seconds_of_a_dvc_train_run_says_train_is_writing(tmp_path,
                                                                               monkeypatch):
    """Issue 51: DVC removes models/adapter and holds it in its rwlock before the stage's
    command starts; predict said "no such folder ... `dvc checkout models/adapter`", which
    puts an old adapter into the running stage's output."""
    from lorasent.tools.predict import AdapterFolderError, check_adapter_folder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    for mode in ("write", "read"):   # read: between DVC's removal and the command's start
        _rwlock(tmp_path, os.getpid(), "/home/u/project/.venv/bin/dvc repro", mode)
        with pytest.raises(AdapterFolderError) as err:
            check_adapter_folder("models/adapter")
        assert str(err.value) == (
            f"models/adapter: not there yet: a train run is writing it now (dvc repro, PID "
            f"{os.getpid()}; DVC removed the last adapter when the stage started); wait until "
            "it finishes, then run again")
    _rwlock(tmp_path, os.getpid(), "/usr/bin/dvc exp run -S train.lora.r=4")
    with pytest.raises(AdapterFolderError, match=r"a train run is writing it now \(dvc exp run "
                                                 r"-S train.lora.r=4, PID "):
        check_adapter_folder("models/adapter")
    _rwlock(tmp_path, os.getpid(), "/usr/bin/dvc checkout models/adapter")
    with pytest.raises(AdapterFolderError) as err:
        check_adapter_folder("models/adapter")
    assert str(err.value) == (
        f"models/adapter: not there yet: DVC is writing it now (dvc checkout models/adapter, "
        f"PID {os.getpid()}); wait until it finishes, then run again")
    # a holder whose process is gone (a killed dvc) is stale: the usual message
    done = subprocess.Popen(["true"])
    done.wait()
    _rwlock(tmp_path, done.pid, "/usr/bin/dvc repro")
    with pytest.raises(AdapterFolderError, match="no such folder"):
        check_adapter_folder("models/adapter")
    (tmp_path / ".dvc" / "tmp" / "rwlock").write_text("{not json", encoding="utf-8")
    with pytest.raises(AdapterFolderError, match="no such folder"):
        check_adapter_folder("models/adapter")


def test_the_train_stage_marks_the_adapter_as_written_from_its_start(tmp_path, monkeypatch):
    """Before the model (or torch) loads, predict already says a train run is writing the
    adapter; the mark is gone when the stage ends, whatever the outcome."""
    from conftest import committed
    from lorasent.atomic import being_written
    from lorasent.cli import main
    from lorasent.tools.predict import AdapterFolderError, check_adapter_folder

    seen = []

    def run_train(**kwargs):
        seen.append(being_written("models/adapter"))
        with pytest.raises(AdapterFolderError, match="a train run is writing it now"):
            check_adapter_folder("models/adapter")
        raise LorasentError("stopped by the test")

    monkeypatch.setattr("lorasent.stages.train.run_train", run_train)
    (tmp_path / "params.yaml").write_text(committed("params.yaml"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["train"])
    assert result.exit_code == 1 and "stopped by the test" in result.stderr
    assert seen == [True]
    assert not being_written("models/adapter")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == []


@pytest.mark.slow  # dvc repro in a subprocess
def test_predict_while_dvc_repro_runs_the_train_stage_says_train_is_writing(tmp_path,
                                                                            monkeypatch):
    """The real DVC: its rwlock holds models/adapter while the stage's command (here a
    sleep, as the first seconds of `lorasent train`) runs after DVC removed the folder."""
    from lorasent.tools.predict import AdapterFolderError, check_adapter_folder

    subprocess.run([*GIT, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([str(BESIDE / "dvc"), "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  train:\n    cmd: sleep 60 && mkdir models/adapter\n"
        "    outs:\n      - models/adapter\n", encoding="utf-8")
    (tmp_path / "models" / "adapter").mkdir(parents=True)
    run = subprocess.Popen([str(BESIDE / "dvc"), "repro", "-q"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    monkeypatch.chdir(tmp_path)
    try:
        for _ in range(600):  # DVC removes the old folder, then runs the command
            if not (tmp_path / "models" / "adapter").exists() and "sleep" in subprocess.run(
                    ["ps", "-o", "args=", "--ppid", str(run.pid)], capture_output=True,
                    text=True).stdout:
                break
            time.sleep(0.1)
        with pytest.raises(AdapterFolderError) as err:
            check_adapter_folder("models/adapter")
        assert str(err.value).startswith(
            f"models/adapter: not there yet: a train run is writing it now (dvc repro -q, PID "
            f"{run.pid}; DVC removed the last adapter when the stage started)")
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        run.wait()
