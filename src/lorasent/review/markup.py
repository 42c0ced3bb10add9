"""The one escaping rule of each output format the review commands write, for every
value a user, a data file or a pull request controls (params, labels, set names, texts,
file names, metric keys, git branch and tag names, commit subjects):

- Markdown (``report.md``, ``verdict.md``, ``comment.md``): :func:`md_text`;
- HTML (``report.html``): :func:`html.escape`, which markdown-it applies to every text
  token of the escaped Markdown (:func:`lorasent.review.render.html_page`), and the page's
  own title.

A renderer passes each such value through its format's rule where it writes it, and
nothing else: its own words and markup stay as written.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from lorasent.characters import is_invisible

CELL_LIMIT = 200  # characters of a value shown in a table cell or a sentence
SENTENCE_LIMIT = 1000  # characters of a sentence a data file holds (eval.json's warnings)

ZWSP = "&#8203;"  # ZERO WIDTH SPACE as a character reference (as Renovate's bot writes it)

# What GitHub turns into a mention, an issue or pull request link, a commit link or an
# autolink in a text node, after Markdown is rendered (so a backslash does not stop it):
# the zero-width space goes after the character that starts it.
_LIVE = re.compile(
    r"(?P<at>@)"                                   # @user, @org/team, user@sha, a@b.c
    r"|(?P<hash>#)(?=\d)"                          # #12, owner/repo#12
    r"|(?P<gh>\bGH)(?=-\d)"                        # GH-12 (any case)
    r"|(?P<sha>(?<![0-9A-Za-z])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,40}(?![0-9A-Za-z]))"
    r"|(?P<url>:(?=//))|(?P<www>\bwww)(?=\.)",     # https://…, www.…
    re.IGNORECASE)

# Markdown's own markup, shown as written: HTML (tags, comments, entities), code spans,
# emphasis, links and images, strikethrough, table cells; ``_`` only where it can start
# or end emphasis (``lora_alpha`` stays as it is).
_MARKUP = re.compile(r"[&<>]|[\\`*\[\]~|!]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# What starts a block when it opens a line (a heading, a quote, a list item, a setext
# underline or thematic break): a value may open a list item or a line, so its first
# such character is escaped; leading spaces (an indented code block) become references.
_BLOCK_START = re.compile(r"^((?:&#32;)*)(?:([#+=-])(?=[ #=-]|$)|(\d{1,9})([.)])(?= |$))")


def _dead(m: re.Match[str]) -> str:
    """One :data:`_LIVE` match with the zero-width space that stops it: after its first
    character; a hex run (GitHub links 7 to 40 hex digits) cut every 6 digits."""
    found = m.group()
    if m.lastgroup == "sha":
        return ZWSP.join(found[i:i + 6] for i in range(0, len(found), 6))
    return found + ZWSP


def visible(text: str) -> str:
    """``text`` with each character a reader cannot see or that changes how others show
    spelled out as ``‹U+202E›``: control characters (NUL among them) but newline and tab,
    the bidirectional formatting characters (an override reorders what follows: Unicode
    Standard Annex #9, the "Trojan Source" attack, CVE-2021-42574), every other
    default-ignorable or format character (:func:`lorasent.characters.is_invisible`: a
    zero-width space, a soft hyphen, a byte-order mark, a word joiner, a variation
    selector, ...: two texts that differ in them look the same), and lone surrogates,
    which no UTF-8 file can hold."""
    return "".join(f"‹U+{ord(ch):04X}›" if ch not in "\n\t" and (
        unicodedata.category(ch) in ("Cc", "Cs") or unicodedata.bidirectional(ch) in (
            "LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI")
        or is_invisible(ch)) else ch for ch in text)


def clipped(text: str, limit: int | None = CELL_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ``…`` and its length in characters after
    the cut: ``abc… (10000 characters)``; whole when it fits or ``limit`` is None."""
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit - 1]}… ({len(text)} characters)"


def md_text(value: Any, limit: int | None = CELL_LIMIT) -> str:
    """``value`` (``str(value)``) as Markdown text that shows its characters as written,
    on one line, safe in a table cell, a sentence or a ``<summary>``:

    - no HTML element, comment or entity (``&``, ``<``, ``>`` as character references),
      so no ``</details>`` closes a fold early and the comment's own marker is text;
    - no code span, emphasis, link, image or strikethrough (a backslash before each of
      ``\\ ` * [ ] ~ ! |`` and a ``_`` that could emphasise); ``|`` never splits a table
      cell (GFM's escaped pipe);
    - nothing GitHub makes live (a mention, ``#12``, ``GH-12``, a commit SHA, an
      autolink): a zero-width space after its first character, which a reader does not
      see (:data:`_LIVE`; a commit SHA is cut every 6 digits);
    - a line break as ``<br>``, the one tag the renderer adds, a tab as a space;
    - nothing that starts a block at the start of a line (``# h``, ``> q``, ``1. x``,
      ``- x``, ``+ x``, ``---``, ``===``, an indent): a backslash before its character,
      leading spaces as ``&#32;``;
    - invisible and reordering characters spelled out as ``‹U+200B›`` (:func:`visible`:
      controls, bidirectional controls, every default-ignorable and format character);
    - at most ``limit`` characters of the value (:func:`clipped`).
    """
    text = clipped(visible(str(value).replace("\r\n", "\n")), limit)
    text = _MARKUP.sub(lambda m: _ENTITIES.get(m.group(), "\\" + m.group()), text)
    text = _LIVE.sub(_dead, text)
    text = text.replace("\n", "<br>").replace("\t", " ")
    lead = len(text) - len(text.lstrip(" "))
    return _BLOCK_START.sub(lambda m: m.group(1) + (
        "\\" + m.group(2) if m.group(2) else m.group(3) + "\\" + m.group(4)),
        "&#32;" * lead + text[lead:], count=1)


def md_code(value: Any, limit: int | None = CELL_LIMIT) -> str:
    """``value`` as code: a code span (in which GitHub makes nothing live and Markdown
    renders nothing) when its text is plain, on one line and short (no backtick, ``|``,
    ``<``, ``&`` or character :func:`visible` spells out, at most ``limit`` characters);
    else ``<code>`` around :func:`md_text`."""
    text = str(value)
    if (text and visible(text) == text and clipped(text, limit) == text
            and not re.search(r"[`|<&\\\n\t]", text)):
        return f"`{text}`"
    return f"<code>{md_text(text, limit)}</code>"
