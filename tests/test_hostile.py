"""Issue 40: what a pull request's author writes reaches no one. One corpus of hostile
strings goes through every string param (and a param's key), a label name, a set name,
the texts of flipped rows, a plot title, a metric key and a branch name into
``report.md``, ``verdict.md``, ``comment.md`` (rendered with markdown-it, as GitHub
renders CommonMark with tables) and ``report.html`` (in headless Chromium: the e2e tier);
from hand-built sides, with no git, no DVC and no training.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from conftest import chromium
from lorasent.contracts import EvalMetrics
from lorasent.metrics import Predictions
from lorasent.review.collect import Comparison
from lorasent.review.markup import md_code, md_text
from lorasent.review.pr_comment import comment_text, earlier_comment, marker
from lorasent.review.render import _markdown, html_page
from lorasent.review.verdict import Side, judge
from test_render_sets import BASELINE, _calibration, _metrics

HEAD = "c" * 40
PARTS = ["abc\u202edef", "<script>alert('script')</script>", "<img src=x onerror=alert('img')>",
         "</details>", "@user", "@org/team", "#12", "GH-12",
         "0123456789abcdef0123456789abcdef01234567", "a|b", "``open", "one\ntwo",
         marker(HEAD), "[link](https://example.com) www.example.com"]
HOSTILE = " ".join(PARTS)
LONG = "y" * 10_000
# a valid git branch name (git check-ref-format: no space, no ~^:?*[\)
BRANCH = "<img/src=x/onerror=alert('branch')>@user|#12`GH-12"
LABELS = ["neg", HOSTILE]
SET = f"set {HOSTILE}"
OURS = {"1234567", "7654321"}  # the commits, as git gives them: ours to link


def _predictions(prefix: str, wrong: range) -> Predictions:
    actual = np.asarray([i % 2 for i in range(20)])
    predicted = np.asarray([1 - y if i in wrong else y for i, y in enumerate(actual)])
    return Predictions([f"{prefix}{i:02d}" for i in range(20)], actual, predicted,
                       np.eye(2)[predicted] * 0.8 + 0.1, LABELS)


def _evals(accuracy: float) -> EvalMetrics:
    per_class = {label: {"precision": accuracy, "recall": accuracy, "f1": accuracy,
                         "support": 10} for label in LABELS}
    matrix = {actual: {predicted: 5 for predicted in LABELS} for actual in LABELS}
    calibration = {**_calibration(0.02, None), "interval_note": HOSTILE}
    one = {**_metrics(accuracy, 20, calibration), "per_class": per_class,
           "confusion_matrix": matrix, "labels": LABELS, "reference": "zero_shot",
           "reference_accuracy": 0.1,
           "baseline": {**BASELINE, "majority_class": HOSTILE, "majority_accuracy": 0.9},
           "relative_error_reduction_note": HOSTILE}
    return EvalMetrics.model_validate({**one, "test_sets": {SET: {
        **one, "source": HOSTILE, "data": {}}}})


def _comparison() -> Comparison:
    a_rows, b_rows = _predictions("r", range(8)), _predictions("r", range(0))
    sides = tuple(Side(rev, _evals(acc), None, rows, None, None, None,
                       {SET: Side(rev, None, None, rows, None, None)})
                  for rev, acc, rows in ((BRANCH, 0.6, a_rows), (f"{BRANCH}2", 1.0, b_rows)))
    review = judge(sides[0], sides[1], LABELS, notes=[f"a note naming {md_text(HOSTILE)}"])
    strings = {"prompt.template": HOSTILE, "data.source": HOSTILE, "evaluate.test_sets": LONG,
               f"train.{HOSTILE}": "x", "base.labels": str(LABELS)}
    params = {"params.yaml": {key: {"old": "safe", "new": value}
                              for key, value in strings.items()}}
    metrics = {"metrics/eval.json": {f"per_class.{HOSTILE}.f1": {"old": 0.6, "new": 1.0,
                                                                 "diff": 0.4},
                                     "reference": {"old": HOSTILE, "new": LONG}}}
    return Comparison(BRANCH, f"{BRANCH}2", {BRANCH: "1234567", f"{BRANCH}2": "7654321"},
                      params, metrics, {}, (sides[0], sides[1]), review, {})


def _documents() -> dict[str, str]:
    c = _comparison()
    texts = {f"r{i:02d}": f"{HOSTILE} {i}" for i in range(20)}
    report = _markdown(c, {HOSTILE: ["plot.png"]}, texts)
    return {"report.md": report, "verdict.md": c.review.summary(),
            "comment.md": comment_text(HEAD, BRANCH, c, None, "7", "https://example.com/run",
                                       "base-vs-head")}


# The only HTML the renderers write themselves: the comment's marker, the fold, line
# breaks and code spans around a value that a backtick span cannot hold.
OWN_HTML = re.compile(r"(<!-- lorasent-pr-comment head=c{40} -->|<details>|</details>|<br>"
                      r"|<code>|</code>|<summary>Every metric .*</summary>"
                      r"|<summary>All keys of every metrics file</summary>)\n?")

MD = MarkdownIt("commonmark", {"html": True}).enable("table")


def _walk(tokens: list[Token]) -> list[Token]:
    return [t for token in tokens for t in [token, *_walk(token.children or [])]]


@pytest.mark.parametrize("name", ["report.md", "verdict.md", "comment.md"])
def test_hostile_strings_make_no_html_link_mention_or_broken_table(name):
    text = _documents()[name]
    tokens = _walk(MD.parse(text))
    # no HTML but the renderer's own
    raw = [t.content for t in tokens if t.type in ("html_inline", "html_block")]
    assert [r for r in raw if not re.fullmatch(f"(?:{OWN_HTML.pattern})+", r)] == []
    if name == "comment.md":  # the marker once, first, and the one the next run reads
        assert text.count("<!-- lorasent-pr-comment") == 1
        assert text.startswith(marker(HEAD) + "\n")
    # no link but the workflow run's, and no image but the plot the renderer named
    assert [t.attrGet("href") for t in tokens if t.type == "link_open"] == (
        ["https://example.com/run"] if name == "comment.md" else [])
    assert [t.attrGet("src") for t in tokens if t.type == "image"] == (
        ["plot.png"] if name == "report.md" else [])
    # no emphasis or code span from data: the values' characters are text
    assert not [t for t in tokens if t.type in ("em_open", "s_open")]
    assert all(re.fullmatch(r"[\w .:/,\-\\=<>$()\[\]]+", t.content)
               for t in tokens if t.type == "code_inline"), \
        [t.content for t in tokens if t.type == "code_inline"]
    # nothing GitHub makes live in a text node: a zero-width space cuts each
    words = "".join(t.content for t in tokens if t.type == "text")
    live = re.findall(r"@\w|#\d|\bGH-\d|(?<![0-9A-Za-z])[0-9a-fA-F]{7,40}(?![0-9A-Za-z])"
                      r"|https?://|www\.", words, re.IGNORECASE)
    assert [w for w in live if w not in OURS and not re.fullmatch(r"\d+", w)] == []
    assert "\u202e" not in words and "‹U+202E›" in words
    # every table keeps its columns
    columns: list[int] = []
    for t in tokens:
        if t.type == "tr_open":
            columns.append(0)
        elif t.type in ("th_open", "td_open"):
            columns[-1] += 1
        elif t.type == "thead_open" and columns:
            columns = []
        if t.type == "table_close":
            assert len(set(columns)) == 1, columns
            columns = []
    # the reader still reads the original characters (a table cell's newline: a break)
    shown = html.unescape(MD.render(text)).replace("\u200b", "")
    for part in PARTS[1:7] + ["a|b", "``open", "#12", "GH-12"]:
        assert part in shown, part
    assert LONG not in text
    assert ("… (10000 characters)" in text) == (name != "verdict.md")  # the params' tables


def test_the_comment_of_another_run_still_parses_after_hostile_values():
    body = _documents()["comment.md"]
    text = '[{"id": 3, "body": %s, "user": {"login": "github-actions[bot]", "type": "Bot"}}]'
    assert earlier_comment(text % json.dumps(body), "c").head == HEAD  # type: ignore[union-attr]


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text = ""

    def handle_data(self, data: str) -> None:
        self.text += data

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


# Recorded on the page itself, before anything of the report: an alert, a script's or a
# resource's error (an <img src=x> fails to load), a script that runs.
HOOK = ("<script>window.alert = function (m) { document.documentElement.setAttribute("
        "'data-alert', String(m)); }; window.addEventListener('error', function (e) { "
        "document.documentElement.setAttribute('data-error', String((e.target && "
        "e.target.tagName) || e.message)); }, true);</script>")


@pytest.mark.slow
def test_hostile_strings_run_nothing_in_report_html_in_headless_chromium(tmp_path):
    from PIL import Image

    Image.new("RGB", (2, 2), "white").save(tmp_path / "plot.png")  # the one image, embedded
    page = html_page(_documents()["report.md"], tmp_path, f"lorasent: {BRANCH} vs {BRANCH}2")
    elements = _Elements()
    elements.feed(page)
    assert [(tag, (dict(attrs).get("src") or "")[:22]) for tag, attrs in elements.found
            if tag in ("script", "img", "a", "iframe")] == [("img", "data:image/png;base64,")]
    assert [(tag, a) for tag, attrs in elements.found for a, _ in attrs
            if a.startswith("on")] == []
    rendered = _open(tmp_path / "report.html", page)
    html_attrs = dict(rendered.found[0][1])  # <html>: where the hook records what ran
    assert "data-alert" not in html_attrs and "data-error" not in html_attrs, html_attrs
    tags = [tag for tag, _ in rendered.found]
    assert tags.count("script") == 1 and tags.count("img") == 1 and "a" not in tags
    # the hook does record: the same values unescaped run in the same browser
    control = _open(tmp_path / "control.html", page.replace("</body>", f"{HOSTILE}</body>"))
    assert dict(control.found[0][1]).get("data-alert") in ("script", "img")
    assert [(tag, a) for tag, attrs in rendered.found for a, _ in attrs
            if a.startswith("on")] == []
    assert "onerror=alert(" in rendered.text  # shown as text


def _open(path: Path, page: str) -> _Elements:
    """``page`` with :data:`HOOK` first in its head, as headless Chromium leaves its DOM
    once its scripts and loads are done."""
    path.write_text(page.replace("<head>", "<head>\n" + HOOK, 1), encoding="utf-8")
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--virtual-time-budget=3000", "--dump-dom",
         path.as_uri()], capture_output=True, text=True, timeout=120)
    assert "<table>" in done.stdout, done.stderr
    found = _Elements()
    found.feed(done.stdout)
    assert found.found[0][0] == "html"
    return found



@pytest.mark.parametrize("value, expected", [
    ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
    ("</details>", "&lt;/details&gt;"),
    ("@user and @org/team", "@&#8203;user and @&#8203;org/team"),
    ("#12, owner/repo#3, GH-12, #t", "#&#8203;12, owner/repo#&#8203;3, GH&#8203;-12, #t"),
    ("0123456789abcdef0123456789abcdef01234567",
     "012345&#8203;6789ab&#8203;cdef01&#8203;234567&#8203;89abcd&#8203;ef0123&#8203;4567"),
    ("1234567 and 20260131", "1234567 and 20260131"),  # numbers: no letter, no SHA
    ("a|b `c` *d* _e_ lora_alpha [f](g) ~h~ !\\", "a\\|b \\`c\\` \\*d\\* \\_e\\_ lora_alpha "
                                                   "\\[f\\](g) \\~h\\~ \\!\\\\"),
    ("https://x.y www.x.y a&amp;", "https:&#8203;//x.y www&#8203;.x.y a&amp;amp;"),
    ("one\r\ntwo\tthree", "one<br>two three"),
    ("a\u202eb\x00c\ud800", "a‹U+202E›b‹U+0000›c‹U+D800›"),
    # issue 51: every default-ignorable and format character, not only bidi controls
    ("I\u200b lo\u00adve\ufeff it\u2060", "I‹U+200B› lo‹U+00AD›ve‹U+FEFF› it‹U+2060›"),
    ("\u180e\u3164\ufe0f\U000e0041\u0600", "‹U+180E›‹U+3164›‹U+FE0F›‹U+E0041›‹U+0600›"),
    ("x" * 201, "x" * 199 + "… (201 characters)"),
    ("消极", "消极"),
    ("# B is better than A", "\\# B is better than A"), ("> q", "&gt; q"),
    ("1. x", "1\\. x"), ("12) x", "12\\) x"), ("- x", "\\- x"), ("+ x", "\\+ x"),
    ("---", "\\---"), ("===", "\\==="), ("    code", "&#32;&#32;&#32;&#32;code"),
    ("\t# h", "&#32;\\# h"), ("a - b", "a - b"), ("2026", "2026"), ("5.2", "5.2"),
    ("-0.96", "-0.96"), ("#t", "#t"),
])
def test_md_text_shows_each_character_and_makes_nothing_of_it(value, expected):
    assert md_text(value) == expected


@pytest.mark.parametrize("value, expected", [
    ("train.lora.r", "`train.lora.r`"), ("[1, 2]", "`[1, 2]`"),
    ("a|b", "<code>a\\|b</code>"), ("x`y", "<code>x\\`y</code>"),
    ("a\nb", "<code>a<br>b</code>"), ("", "<code></code>"),
    ("a\u200bb", "<code>a‹U+200B›b</code>"),
])
def test_md_code_keeps_a_code_span_only_for_plain_text(value, expected):
    assert md_code(value) == expected
