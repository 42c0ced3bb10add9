"""The experiment runners: many trainings of the pipeline, each a DVC experiment, and what
they say together. They run the pipeline; the review of a change (:mod:`lorasent.review`)
only reads what ran.

- :mod:`~lorasent.experiments.sweep`: ``lorasent sweep``, a grid of params × seeds as Ray
  tasks (:mod:`~lorasent.experiments.grid`, :mod:`~lorasent.experiments.repo_checks`,
  :mod:`~lorasent.experiments.cluster`, :mod:`~lorasent.experiments.task`);
- :mod:`~lorasent.experiments.seeds`: ``lorasent seeds``, the current params over N seeds
  through DVC's queue;
- :mod:`~lorasent.experiments.learning_curve`: ``lorasent learning-curve``, accuracy
  against training rows, run as a sweep: the forms a curve is fitted in
  (:mod:`~lorasent.experiments.curve_forms`), the projection, backtest and trend
  (:mod:`~lorasent.experiments.projection`), the sentence
  (:mod:`~lorasent.experiments.curve_sentence`), the report
  (:mod:`~lorasent.experiments.curve_report`) and the run-time estimate
  (:mod:`~lorasent.experiments.runtime_estimate`).

They import the core, the review code (its reading of git and DVC, its rendering) and
each other; only the commands (:mod:`lorasent.commands.experiments`) import them. None
of them imports torch.
"""
