"""The five stages of the DVC pipeline, one module each, run in this order by ``dvc repro``
(dvc.yaml) through ``lorasent <stage>`` (:mod:`lorasent.commands.stages`):

- :mod:`~lorasent.stages.fetch`: the corpus into ``data/raw``, the base model into
  ``models/base``;
- :mod:`~lorasent.stages.split`: the labelled, de-duplicated train/validation/test splits
  (``data/split``, ``metrics/data.json``);
- :mod:`~lorasent.stages.baseline`: the majority-class and zero-shot baselines
  (``metrics/baseline.json``);
- :mod:`~lorasent.stages.train`: the LoRA adapter (``models/adapter``, ``metrics/train``);
- :mod:`~lorasent.stages.evaluate`: the adapter on the test split (``metrics/eval.json``).

Beside them, :mod:`~lorasent.stages.test_sets` reads the extra labelled test sets of
``evaluate.test_sets`` under the split stage's rules, for evaluate; it writes nothing.

Each stage's deps in dvc.yaml list its module and every lorasent module it imports
(tests/test_dvc_deps.py checks them). Only docs here: no stage output depends on this
file.
"""
