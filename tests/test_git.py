"""lorasent.git, the one way lorasent runs git: its output, None, or one line naming the
command, git's arguments and the folder."""

import subprocess

import pytest

from lorasent.errors import LorasentError
from lorasent.git import git, git_bytes, git_or_none, run_git


@pytest.fixture
def repo(tmp_path):
    committer = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    (tmp_path / "a.txt").write_bytes(b"one\n")
    for args in (["init", "-q"], ["add", "a.txt"], [*committer, "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    return tmp_path


def test_git_gives_the_output_and_a_failure_in_one_line_naming_command_and_folder(repo):
    assert git(repo, "show", "HEAD:a.txt") == "one\n"
    with pytest.raises(LorasentError) as err:
        git(repo, "show", "HEAD:b.txt", command="sweep")
    message = str(err.value)
    assert message.startswith(f"sweep: `git show HEAD:b.txt` failed in {repo.resolve()}: ")
    assert "b.txt" in message.split(": ", 2)[2] and "\n" not in message


def test_git_or_none_and_git_bytes_answer_none_where_git_fails(repo, tmp_path_factory):
    assert git_or_none(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}") is not None
    assert git_or_none(repo, "show", "HEAD:b.txt") is None
    assert git_or_none(tmp_path_factory.mktemp("none") / "missing", "status") is None
    assert git_bytes(repo, "cat-file", "--batch", input=b"HEAD:a.txt\n") == (
        git(repo, "rev-parse", "HEAD:a.txt").strip().encode() + b" blob 4\none\n\n")
    assert git_bytes(repo, "show", "HEAD:b.txt") is None


def test_run_git_leaves_the_exit_status_and_stderr_to_the_caller(repo):
    done = run_git(repo, "show", "HEAD:b.txt")
    assert done.returncode == 128 and "b.txt" in done.stderr and done.stdout == ""
