"""Class weighting (seed 000 pitfall 3), the Trainer's loss hook, and the logged loss."""

import json
import logging

import numpy as np
import pytest
import yaml

from conftest import REPO, train_in
from lorasent.stages.train import class_weights
from lorasent.training.checkpoints import CHECKPOINT_RECORD, TRAIN_CODE, Checkpoints, training_key
from lorasent.training.trainer import EpochSeededSampler, LorasentTrainer


def test_no_weighting_is_all_ones():
    np.testing.assert_array_equal(class_weights("none", [0, 0, 1], 3), [1.0, 1.0, 1.0])


def test_balanced_weights_are_n_over_k_count():
    # 4 rows, 2 classes present: 4 / (2 * 3) and 4 / (2 * 1); the absent class keeps 1.
    np.testing.assert_allclose(class_weights("balanced", [0, 0, 0, 1], 3), [2 / 3, 2.0, 1.0])


def test_balanced_weights_equalise_class_totals():
    labels = [0] * 55 + [1] * 25 + [2] * 20            # seed 000's 55/25/20 split
    w = class_weights("balanced", labels, 3)
    totals = np.bincount(labels) * w
    np.testing.assert_allclose(totals, totals[0])


def test_trainer_divides_its_per_batch_loss_by_accumulation():
    assert LorasentTrainer.loss_is_scaled_for_ga is False


@pytest.mark.integration
def test_the_last_step_is_logged_when_logging_steps_do_not_divide_max_steps(
        tmp_path, minilm_params, minilm_dir, split_dir):
    result = train_in(tmp_path, minilm_params(max_steps=3, logging_steps=2), minilm_dir,
                      split_dir)
    rows = [line.split("\t") for line in
            (tmp_path / "live/plots/metrics/loss.tsv").read_text().splitlines()[1:]]
    assert [int(step) for step, _ in rows] == [1, 2, 3]  # first step, every 2nd, the last
    provenance = json.loads((tmp_path / "provenance/train.json").read_text())
    assert result.final_loss == provenance["final_loss"] == float(rows[-1][1])


class Stopped(Exception):
    """Stands for a kill right after a checkpoint was saved."""


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.integration
def test_a_stopped_run_resumes_to_the_adapter_of_an_uninterrupted_one(
        tmp_path, monkeypatch, caplog, minilm_params, minilm_dir, split_dir):
    # 8 rows, batches of 2: 4 steps an epoch, 12 in all; checkpoints every 3 steps, so the
    # stop at step 6 resumes in the middle of the second epoch, between two loss records
    params = minilm_params(max_steps=-1, num_train_epochs=3, per_device_train_batch_size=2,
                           save_steps=3, logging_steps=2)
    train_in(tmp_path / "whole", params, minilm_dir, split_dir)

    real = Checkpoints.on_save

    def stop_at_step_6(self, args, state, control, **kwargs):
        real(self, args, state, control, **kwargs)
        if state.global_step == 6:
            raise Stopped

    monkeypatch.setattr(Checkpoints, "on_save", stop_at_step_6)
    with pytest.raises(Stopped):
        train_in(tmp_path / "resumed", params, minilm_dir, split_dir)
    assert sorted(p.name for p in (tmp_path / "resumed").iterdir()) == ["checkpoints"]
    assert sorted(p.name for p in (tmp_path / "resumed/checkpoints").iterdir()) == [
        "checkpoint-3", "checkpoint-6"]

    monkeypatch.setattr(Checkpoints, "on_save", real)
    with caplog.at_level(logging.INFO, logger="lorasent.stages.train"):
        result = train_in(tmp_path / "resumed", params, minilm_dir, split_dir)
    assert (f"resuming from step 6 of 12 ({tmp_path}/resumed/checkpoints/checkpoint-6)"
            in caplog.text)
    assert result.steps == 12
    whole, resumed = _files(tmp_path / "whole"), _files(tmp_path / "resumed")
    assert sorted(resumed) == sorted(whole)  # the checkpoints are gone
    for name in whole:
        if name.startswith(("adapter/", "live/plots/metrics/")) and not name.startswith(
                "live/plots/metrics/train/") or name == "live/plots/metrics/train/loss.tsv":
            assert resumed[name] == whole[name], name
    metrics = [json.loads((tmp_path / run / "live/metrics.json").read_text())
               for run in ("whole", "resumed")]
    assert metrics[1]["train"]["loss"] == metrics[0]["train"]["loss"]  # the whole run's mean
    provenance = json.loads((tmp_path / "resumed/provenance/train.json").read_text())
    assert provenance["resumed_from_step"] == 6


def _checkpoint(folder, step, key, rng=("rng_state.pth",), state=True):
    """A checkpoint folder holding every file Trainer resumes from, with tiny contents."""
    import torch
    from safetensors.torch import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if key:
        (path / CHECKPOINT_RECORD).write_text(json.dumps({"key": key, "step": step}))
    if state:
        (path / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "max_steps": 12}))
    save_file({"lora_A": torch.zeros(2, 2)}, path / "adapter_model.safetensors")
    for name in ("optimizer.pt", "scheduler.pt", *rng):
        torch.save({"python": None}, path / name)
    return path


def test_only_complete_checkpoints_of_the_same_training_are_resumed(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    _checkpoint(folder, 2, "k")
    last = _checkpoint(folder, 4, "k")
    _checkpoint(folder, 6, "other")                       # params, data or code changed
    _checkpoint(folder, 8, None)                          # killed before the record
    (_checkpoint(folder, 10, "k") / "rng_state.pth").write_bytes(b"PK\x03\x04")  # cut short
    with caplog.at_level(logging.INFO, logger="lorasent.stages.train"):
        assert Checkpoints(folder, key="k", processes=1).prepare(resume=True) == last
    assert [p.name for p in Checkpoints(folder, "k", 1).found()] == ["checkpoint-2",
                                                                       "checkpoint-4"]
    assert [r.getMessage() for r in caplog.records] == [
        f"removed {folder}/checkpoint-6 (from another training: its params, data, "
        "base model or code differ)",
        f"removed {folder}/checkpoint-8 (incomplete: the run was stopped while saving "
        "it)",
        f"set aside {folder}/checkpoint-10 as {folder}/damaged-checkpoint-10 (damaged: "
        "rng_state.pth is cut short or corrupt (BadZipFile: File is not a zip file)); it "
        "is never resumed and kept for inspection: delete it when done"]
    # two processes need both RNG states
    assert Checkpoints(folder, key="k", processes=2).why_not(last) == (
        "damaged: rng_state_0.pth, rng_state_1.pth missing")
    two = _checkpoint(tmp_path / "two", 2, "k", rng=("rng_state_0.pth", "rng_state_1.pth"))
    assert Checkpoints(two.parent, key="k", processes=2).why_not(two) is None
    # train.resume: never removes them all
    assert Checkpoints(folder, key="k", processes=1).prepare(resume=False) is None
    assert [p.name for p in folder.iterdir()] == ["damaged-checkpoint-10"]


def test_the_training_key_changes_with_what_is_trained_only(params):
    def key(train=params.train, inputs=None, setting=None):
        return training_key(base=params.base, prompt=params.prompt, train=train,
                            inputs=inputs or {"train.jsonl": "a"},
                            setting=setting or {"device": "cpu"})

    same = key()
    assert key() == same and len(same) == 64
    assert key(params.train.model_copy(update={"save_steps": 7, "resume": "never"})) == same
    assert key(params.train.model_copy(update={"learning_rate": 1e-3})) != same
    assert key(inputs={"train.jsonl": "b"}) != same
    assert key(setting={"device": "cuda"}) != same


def test_the_key_covers_the_code_dvc_yaml_lists_for_train():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    code = sorted(dep.removeprefix("src/lorasent/").removesuffix(".py").replace("/", ".")
                  for dep in stages["train"]["deps"] if dep.startswith("src/"))
    assert sorted(TRAIN_CODE) == code


def test_the_epoch_order_depends_on_the_seed_and_epoch_only():
    def order(seed, epoch):
        sampler = EpochSeededSampler(2, lengths=list(range(20)), seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(42, 1) == order(42, 1)
    assert sorted(order(42, 1)) == list(range(20))
    assert len({tuple(order(seed, epoch)) for seed in (42, 43) for epoch in (0, 1)}) == 4
