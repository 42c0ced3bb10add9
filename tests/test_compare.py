"""The report's pieces that need no repo: DVC's plot specs made still, cell formats."""

from typing import Any

from lorasent.compare import _fmt, _labels, _slug, _static


def _confusion(facet: dict[str, Any]) -> dict[str, Any]:
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
    evals: dict[str, Any] = {"per_class.other.f1": {}, "per_class.neg.f1": {}}
    assert _labels(params, evals) == ["neg", "pos", "neu", "other"]


def test_a_users_text_is_one_cell_shown_as_written():
    from lorasent.compare import _clip

    assert _clip("a <b>x</b>\n*y* _z_ [l](u) `c` #t") == (
        "a &lt;b&gt;x&lt;/b&gt; \\*y\\* \\_z\\_ \\[l\\](u) \\`c\\` \\#t")
    assert _clip("w " * 200) == ("w " * 100)[:199] + "…"


def test_groups_split_at_commas_and_keep_their_order(tmp_path):
    from lorasent.compare import _group

    assert _group(tmp_path, "b-seed43, a-seed42,b-seed43") == ["b-seed43", "a-seed42"]
    assert _group(tmp_path, "HEAD") == ["HEAD"]


def test_the_reports_own_matrices_replace_dvcs_confusion_plots(tmp_path):
    from conftest import REPO
    from lorasent.compare import _confusion_plots

    assert _confusion_plots(REPO) == {"Confusion matrix, adapter (test split)",
                                      "Confusion matrix, baseline (test split)"}
    assert _confusion_plots(tmp_path) == set()
