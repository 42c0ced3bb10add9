"""Class weighting (seed 000 pitfall 3), the Trainer's loss hook, and the logged loss."""

import json

import numpy as np

from conftest import train_in
from lorasent.train import LorasentTrainer, class_weights


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


def test_the_last_step_is_logged_when_logging_steps_do_not_divide_max_steps(
        tmp_path, minilm_params, minilm_dir, split_dir):
    result = train_in(tmp_path, minilm_params(max_steps=3, logging_steps=2), minilm_dir,
                      split_dir)
    rows = [line.split("\t") for line in
            (tmp_path / "live/plots/metrics/loss.tsv").read_text().splitlines()[1:]]
    assert [int(step) for step, _ in rows] == [1, 2, 3]  # first step, every 2nd, the last
    provenance = json.loads((tmp_path / "provenance/train.json").read_text())
    assert result.final_loss == provenance["final_loss"] == float(rows[-1][1])
