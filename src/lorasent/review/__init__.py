"""The review of a change: ``lorasent compare``, ``lorasent pr-comment``, ``lorasent reproduce``.

Split by job, so that each can be read and tested alone:

- :mod:`~lorasent.review.collect`: what git and DVC hold (revisions, experiments, their
  committed metrics and predictions, whether a side is stale);
- :mod:`~lorasent.review.verdict`: the judgement on data already read (paired deltas,
  McNemar's test, Welch's t-test over seeds, the verdict sentence, the warnings); pure,
  testable without git or DVC;
- :mod:`~lorasent.review.render`: the report (Markdown, HTML, PNG);
- :mod:`~lorasent.review.compare`: ``lorasent compare``, the three in order;
- :mod:`~lorasent.review.pr_comment`: the pull-request comment, built on the same;
- :mod:`~lorasent.review.reproduce`: the verdict on a rerun of a revision;
- :mod:`~lorasent.review.seeds_record`: ``metrics/seeds.json``, the verdicts over seeds
  that ``lorasent seeds`` writes and ``lorasent metrics`` and the comment read.

The experiment runners (``lorasent sweep``, ``seeds``, ``learning-curve``) are
:mod:`lorasent.experiments`, built on collect and render.

None of it imports torch, transformers or peft: the pull-request workflow installs none
(a test checks it).
"""
