"""The report's pieces that need no repo: DVC's plot specs made still, cell formats."""

from lorasent.compare import _fmt, _labels, _slug, _static


def _confusion(facet: dict) -> dict:
    return {"facet": facet, "params": [{"name": "showValues", "bind": {"input": "checkbox"}}],
            "spec": {}}


def test_a_plot_faceted_by_revision_keeps_dvcs_order_and_shows_counts():
    spec = _static(_confusion({"column": {"field": "rev", "sort": []}}))
    assert spec["facet"] == {"column": {"field": "rev", "sort": []}}  # A, then B
    assert spec["params"] == [{"name": "showValues", "bind": {"input": "checkbox"},
                               "value": True}]


def test_a_plot_faceted_by_revision_and_file_loses_the_empty_sorts():
    original = _confusion({"column": {"field": "rev", "sort": []},
                           "row": {"field": "filename", "sort": []}})
    spec = _static(original)
    assert spec["facet"] == {"column": {"field": "rev"}, "row": {"field": "filename"}}
    assert original["facet"]["row"] == {"field": "filename", "sort": []}  # not changed


def test_cells():
    assert [_fmt(None), _fmt(0.70666), _fmt(257), _fmt("generative")] == [
        "—", "0.7067", "257", "generative"]
    assert [_fmt(-0.01834, signed=True), _fmt(0, signed=True), _fmt(0.0, signed=True)] == [
        "-0.0183", "+0", "+0.0000"]
    assert _slug("Confusion matrix, adapter (test split)") == "confusion-matrix-adapter-test-split"
    assert _slug("origin/main") == "origin-main"


def test_classes_follow_base_labels_then_the_metrics():
    params = {"params.yaml": {"base.labels": {"old": "['neg', 'pos']",  # DVC's repr
                                              "new": "['neg', 'pos', 'neu']"}}}
    evals = {"per_class.other.f1": {}, "per_class.neg.f1": {}}
    assert _labels(params, evals) == ["neg", "pos", "neu", "other"]
