"""Class weighting (seed 000 pitfall 3) and the Trainer's loss hook."""

import numpy as np

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
