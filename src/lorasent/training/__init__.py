"""The train stage's machinery, around its recipe (:func:`lorasent.stages.train.run_train`).

- :mod:`~lorasent.training.trainer`: transformers' ``Trainer`` with the encoder's loss
  and its guard against a NaN loss, the project's validation scoring, and a data order
  a resumed run draws again;
- :mod:`~lorasent.training.callbacks`: the Trainer callbacks that log the loss history
  (the last step, dvclive at the optimiser step) and the history's summaries;
- :mod:`~lorasent.training.checkpoints`: the training's key, and its checkpoints:
  written, checked, resumed, set aside and removed.

Only ``lorasent.stages.train`` imports this package (tests/test_architecture.py).
"""
