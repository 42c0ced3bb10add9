"""The seeds record, metrics/seeds.json (issue 69): written by `lorasent seeds`, read by
`lorasent metrics` and the pull-request comment while the params are the same. Built
records, no DVC."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from conftest import committed
from lorasent.contracts import EvalMetrics, parse
from lorasent.errors import LorasentError
from lorasent.experiments.seeds import SeedRun, SeedsResult
from lorasent.params import read_yaml
from lorasent.review import collect
from lorasent.review.collect import Comparison
from lorasent.review.markup import md_text
from lorasent.review.pr_comment import comment_text, marker, seeds_line
from lorasent.review.seeds_record import (
    FORMAT_KEY,
    SEEDS_RECORD,
    SeedsRecord,
    check_writable,
    committed_seeds_record,
    group_line,
    params_sha256,
    write_seeds_record,
)
from lorasent.review.verdict import Review, Side, p_text
from test_compare import git_dvc
from test_seeds import _runs

PARAMS: dict[str, Any] = read_yaml(committed("params.yaml"), "params.yaml")
NO_DIFFERENCE = ([0.70, 0.74, 0.69], [0.71, 0.70, 0.73])  # adapter, encoder_ft: p = 0.83
BETTER = ([0.80, 0.81, 0.82], [0.70, 0.72, 0.71])


def _result(adapter: list[float], encoder_ft: list[float], params: dict[str, Any] | None = None,
            failed: int = 0) -> SeedsResult:
    """Runs of seeds 42, 43, ..., then ``failed`` failed runs."""
    runs = [SeedRun(f"d-seed{s}", s, "Success", e)
            for s, e in _runs(adapter, encoder_ft=[*encoder_ft])]
    runs += [SeedRun(f"d-seed{42 + len(adapter) + i}", 42 + len(adapter) + i, "Failed", None)
             for i in range(failed)]
    return SeedsResult(runs, PARAMS if params is None else params)


def _record(adapter: list[float], encoder_ft: list[float]) -> SeedsRecord:
    record = _result(adapter, encoder_ft).record()
    assert record is not None
    return record


def _with(params: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(params))
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(value, dict) and value:
        return [leaf for key, v in value.items() for leaf in _leaves(v, (*path, key))]
    return [path]


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


# ----------------------------------------------------------------- writing and reading


def test_a_written_record_reads_back_whole_with_its_numbers(tmp_path):
    adapter, encoder_ft = NO_DIFFERENCE
    result = _result(adapter, encoder_ft, failed=1)
    record = result.record()
    assert record is not None
    path = tmp_path / SEEDS_RECORD
    write_seeds_record(record, path)
    stored = _strict(path.read_text(encoding="utf-8"))
    assert stored[FORMAT_KEY] == 1 and stored["name"] == "d"
    assert "seed" not in stored["params"]["base"] and stored["params"]["split"]["seed"] == 42
    assert stored["params_sha256"] == params_sha256(PARAMS)
    assert [(r["experiment"], r["seed"], r["status"], r["test_accuracy"])
            for r in stored["runs"]] == [
        ("d-seed42", 42, "Success", 0.70), ("d-seed43", 43, "Success", 0.74),
        ("d-seed44", 44, "Success", 0.69), ("d-seed45", 45, "Failed", None)]
    committed_f1 = json.loads(committed("metrics/eval.json"))["macro_f1"]
    assert [r["test_macro_f1"] for r in stored["runs"]] == [committed_f1] * 3 + [None]
    assert [r["validation_accuracy"] for r in stored["runs"]] == [None] * 4
    [ref] = stored["references"]
    p = float(stats.ttest_ind(adapter, encoder_ft, equal_var=False).pvalue)
    assert ref == {
        "name": "encoder_ft", "seeds": [42, 43, 44],
        "reference": {"values": encoder_ft, "mean": float(np.mean(encoder_ft)),
                      "sd": float(np.std(encoder_ft, ddof=1))},
        "adapter": {"values": adapter, "mean": float(np.mean(adapter)),
                    "sd": float(np.std(adapter, ddof=1))},
        "test": "Welch's t-test", "p_value": p, "outcome": "no detectable difference",
        "verdict": f"no detectable difference (Welch's t-test {p_text(p)})",
        "paired": ["no detectable difference"] * 3}
    assert stored["strongest"] == ["encoder_ft"]
    assert stored["not_fitted"] == {"tfidf_lr": "", "encoder": ""}
    # read back under the params of another seed: the same record
    other_seed = _with(PARAMS, ("base", "seed"), 7)
    assert committed_seeds_record(other_seed, tmp_path) == record
    assert record.seeds == [42, 43, 44]


@pytest.mark.parametrize("done", [0, 1])
def test_fewer_than_two_runs_done_make_no_record(done):
    result = _result([0.7] * done, [0.7] * done, failed=2)
    assert result.record() is None
    assert SeedsResult(_result(*BETTER).runs).record() is None  # params not known


def test_the_params_hash_ignores_the_seed_key_order_and_spelling_and_nothing_else():
    text = committed("params.yaml")
    respelled = read_yaml(text.replace("learning_rate: 2.0e-4", "learning_rate: 0.0002"),
                          "params.yaml")
    assert "learning_rate: 2.0e-4" in text  # the respelling took
    assert params_sha256(respelled) == params_sha256(PARAMS)
    reordered = {key: PARAMS[key] for key in reversed(list(PARAMS))}
    assert params_sha256(reordered) == params_sha256(PARAMS)
    leaves = _leaves(PARAMS)
    assert len(leaves) > 30
    for leaf in leaves:
        changed = params_sha256(_with(PARAMS, leaf, ["changed", leaf]))
        assert (changed == params_sha256(PARAMS)) == (leaf == ("base", "seed")), leaf


def test_a_record_of_other_params_is_none(tmp_path):
    write_seeds_record(_record(*BETTER), tmp_path / SEEDS_RECORD)
    warned: list[str] = []
    for leaf in _leaves(PARAMS):
        if leaf != ("base", "seed"):
            assert committed_seeds_record(_with(PARAMS, leaf, "other"), tmp_path,
                                          warn=warned.append) is None, leaf
    assert committed_seeds_record(None, tmp_path) is None
    assert committed_seeds_record(PARAMS, tmp_path / "absent") is None
    assert warned == []


def _damaged(record: dict[str, Any]) -> dict[str, bytes]:
    text = json.dumps(record)
    edited = _with(record, ("params", "train", "learning_rate"), 0.1)
    return {
        "empty": b"", "not JSON": b"{", "truncated": text[:len(text) // 2].encode(),
        "a list": b"[]",
        **{f"a p-value {bad}": json.dumps({**record, "references": [
            {**record["references"][0], "p_value": float(bad)}]}).encode()
           for bad in ("nan", "inf", "-inf")},
        "no format key": json.dumps({k: v for k, v in record.items()
                                     if k != FORMAT_KEY}).encode(),
        "another version": json.dumps({**record, FORMAT_KEY: 2}).encode(),
        **{f"no {key}": json.dumps({k: v for k, v in record.items() if k != key}).encode()
           for key in record if key != FORMAT_KEY},
        "a wrong type": json.dumps({**record, "runs": "many"}).encode(),
        "an unknown key": json.dumps({**record, "extra": 1}).encode(),
        "params edited by hand": json.dumps(edited).encode(),
        "not UTF-8": b"\xff\xfe" + text.encode(),
    }


def test_a_damaged_record_is_none_with_one_warning_line(tmp_path):
    record = _record(*BETTER).model_dump(mode="json")
    path = tmp_path / SEEDS_RECORD
    path.parent.mkdir()
    for kind, data in _damaged(record).items():
        path.write_bytes(data)
        warned: list[str] = []
        assert committed_seeds_record(PARAMS, tmp_path, warn=warned.append) is None, kind
        assert len(warned) == 1 and "\n" not in warned[0], (kind, warned)
        assert warned[0].startswith(f"{SEEDS_RECORD}: "), (kind, warned)
        assert warned[0].endswith("ignored: no verdict over seeds (`make seeds` writes it "
                                  "again)"), (kind, warned)
    path.write_text(json.dumps(record), encoding="utf-8")  # whole again: read
    assert committed_seeds_record(PARAMS, tmp_path) is not None


@pytest.mark.parametrize("content", [b"{}", b"[]", b"not json", b'{"accuracy": 0.7}',
                                     b"\xff\xfe\x00", b"", b'{"lorasent_seeds": 1}'])
def test_a_file_that_is_not_a_seeds_record_is_never_replaced(tmp_path, content):
    path = tmp_path / SEEDS_RECORD
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(LorasentError) as caught:
        write_seeds_record(_record(*BETTER), path)
    assert str(caught.value) == (f"seeds: {path} exists and is not a seeds record (no "
                                 f"'{FORMAT_KEY}' key), so it is not replaced; move it away "
                                 "and run again")
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary left


def test_a_folder_in_its_place_is_refused_and_a_record_of_any_version_is_replaced(tmp_path):
    path = tmp_path / SEEDS_RECORD
    path.mkdir(parents=True)
    with pytest.raises(LorasentError, match="is not a seeds record"):
        check_writable(path)
    path.rmdir()
    record = _record(*BETTER)
    for old in ({FORMAT_KEY: 1}, {FORMAT_KEY: 99, "runs": "old"}):
        path.write_text(json.dumps(old), encoding="utf-8")
        write_seeds_record(record, path)
        assert SeedsRecord.model_validate_json(path.read_text(encoding="utf-8")) == record


def test_the_seeds_command_refuses_a_foreign_file_before_anything_runs(tmp_path, monkeypatch):
    from lorasent.commands.experiments import seeds
    from lorasent.experiments import seeds as runner

    (tmp_path / "params.yaml").write_text(committed("params.yaml"), encoding="utf-8")
    (tmp_path / "metrics").mkdir()
    (tmp_path / SEEDS_RECORD).write_text("{}", encoding="utf-8")
    monkeypatch.chdir(tmp_path)

    def never(**_: object) -> None:
        raise AssertionError("queued despite the foreign file")

    monkeypatch.setattr(runner, "run_seeds", never)
    result = CliRunner().invoke(seeds, ["-n", "2"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"lorasent seeds: error: {SEEDS_RECORD} exists and is not a seeds record (no "
        f"'{FORMAT_KEY}' key), so it is not replaced; move it away and run again"]


def test_the_seeds_command_writes_the_record_of_its_runs(tmp_path, monkeypatch):
    from lorasent.commands.experiments import seeds
    from lorasent.experiments import seeds as runner

    (tmp_path / "params.yaml").write_text(committed("params.yaml"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = _result(*NO_DIFFERENCE)
    monkeypatch.setattr(runner, "run_seeds", lambda **_: result)
    shown = CliRunner().invoke(seeds, ["-n", "3"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[-1].startswith(f"wrote {SEEDS_RECORD}: commit it")
    assert committed_seeds_record(PARAMS, tmp_path) == result.record()


# ----------------------------------------------------------------------- lorasent metrics


def _eval_json(word: str) -> str:
    """The committed eval.json, its strongest reference's paired verdict ``word``."""
    found = json.loads(committed("metrics/eval.json"))
    found["references"][found["strongest_supervised"]]["paired"]["verdict"] = word
    return json.dumps(found)


def _metrics(tmp_path: Path, monkeypatch, word: str, record: SeedsRecord | None,
             params: dict[str, Any] = PARAMS) -> list[str]:
    from lorasent.commands.project import metrics

    (tmp_path / "metrics").mkdir(exist_ok=True)
    (tmp_path / "metrics/eval.json").write_text(_eval_json(word), encoding="utf-8")
    (tmp_path / "params.yaml").write_text(json.dumps(params), encoding="utf-8")
    (tmp_path / SEEDS_RECORD).unlink(missing_ok=True)
    if record is not None:
        write_seeds_record(record, tmp_path / SEEDS_RECORD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(collect, "workspace_staleness", lambda: None)
    result = CliRunner().invoke(metrics, [])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


WORDS = ["better", "worse", "no detectable difference"]


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("group", [NO_DIFFERENCE, BETTER])
def test_metrics_gives_the_group_verdict_first_and_labels_the_seed(tmp_path, monkeypatch,
                                                                   word, group):
    without = _metrics(tmp_path, monkeypatch, word, None)
    evals = parse(EvalMetrics, json.loads(_eval_json(word)), "eval.json", "")
    verdict = evals.strongest_verdict()
    assert verdict is not None and without[0] == f"The adapter: {verdict}"
    record = _record(*group)
    shown = _metrics(tmp_path, monkeypatch, word, record)
    [ref] = record.references
    assert shown[0] == (f"The adapter over 3 seeds (42, 43, 44; metrics/seeds.json), against "
                        f"the strongest reference, fine-tuned encoder (mean accuracy "
                        f"{np.mean(group[1]):.4f}): {ref.verdict}.")
    said = f"The adapter, this seed (42): {verdict}"
    if word != "no detectable difference" and group == NO_DIFFERENCE:
        said += (f"; one seed's \"{word}\" is not the group's verdict: over the seeds against "
                 "fine-tuned encoder there is no detectable difference")
    assert shown[1] == said
    assert shown[2:] == without[1:]  # the rest as without a record
    if group == NO_DIFFERENCE:
        assert ref.outcome == "no detectable difference"
        assert "better" not in shown[0]


def test_metrics_without_a_record_of_these_params_is_unchanged(tmp_path, monkeypatch):
    without = _metrics(tmp_path, monkeypatch, "better", None)
    other = _with(PARAMS, ("train", "num_train_epochs"), 3)
    assert _metrics(tmp_path, monkeypatch, "better", _record(*NO_DIFFERENCE), other) == without
    # the committed seed is another: still the record of these params
    shown = _metrics(tmp_path, monkeypatch, "better", _record(*NO_DIFFERENCE),
                     _with(PARAMS, ("base", "seed"), 7))
    assert shown[1].startswith("The adapter, this seed (7): better than")


def test_metrics_warns_of_a_damaged_record_in_one_line_and_goes_on(tmp_path, monkeypatch):
    without = _metrics(tmp_path, monkeypatch, "better", None)
    (tmp_path / SEEDS_RECORD).write_text("{", encoding="utf-8")
    from lorasent.commands.project import metrics

    result = CliRunner().invoke(metrics, [])
    assert result.exit_code == 0, result.output
    shown = result.output.splitlines()
    assert shown[0].startswith(f"WARNING: {SEEDS_RECORD}: not a seeds record: ")
    assert shown[1:] == without


# ------------------------------------------------------------------ the pull-request comment


def _head_repo(root: Path, files: dict[str, str]) -> str:
    """A git repo of one commit holding ``files``; its short commit."""
    root.mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    git_dvc(root, "git", "init", "-q")
    git_dvc(root, "git", "add", "-A")
    git_dvc(root, "git", "commit", "-qm", "head")
    return git_dvc(root, "git", "rev-parse", "--short", "HEAD")


def _comparison(head: str, word: str) -> Comparison:
    evals = parse(EvalMetrics, json.loads(_eval_json(word)), "eval.json", "")
    sides = (Side("main", None, None, None, None, None),
             Side("HEAD", evals, None, None, None, None))
    return Comparison("main", "HEAD", {"main": "aaaaaaa", "HEAD": head}, {}, {}, {}, sides,
                      Review("No detectable difference.", [], ["negative"]), {})


@pytest.mark.parametrize("word", WORDS)
def test_the_comment_gives_bs_group_verdict_near_the_top(tmp_path, word):
    record = _record(*NO_DIFFERENCE)
    files = {"params.yaml": json.dumps(PARAMS),
             str(SEEDS_RECORD): record.model_dump_json()}
    head = _head_repo(tmp_path / "repo", files)
    c = _comparison(head, word)
    line = seeds_line(tmp_path / "repo", c)
    assert line is not None
    verdict = c.sides[1].evals.strongest_verdict()  # type: ignore[union-attr]
    assert line.startswith(f"**Over seeds:** B ({head}) over 3 seeds (42, 43, 44; "
                           "metrics/seeds.json at B), against the strongest reference, "
                           "fine-tuned encoder (mean accuracy 0.7133): no detectable "
                           "difference (Welch's t-test p = 0.")
    assert f"; this seed (42): {md_text(verdict)}" in line
    assert (f"one seed's \"{word}\" is not the group's verdict" in line) == (
        word != "no detectable difference")
    text = comment_text("b" * 40, "main", c, None, None, None, "x", seeds=line)
    lines = text.splitlines()
    assert lines[0] == marker("b" * 40) and lines[2] == "" and lines[3] == line
    assert lines.index(line) < lines.index("**No detectable difference.**")
    assert comment_text("b" * 40, "main", c, None, None, None, "x", seeds=None) == \
        "\n".join(lines[:3] + lines[5:]) + "\n"


def test_the_comment_has_no_seeds_line_for_other_params_and_warns_of_a_damaged_one(tmp_path):
    record = _record(*NO_DIFFERENCE)
    other = _with(PARAMS, ("train", "num_train_epochs"), 3)
    head = _head_repo(tmp_path / "other", {"params.yaml": json.dumps(other),
                                           str(SEEDS_RECORD): record.model_dump_json()})
    assert seeds_line(tmp_path / "other", _comparison(head, "better")) is None
    head = _head_repo(tmp_path / "none", {"params.yaml": json.dumps(PARAMS)})
    assert seeds_line(tmp_path / "none", _comparison(head, "better")) is None
    head = _head_repo(tmp_path / "damaged", {"params.yaml": json.dumps(PARAMS),
                                             str(SEEDS_RECORD): '{"runs": []}'})
    line = seeds_line(tmp_path / "damaged", _comparison(head, "better"))
    assert line == (f"⚠ B ({head}): metrics/seeds.json: not a seeds record: "
                    "lorasent_seeds_record: Field required; ignored: no verdict over seeds "
                    "(\\`make seeds\\` writes it again)")
    assert "\n" not in line


def test_group_line_names_each_tied_reference():
    runs = _runs([0.80, 0.81, 0.82], encoder=[0.3, 0.2, 0.1], encoder_ft=[0.1, 0.2, 0.3])
    record = SeedsResult([SeedRun(f"d-seed{s}", s, "Success", e) for s, e in runs],
                         PARAMS).record()
    assert record is not None and record.strongest == ["encoder", "encoder_ft"]
    line = group_line(record)
    assert line.startswith("over 3 seeds (42, 43, 44; metrics/seeds.json), the strongest "
                           "references tie, encoder + LR and fine-tuned encoder (mean "
                           "accuracy 0.2000): against encoder + LR the adapter is better")
    assert "; against fine-tuned encoder the adapter is better" in line
    none = SeedsResult([SeedRun(f"d-seed{s}", s, "Success", e)
                        for s, e in _runs([0.8, 0.81])], PARAMS).record()
    assert none is not None
    assert group_line(none) == ("over 2 seeds (42, 43; metrics/seeds.json): no supervised "
                                "reference was fitted in any run")
