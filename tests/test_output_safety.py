"""Issue 27, items 1, 2 and 10: nothing a command writes destroys what was there.

Output folders (`export --out`, `compare --out`) never replace the current folder, the
repository, tracked files or a folder the command did not write; `predict --output`
never replaces its input; predictions files read back as written; two runs writing the
same output both finish.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import CASES, train_in
from lorasent.atomic import atomic_open
from lorasent.cli import main
from lorasent.output_guard import (
    OUTPUT_MARKER,
    OutputPathError,
    check_output_file,
    check_output_folder,
    marker_text,
    output_dir,
    unwritable,
    written_files,
)
from lorasent.tables import spreadsheet_cell
from lorasent.tools.predict import (
    Prediction,
    open_inputs,
    write_predictions,
    written_by_predict,
)
from test_compare import make_metrics_repo

LABELS = ["negative", "neutral", "positive"]
NEVER = "choose another folder (--force does not override this)"
FORCE = "choose a new folder, or pass --force to replace it"


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=root,
                   check=True, capture_output=True)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file (``.git`` and ``.dvc`` included) and folder below ``root`` with its
    bytes' SHA-256: equal snapshots mean nothing was written or deleted."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(folder, name), root) + "/"] = "dir"
        for name in files:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = hashlib.sha256(
                Path(path).read_bytes()).hexdigest()
    return out


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A throwaway git + DVC repository, the current folder, holding a tracked `docs/`,
    a DVC cache file and a DVC output `data/split` declared in dvc.yaml."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "params.md").write_text("# params\n", encoding="utf-8")
    (root / "dvc.yaml").write_text("stages:\n  split:\n    cmd: 'true'\n    outs:\n"
                                   "    - data/split\n", encoding="utf-8")
    _git(root, "init", "-q")
    (root / ".dvc" / "cache" / "files" / "md5" / "ab").mkdir(parents=True)
    (root / ".dvc" / "cache" / "files" / "md5" / "ab" / "cdef").write_text("cached\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "init")
    monkeypatch.chdir(root)
    return root


def _refused(path: str | Path, **kwargs) -> str:
    with pytest.raises(OutputPathError) as err:
        check_output_folder(path, **{"command": "export", "force": False, **kwargs})
    return str(err.value)


# ---------------------------------------------------------------- the folder guard

def test_the_current_folder_and_the_repository_are_refused_even_with_force(repo, monkeypatch):
    (repo / "sub").mkdir()
    for force in (False, True):
        assert _refused(".", force=force) == (
            f"--out .: refusing to replace the current folder: export replaces the whole "
            f"folder it writes; {NEVER}")
        assert _refused(str(repo), force=force) == (
            f"--out {repo}: refusing to replace the current folder: export replaces the "
            f"whole folder it writes; {NEVER}")
        assert _refused("..", force=force) == (
            f"--out ..: refusing to replace a folder holding the current folder ({repo}): "
            f"export replaces the whole folder it writes; {NEVER}")
        assert _refused("/", force=force) == f"--out /: the filesystem root; {NEVER}"
    monkeypatch.chdir(repo / "sub")  # the repository root seen from a subfolder
    assert _refused("..", force=True) == (
        f"--out ..: refusing to replace a folder holding the current folder ({repo / 'sub'}): "
        f"export replaces the whole folder it writes; {NEVER}")
    monkeypatch.chdir(repo.parent)  # from outside: the repo is still refused
    assert _refused("repo", force=True) == (
        f"--out repo: refusing to replace the root of the repository; {NEVER}")


def test_home_and_a_folder_holding_a_repository_are_refused_even_with_force(tmp_path,
                                                                             monkeypatch):
    home = tmp_path / "home"
    (home / "projects" / "other" / ".git").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path / "work")
    assert _refused(home, force=True) == (
        f"--out {home}: refusing to replace your home folder; {NEVER}")
    assert _refused(home / "projects", force=True) == (
        f"--out {home / 'projects'}: refusing to replace a folder holding the repository "
        f"{home / 'projects' / 'other'}; {NEVER}")


def test_nothing_goes_into_git_or_dvc_data_even_new_and_forced(repo, monkeypatch):
    """`.git/x` and `.dvc/cache` (missing or empty) used to be written into."""
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    for given, meta in (("../.git/reports", ".git"), ("../.git", ".git"),
                        ("../.dvc/cache/files", ".dvc"), ("../.dvc/tmp/new", ".dvc")):
        assert _refused(given, force=True) == (
            f"--out {given}: inside {repo / meta}, the repository's own {meta} data; {NEVER}")
        with pytest.raises(OutputPathError) as err:
            check_output_file(f"{given}/out.csv", force=True)
        assert str(err.value) == (
            f"--output {given}/out.csv: inside {repo / meta}, the repository's own {meta} "
            "data; give another output file (--force does not override this)")
    assert not (repo / ".git" / "reports").exists() and not (repo / ".dvc" / "tmp").exists()


def test_tracked_folders_are_refused_unless_its_own_and_forced_and_dvc_folders_always(repo):
    for force in (False, True):  # a command never deletes what it did not write (issue 41)
        assert _refused("docs", force=force) == (
            "--out docs: refusing to replace a folder holding files tracked by git (1 file, "
            f"e.g. docs/params.md) that `lorasent export` did not write; {NEVER}")
    (repo / "report").mkdir()  # its own output, committed: replaced with --force
    (repo / "report" / OUTPUT_MARKER).write_text(
        marker_text("export", ["model.safetensors"]), encoding="utf-8")
    (repo / "report" / "model.safetensors").write_text("weights\n", encoding="utf-8")
    _git(repo, "add", "report")
    assert _refused("report") == (
        "--out report: refusing to replace a folder holding files tracked by git (2 files, "
        f"e.g. report/{OUTPUT_MARKER}); {FORCE} (git keeps the committed copy)")
    check_output_folder("report", command="export", force=True)
    (repo / "data" / "split").mkdir(parents=True)
    for force in (False, True):  # dvc checkout and dvc repro own them (issue 41)
        assert _refused("data", force=force) == (
            "--out data: refusing to replace a folder holding the DVC-tracked output "
            f"data/split (declared in dvc.yaml, stage split); {NEVER}")
        assert _refused("data/split/export", force=force) == (
            "--out data/split/export: refusing to replace a folder inside the DVC-tracked "
            f"output data/split (declared in dvc.yaml, stage split); {NEVER}")


def _read_only(monkeypatch, folder: Path) -> None:
    """Make ``folder`` refuse new files as a read-only mount does (EROFS), for root too."""
    import errno
    import tempfile

    make = tempfile.TemporaryFile

    def refuse(*args, dir=None, **kwargs):  # noqa: A002 - tempfile's own name
        if dir is not None and Path(dir) == folder:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return make(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)


def test_a_folder_that_cannot_be_written_is_refused_in_one_line(repo, monkeypatch):
    _read_only(monkeypatch, repo)
    assert _refused("reports/a-vs-b", force=True, option="the report folder") == (
        f"the report folder reports/a-vs-b: cannot write in {repo} (Read-only file system); "
        "give a folder you can write to with --out (--force does not override this)")
    (repo / "reports").mkdir()
    check_output_folder("reports/a-vs-b", command="compare", force=False)
    _read_only(monkeypatch, repo / "reports" / "a-vs-b")   # its own, to be emptied
    (repo / "reports" / "a-vs-b").mkdir()
    assert _refused("reports/a-vs-b", force=True, option="--out") == (
        f"--out reports/a-vs-b: cannot write in {repo / 'reports' / 'a-vs-b'} (Read-only file "
        "system); give a folder you can write to with --out (--force does not override this)")


def test_force_never_replaces_the_commands_own_inputs(repo):
    inputs = [("--adapter", "out/adapter"), ("--base", "base")]
    for given, said in (("out", "holds --adapter out/adapter"), ("base", "is --base base"),
                        ("out/adapter", "is --adapter out/adapter"),
                        ("base/merged", "is inside --base base")):
        assert _refused(given, force=True, inputs=inputs) == (
            f"--out {given}: {said}, which export reads; {NEVER}")
    check_output_folder("exported", command="export", force=True, inputs=inputs)


def test_a_foreign_folder_is_refused_and_its_own_output_replaced(repo):
    (repo / "mine" / "sub").mkdir(parents=True)
    (repo / "mine" / "sub" / "notes.txt").write_text("keep me\n", encoding="utf-8")
    (repo / "mine" / "a.txt").write_text("and me\n", encoding="utf-8")
    assert _refused("mine") == (
        "--out mine: refusing to replace a folder `lorasent export` did not write "
        f"(2 files, e.g. mine/a.txt); {FORCE}")
    (repo / "mine" / OUTPUT_MARKER).write_text(marker_text("compare"), encoding="utf-8")
    assert _refused("mine").startswith(  # another command's output is not export's
        "--out mine: refusing to replace a folder `lorasent export` did not write (3 files")
    check_output_folder("mine", command="export", force=True)
    (repo / "mine" / OUTPUT_MARKER).write_text(marker_text("export"), encoding="utf-8")
    check_output_folder("mine", command="export", force=False)
    (repo / "empty").mkdir()
    check_output_folder("empty", command="export", force=False)
    check_output_folder("new/folder", command="export", force=False)


def _own_folder(path: str, command: str) -> None:
    """A folder ``lorasent <command>`` wrote: verdict.md and a PNG in a subfolder."""
    with output_dir(path, command=command) as tmp:
        (tmp / "verdict.md").write_text("**B is better**\n", encoding="utf-8")
        (tmp / "plots").mkdir()
        (tmp / "plots" / "a.png").write_bytes(b"\x89PNG")


def test_its_own_folder_lists_the_files_it_wrote(repo):
    _own_folder("review/x", "compare")
    assert (repo / "review/x" / OUTPUT_MARKER).read_text(encoding="utf-8") == (
        marker_text("compare") + "It replaces only the files listed here; any other file is "
        "not its own and is never removed with a file git tracks.\n"
        'files: ["plots/a.png", "verdict.md"]\n')
    assert written_files(repo / "review/x" / OUTPUT_MARKER) == {
        "plots/a.png", "verdict.md", OUTPUT_MARKER}


@pytest.mark.parametrize("force", [False, True])
def test_force_never_removes_a_committed_file_its_command_did_not_write(repo, force):
    """Issue 51: `compare --out review/x --force` over its own earlier report folder
    deleted notes.md, committed there by someone else."""
    _own_folder("review/x", "compare")
    (repo / "review/x/notes.md").write_text("my notes\n", encoding="utf-8")
    _git(repo, "add", "review")
    _git(repo, "commit", "-q", "-m", "report and notes")
    assert _refused("review/x", command="compare", force=force) == (
        "--out review/x: refusing to replace a folder holding review/x/notes.md, tracked by "
        f"git, which `lorasent compare` did not write (its {OUTPUT_MARKER} does not list it); "
        f"move the file out of the folder (git mv) or {NEVER}")
    _git(repo, "rm", "-q", "--cached", "review/x/notes.md")  # untracked now: --force takes it
    assert _refused("review/x", command="compare", force=False) == (
        "--out review/x: refusing to replace a folder holding files tracked by git (3 files, "
        f"e.g. review/x/{OUTPUT_MARKER}); {FORCE} (git keeps the committed copy)")
    check_output_folder("review/x", command="compare", force=True)
    _git(repo, "commit", "-q", "-m", "notes out")
    (repo / "review/x/notes.md").unlink()
    check_output_folder("review/x", command="compare", force=True)  # only its own files


def test_its_own_folder_with_a_file_it_did_not_write_needs_force(repo):
    _own_folder("review/x", "compare")
    check_output_folder("review/x", command="compare", force=False)
    (repo / "review/x/plots/mine.txt").write_text("mine\n", encoding="utf-8")
    assert _refused("review/x", command="compare") == (
        "--out review/x: refusing to replace a folder holding review/x/plots/mine.txt, which "
        f"`lorasent compare` did not write (its {OUTPUT_MARKER} does not list it); move it "
        "out of the folder, choose a new folder, or pass --force to replace the folder, that "
        "file too")
    check_output_folder("review/x", command="compare", force=True)


def test_a_marker_that_lists_no_files_never_lets_force_remove_committed_ones(repo):
    (repo / "old").mkdir()  # written by a lorasent of before issue 51, then committed
    (repo / "old" / OUTPUT_MARKER).write_text(marker_text("compare"), encoding="utf-8")
    (repo / "old" / "report.md").write_text("# report\n", encoding="utf-8")
    check_output_folder("old", command="compare", force=False)  # untracked: as before
    _git(repo, "add", "old")
    assert _refused("old", command="compare", force=True) == (
        "--out old: refusing to replace a folder holding files tracked by git (2 files, e.g. "
        f"old/{OUTPUT_MARKER}): its {OUTPUT_MARKER}, of an older lorasent, does not list the "
        "files `lorasent compare` wrote; remove the folder yourself (git rm -r) if all of it "
        f"is lorasent's, or {NEVER}")


@pytest.mark.parametrize("command, args", [
    ("compare", ["compare", "v1", "v2"]),
    ("pr-comment", ["pr-comment", "main"]),
    ("export", ["export", "--adapter", "adapter", "--base", "base"]),
    ("learning-curve", ["learning-curve"]),
])
def test_no_command_removes_a_committed_file_it_did_not_write(repo, command, args):
    """Every command that replaces an --out folder (compare, pr-comment, export,
    learning-curve) refuses before any work, --force or not, and deletes nothing."""
    _own_folder("review/x", command)
    (repo / "review/x/notes.md").write_text("my notes\n", encoding="utf-8")
    _git(repo, "add", "review")
    _git(repo, "commit", "-q", "-m", "report and notes")
    before = _snapshot(repo)
    result = CliRunner().invoke(main, [*args, "--out", "review/x", "--force"])
    assert result.exit_code == 1
    assert result.stderr == (
        f"lorasent {command}: error: --out review/x: refusing to replace a folder holding "
        f"review/x/notes.md, tracked by git, which `lorasent {command}` did not write (its "
        f"{OUTPUT_MARKER} does not list it); move the file out of the folder (git mv) or "
        f"{NEVER}\n")
    assert _snapshot(repo) == before


def test_a_link_and_a_file_are_refused(repo):
    (repo / "target").mkdir()
    (repo / "link").symlink_to(repo / "target")
    assert _refused("link", force=True) == (
        f"--out link: a symbolic link (to {repo / 'target'}); export replaces the folder it "
        "writes, so give the path of a real folder, or a new one")
    assert _refused("docs/params.md", force=True) == (
        f"--out docs/params.md: a file, not a folder; {NEVER}")


def test_an_output_file_is_never_its_input_and_tracked_ones_need_force(repo):
    source = repo / "texts.csv"
    source.write_text("text\nhi\n", encoding="utf-8")
    for given in ("texts.csv", "./texts.csv", str(source)):
        with pytest.raises(OutputPathError) as err:
            check_output_file(given, force=True, inputs=[("--input", "texts.csv")])
        assert str(err.value) == (
            f"--output {Path(given)}: the same file as --input texts.csv; writing it would "
            "replace the input: give another output file (--force does not override this)")
    _git(repo, "add", "texts.csv")
    with pytest.raises(OutputPathError) as err:
        check_output_file("texts.csv", force=False)
    assert str(err.value) == (
        "--output texts.csv: tracked by git; writing it would replace the committed file: "
        "give another output file, or pass --force to replace it")
    check_output_file("texts.csv", force=True)
    check_output_file("new.csv", force=False)


def _written(path: Path, fmt: str, columns: list[str]) -> None:
    predictions = [Prediction("a,b", "neutral", {label: 1 / 3 for label in LABELS})]
    with open(path, "w", encoding="utf-8", newline="") as out:
        write_predictions(_predictions(["a,b", "c\rd"]) if columns else predictions, LABELS,
                          out, fmt, columns)


@pytest.mark.parametrize(("name", "content", "ours"), [
    ("out.csv", "text,label,p_negative,p_neutral,p_positive,note\n", True),
    ("out.csv", "id,input_text,text,label,p_a,note\r\nr1,x,x,a,1.0,\r\n", True),
    ("out.csv", "text,label\nhi,positive\n", False),  # a user's labelled data
    ("out.csv", "text,label,note\n", False),  # no probability column
    ("out.csv", "label,text,p_a,note\n", False),
    ("out.csv", "\xff\xfe", False),
    ("out.jsonl", '{"id": 1, "text": "x", "label": "a", "probabilities": {}, "note": ""}\n',
     True),
    ("out.jsonl", '{"text": "x", "label": "a"}\n', False),
    ("out.jsonl", '["text", "label", "probabilities", "note"]\n', False),
    ("out.jsonl", "not json\n", False),
])
def test_a_predictions_file_is_told_by_its_first_line(tmp_path, name, content, ours):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if not content.startswith("\xff")
                     else b"\xff\xfe")
    assert written_by_predict(path) is ours


@pytest.mark.slow
def test_an_output_file_predict_did_not_write_needs_force(tmp_path):
    ours = ("predict", written_by_predict)
    for i, (fmt, columns) in enumerate((("csv", []), ("csv", ["id", "text"]),
                                        ("jsonl", []), ("jsonl", ["id", "text"]))):
        path = tmp_path / f"ours{i}.{fmt}"
        _written(path, fmt, columns)
        check_output_file(path, force=False, ours=ours)  # its own output: replaced
    (tmp_path / "empty.csv").touch()
    check_output_file(tmp_path / "empty.csv", force=False, ours=ours)  # nothing to lose
    mine = tmp_path / "mine.csv"
    mine.write_text("text,label\nhi,positive\n", encoding="utf-8")
    with pytest.raises(OutputPathError) as err:
        check_output_file(mine, force=False, ours=ours)
    assert str(err.value) == (
        f"--output {mine}: an existing file that `lorasent predict` did not write; writing "
        "it would replace it: give another output file, or pass --force to replace it")
    check_output_file(mine, force=True, ours=ours)


def test_predict_refuses_a_foreign_output_before_loading_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("texts.csv").write_text("text\nhi\n", encoding="utf-8")
    Path("mine.jsonl").write_text('{"text": "keep me"}\n', encoding="utf-8")
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(main, ["predict", "--adapter", "no-adapter", "--input",
                                       "texts.csv", "--output", "mine.jsonl"])
    assert result.exit_code == 1
    assert result.stderr == (
        "lorasent predict: error: --output mine.jsonl: an existing file that `lorasent "
        "predict` did not write; writing it would replace it: give another output file, or "
        "pass --force to replace it\n")
    assert _snapshot(tmp_path) == before


def _no_model(*args, **kwargs):
    raise AssertionError("a model was loaded")


@pytest.mark.parametrize(("args", "shown", "fix"), [
    (["predict", "--output", "ro/out.csv", "a text"], "--output ro/out.csv",
     "give --output a path in a folder you can write to"),
    (["queue", "pool.txt", "--budget", "1", "--out", "ro/to_label.csv"],
     "--out ro/to_label.csv", "give --out a path in a folder you can write to"),
    (["export", "--out", "ro/exported"], "--out ro/exported",
     "give a folder you can write to with --out"),
    (["compare", "HEAD", "workspace", "--out", "ro/report"], "--out ro/report",
     "give a folder you can write to with --out"),
])
def test_an_output_in_a_read_only_folder_is_refused_before_anything_loads(
        tmp_path, monkeypatch, args, shown, fix):
    """Issue 51: `predict --output` into a read-only folder loaded the model, then ended
    in a traceback (OSError: [Errno 30] Read-only file system)."""
    (tmp_path / "ro").mkdir()
    _read_only(monkeypatch, tmp_path / "ro")
    monkeypatch.setattr("lorasent.modeling.load_trained_model", _no_model)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.stderr == (
        f"lorasent {args[0]}: error: {shown}: cannot write in {tmp_path / 'ro'} (Read-only "
        f"file system); {fix} (--force does not override this)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]


def test_an_output_below_a_file_or_in_a_folder_no_file_can_be_made_in_is_refused(tmp_path):
    """The real thing: /sys refuses new files to root too (os.access says it may)."""
    assert unwritable("/sys/lorasent-out/predictions.csv") == (
        "cannot write in /sys (Permission denied)")
    (tmp_path / "notes.txt").write_text("notes\n", encoding="utf-8")
    assert unwritable(tmp_path / "notes.txt" / "out.csv") == (
        f"{tmp_path / 'notes.txt'} is a file, not a folder")
    with pytest.raises(OutputPathError) as err:
        check_output_file(tmp_path / "notes.txt" / "out.csv", force=True)
    assert str(err.value) == (
        f"--output {tmp_path / 'notes.txt' / 'out.csv'}: {tmp_path / 'notes.txt'} is a "
        "file, not a folder; give --output a path in a folder you can write to (--force "
        "does not override this)")
    assert unwritable(tmp_path / "new" / "deeper" / "out.csv") is None   # made on writing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]   # nothing left


def test_an_output_file_inside_a_dvc_output_needs_force_even_when_new(repo, monkeypatch):
    """`predict --output data/split/x.csv` used to add a file to a DVC output (every stage
    after it then stale; in models/base, every later predict refused)."""
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    for given in ("../data/split/new.csv", "../data/split/deeper/new.jsonl"):
        with pytest.raises(OutputPathError) as err:
            check_output_file(given, force=False)
        assert str(err.value) == (
            f"--output {given}: inside the DVC-tracked output data/split (declared in "
            "dvc.yaml, stage split); writing there would change it: give another output "
            "file, or pass --force to write it")
        check_output_file(given, force=True)
    with pytest.raises(OutputPathError) as err:
        check_output_file("../data/split", force=False)
    assert str(err.value) == (
        "--output ../data/split: a DVC-tracked output (declared in dvc.yaml, stage split); "
        "writing it would replace it: give another output file, or pass --force to "
        "replace it")
    check_output_file("../data/new.csv", force=False)  # beside it: fine


# --------------------------------------------------------- predictions read back as written

ALPHABET = ["a", "Z", " ", ",", ";", "\t", '"', "'", "\r", "\n", "\r\n", "\u2028", "\u2029",
            "\u0085", "é", "字", "#", "\\"]


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))) + f" {i}"
            for i in range(n)]


def _predictions(texts: list[str]) -> list[Prediction]:
    return [Prediction(t, "neutral", {label: 1 / 3 for label in LABELS},
                       columns={"id": f"r{i}", "text": t}) for i, t in enumerate(texts)]


@pytest.mark.parametrize("seed", range(5))
def test_csv_predictions_read_back_identical_and_in_order(seed, tmp_path):
    texts = _texts(seed, 200)
    out = io.StringIO()
    write_predictions(_predictions(texts), LABELS, out, "csv", ["id", "text"])
    text = out.getvalue()
    # as written for spreadsheets: a text starting with a tab, a CR or a quote has a quote
    # in front (spreadsheet_cell), which pandas users take off with .str.removeprefix
    shown = [spreadsheet_cell(t) for t in texts]
    assert shown != texts
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    assert list(frame.columns) == ["id", "input_text", "text", "label", "p_negative",
                                   "p_neutral", "p_positive", "note"]
    assert frame["text"].tolist() == frame["input_text"].tolist() == shown
    assert frame["text"].str.removeprefix("'").tolist() == texts
    assert frame["id"].tolist() == [f"r{i}" for i in range(len(texts))]
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert [row[2] for row in rows[1:]] == shown
    # lorasent's own reader (predict --input, queue, fetch) gives the texts back as they were
    (tmp_path / "p.csv").write_text(text, encoding="utf-8", newline="")
    with open_inputs(str(tmp_path / "p.csv")) as inputs:
        assert [(t, c["input_text"]) for t, c in inputs.rows] == [(t, t) for t in texts]
    assert {len(row) for row in rows} == {8}
    # rows end in \n: each \r\n is inside a text, written twice (text and input_text)
    assert text.count("\r\n") == 2 * sum(t.count("\r\n") for t in texts)


def test_predict_csv_neutralises_formulas_in_every_text_cell(tmp_path):
    """Issue 51: `predict --output x.csv` is opened in spreadsheets; a text, a kept
    column's value or name that would run as a formula gets a leading quote, a number
    stays a number, and the file is still told as predict's."""
    out = io.StringIO()
    write_predictions([Prediction("=HYPERLINK(\"http://x.example\")", "neutral",
                                  {label: 1 / 3 for label in LABELS},
                                  columns={"@who": "-1+2", "score": "-0.5", "n": -3})],
                      LABELS, out, "csv", ["@who", "score", "n"])
    assert out.getvalue() == (
        "'@who,score,n,text,label,p_negative,p_neutral,p_positive,note\n"
        "'-1+2,-0.5,-3,\"'=HYPERLINK(\"\"http://x.example\"\")\",neutral,0.333333,0.333333,"
        "0.333333,\n")
    (tmp_path / "p.csv").write_text(out.getvalue(), encoding="utf-8")
    assert written_by_predict(tmp_path / "p.csv")


def test_a_bare_carriage_return_is_quoted():
    out = io.StringIO()
    write_predictions([Prediction("a\rb", None, None, "x")], LABELS, out, "csv")
    assert out.getvalue() == 'text,label,p_negative,p_neutral,p_positive,note\n"a\rb",,,,,x\n'


@pytest.mark.parametrize("seed", range(3))
def test_jsonl_predictions_read_back_identical_and_in_order(seed):
    texts = _texts(seed, 200)
    out = io.StringIO()
    write_predictions(_predictions(texts), LABELS, out, "jsonl", ["id", "text"])
    text = out.getvalue()
    # split as line-by-line readers do, by every line break Python knows
    assert [json.loads(line)["text"] for line in text.splitlines()] == texts
    assert pd.read_json(io.StringIO(text), lines=True, dtype=False)["text"].tolist() == texts


# ------------------------------------------------------------- two writers of one output

def test_a_running_writers_temporary_is_not_taken_for_a_stale_one(tmp_path):
    """Two `predict --output out.csv` at once: the second's start used to delete the
    first's temporary file, which then failed with "not found; run dvc repro"."""
    target = tmp_path / "out.csv"
    killed = tmp_path / ".out.csv.killed.tmp"  # a killed run's: nobody holds it
    killed.write_text("half\n", encoding="utf-8")
    with atomic_open(target) as first:
        assert not killed.exists()  # a leftover nobody holds is removed
        first.write("first\n")
        killed.write_text("half\n", encoding="utf-8")
        with atomic_open(target) as second:  # a second run starts meanwhile
            assert not killed.exists()
            assert len(list(tmp_path.glob(".out.csv.*.tmp"))) == 2  # the first's is kept
            second.write("second\n")
        assert target.read_text(encoding="utf-8") == "second\n"
        first.write("rest\n")
    assert target.read_text(encoding="utf-8") == "first\nrest\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


# ------------------------------------------------------- the commands, end to end

@pytest.fixture(scope="module")
def trained(tmp_path_factory, repo_params_raw, minilm_dir, split_dir):
    """A MiniLM seq_cls adapter trained 2 steps (seconds; conftest's ``minilm_params``
    with no overrides) and its base folder."""
    from conftest import LABELS as TRAIN_LABELS
    from lorasent.params import merge, parse_params

    preset = {"base": {"model": "packaged:minilm-l6", "labels": TRAIN_LABELS},
              "prompt": {"max_length": 32},
              "train": {"mode": "seq_cls", "max_steps": 2, "per_device_train_batch_size": 4,
                        "learning_rate": 1e-3, "logging_steps": 1,
                        "lora": {"target_modules": ["query", "value"]}}}
    folder = tmp_path_factory.mktemp("adapter")
    train_in(folder, parse_params(merge(repo_params_raw, preset)), minilm_dir, split_dir)
    return folder / "adapter", minilm_dir


def _export(trained, out: str, *extra: str):
    adapter, base = trained
    return CliRunner().invoke(main, ["export", "--adapter", str(adapter), "--base", str(base),
                                     "--out", out, *extra])


@pytest.mark.integration
def test_export_to_the_checkout_deletes_nothing(trained, repo):
    before = _snapshot(repo)
    for extra in ((), ("--force",)):
        result = _export(trained, ".", *extra)
        assert result.exit_code == 1
        assert result.stderr == (
            "lorasent export: error: --out .: refusing to replace the current folder: export "
            f"replaces the whole folder it writes; {NEVER}\n")
        assert _snapshot(repo) == before


@pytest.mark.integration
def test_a_file_given_for_a_folder_or_a_folder_for_a_file_is_one_line(trained, repo):
    before = _snapshot(repo)
    result = _export(trained, "docs/params.md", "--force")
    assert (result.exit_code, result.stderr) == (1, (
        "lorasent export: error: --out docs/params.md: a file, not a folder; choose another "
        "folder (--force does not override this)\n"))
    result = CliRunner().invoke(main, ["predict", "--output", "docs/params.md", "hi"])
    assert (result.exit_code, result.stderr) == (1, (
        "lorasent predict: error: --output docs/params.md: predict writes .csv or .jsonl "
        "files; give a path ending in .csv or .jsonl (nothing was written)\n"))
    assert _snapshot(repo) == before


@pytest.mark.integration
def test_a_device_error_names_the_option_that_set_it(trained, repo, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    adapter, base = trained
    build = f"torch {torch.__version__} (hip={torch.version.hip}, cuda={torch.version.cuda})"
    result = CliRunner().invoke(main, ["predict", "--adapter", str(adapter), "--base",
                                       str(base), "--device", "cuda", "hi"])
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"lorasent predict: error: --device is cuda but {build} sees no GPU; pass --device "
        "auto (or cpu) to use what is there")
    record = json.loads((adapter / "lorasent.json").read_text(encoding="utf-8"))
    record["params"]["base"]["device"] = "cuda"  # trained on a GPU, exported here
    copy = repo / "gpu-adapter"
    shutil.copytree(adapter, copy)
    (copy / "lorasent.json").write_text(json.dumps(record), encoding="utf-8")
    result = _export((copy, base), "exported")
    assert result.stderr.startswith(
        "lorasent export: error: base.device recorded with the adapter is cuda but "
        f"{build} sees no GPU; pass --device auto (or cpu) to use what is there")
    assert not (repo / "exported").exists()


@pytest.mark.integration
def test_export_into_a_foreign_folder_needs_force_and_reruns_replace_its_own(trained, repo):
    before = _snapshot(repo)
    for force in ((), ("--force",)):  # tracked files it did not write: never replaced
        result = _export(trained, "docs", *force)
        assert result.exit_code == 1
        assert result.stderr == (
            "lorasent export: error: --out docs: refusing to replace a folder holding files "
            "tracked by git (1 file, e.g. docs/params.md) that `lorasent export` did not "
            f"write; {NEVER}\n")
        assert _snapshot(repo) == before
    (repo / "notes").mkdir()  # a foreign folder, untracked: replaced with --force
    (repo / "notes" / "todo.txt").write_text("mine\n", encoding="utf-8")
    result = _export(trained, "notes", "--force")
    assert result.exit_code == 0, result.output
    assert (repo / "notes" / OUTPUT_MARKER).read_text(encoding="utf-8").startswith(
        marker_text("export"))
    assert not (repo / "notes" / "todo.txt").exists()
    for _ in range(2):  # its own output: replaced without --force
        result = _export(trained, "exported")
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (repo / "exported").iterdir()) == sorted(
        p.name for p in (repo / "notes").iterdir())


@pytest.fixture(scope="module")
def metrics_repo(tmp_path_factory):
    return make_metrics_repo(tmp_path_factory.mktemp("compare"))


@pytest.mark.slow
def test_compare_to_the_checkout_or_a_foreign_folder_deletes_nothing(metrics_repo,
                                                                     monkeypatch):
    monkeypatch.chdir(metrics_repo)
    (metrics_repo / "notes").mkdir(exist_ok=True)
    (metrics_repo / "notes" / "mine.md").write_text("mine\n", encoding="utf-8")
    before = _snapshot(metrics_repo)
    for out, message in ((".", "--out .: refusing to replace the current folder: compare "
                                f"replaces the whole folder it writes; {NEVER}"),
                         ("notes", "--out notes: refusing to replace a folder `lorasent "
                                   f"compare` did not write (1 file, e.g. notes/mine.md); "
                                   f"{FORCE}")):
        result = CliRunner().invoke(main, ["compare", "v1", "v1", "--out", out])
        assert result.exit_code == 1
        assert result.stderr == f"lorasent compare: error: {message}\n"
        assert _snapshot(metrics_repo) == before
    for _ in range(2):  # its own report folder: replaced without --force
        result = CliRunner().invoke(main, ["compare", "v1", "v1"])
        assert result.exit_code == 0, result.output
    report = metrics_repo / "reports" / "v1-vs-v1"
    assert (report / OUTPUT_MARKER).read_text(encoding="utf-8").startswith(
        marker_text("compare"))
    shutil.rmtree(metrics_repo / "reports")
    shutil.rmtree(metrics_repo / "notes")


def _predict(trained, *args: str):
    adapter, base = trained
    return CliRunner().invoke(main, ["predict", "--adapter", str(adapter), "--base", str(base),
                                     *args])


@pytest.mark.integration
def test_predict_never_writes_over_its_input(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "texts.jsonl"
    shutil.copy(CASES / "predict_cr_in_text.jsonl", source)
    before = source.read_bytes()
    for output in ("texts.jsonl", str(source)):
        for extra in ((), ("--force",)):
            result = _predict(trained, "--input", "texts.jsonl", "--output", output, *extra)
            assert result.exit_code == 1
            assert result.stderr == (
                f"lorasent predict: error: --output {output}: the same file as --input "
                "texts.jsonl; writing it would replace the input: give another output file "
                "(--force does not override this)\n")
            assert source.read_bytes() == before


@pytest.mark.integration
def test_predict_csv_of_texts_with_carriage_returns_reads_back(trained, tmp_path,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    case = CASES / "predict_cr_in_text.jsonl"
    inputs = [json.loads(line) for line in case.read_text(encoding="utf-8").split("\n")
              if line]
    assert any("\r" in row["text"] for row in inputs)
    result = _predict(trained, "--input", str(case), "--output", "out.csv")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv("out.csv", dtype=str, keep_default_na=False)
    assert frame["text"].tolist() == [row["text"] for row in inputs]
    assert frame["id"].tolist() == [str(row["id"]) for row in inputs]
    with open("out.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [row["text"] for row in rows] == [row["text"] for row in inputs]


def test_a_failed_write_half_way_says_exactly_which_outputs_it_replaced(tmp_path):
    """Issue 41: a stage that fails after replacing some of its tracked outputs (evaluate
    writes seven in turn, lorasent.atomic.write_in_turn) says which, in one line."""
    from lorasent.atomic import atomic_write_text, write_in_turn
    from lorasent.errors import LorasentError

    paths = [tmp_path / name for name in ("a.csv", "b.json", "c.json")]
    for path in paths:
        path.write_text("old\n", encoding="utf-8")

    def broken() -> None:
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="the disk went away"):  # nothing replaced yet
        write_in_turn([(paths[0], broken)], command="evaluate")
    assert [p.read_text() for p in paths] == ["old\n"] * 3
    with pytest.raises(LorasentError) as err:
        write_in_turn([(paths[0], lambda: atomic_write_text(paths[0], "new\n")),
                       (paths[1], lambda: atomic_write_text(paths[1], "new\n")),
                       (paths[2], broken)], command="evaluate")
    assert str(err.value) == (
        f"OSError: the disk went away; evaluate had already replaced {paths[0]}, {paths[1]} "
        f"(the rest, from {paths[2]} on, are as they were): `git checkout -- {paths[0]} "
        f"{paths[1]}` restores them, or rerun evaluate")
    assert [p.read_text() for p in paths] == ["new\n", "new\n", "old\n"]
