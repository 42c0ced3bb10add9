"""README.md and docs/: every relative link and anchor resolves, the README stays short
enough to read in five minutes, and every docs page is one click from it.

Links and headings come from markdown-it-py, so a code span or code block that looks like
a link is not one, and reference links count like inline ones. Anchors follow GitHub's
rule for heading ids (github-slugger)."""

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_WORDS = 1600
# Absolute URLs: not checked (no network in the tests).
EXTERNAL_SCHEMES = {"http", "https", "mailto"}


def markdown_files() -> list[Path]:
    """README.md and every Markdown file under docs/, subfolders included."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def parse(text: str) -> tuple[list[Token], dict[str, object]]:
    """The block tokens of a Markdown text (GitHub's tables on) and markdown-it's env, which
    holds the reference definitions."""
    env: dict[str, object] = {}
    tokens = MarkdownIt("commonmark").enable("table").parse(text, env)
    return tokens, env


def walk(tokens: list[Token]) -> Iterator[Token]:
    """Every token, the inline children after their parent."""
    for token in tokens:
        yield token
        if token.children:
            yield from walk(token.children)


def link_targets(text: str) -> list[str]:
    """The target of every link and image, in order: inline links, reference links and
    autolinks, then every reference definition (used or not)."""
    tokens, env = parse(text)
    targets = []
    for token in walk(tokens):
        attribute = {"link_open": "href", "image": "src"}.get(token.type)
        if attribute is not None:
            targets.append(str(token.attrGet(attribute)))
    references = env.get("references", {})
    assert isinstance(references, dict)
    targets += [str(definition["href"]) for definition in references.values()]
    return targets


def heading_texts(text: str) -> list[str]:
    """Each heading's text as GitHub renders it: markup dropped, code spans' content kept."""
    tokens, _ = parse(text)
    headings = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open":
            inline = tokens[index + 1]
            headings.append("".join(child.content for child in walk(inline.children or [])
                                    if child.type in {"text", "code_inline"}))
    return headings


def github_slug(heading: str) -> str:
    """GitHub's id for a heading: lowercase; every character that is not a letter, digit,
    space, hyphen or underscore dropped (Unicode letters kept); spaces become hyphens."""
    kept = "".join(ch for ch in heading.strip().lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def anchors(text: str) -> list[str]:
    """The ids of a Markdown file's headings, in order; a repeated slug gets -1, -2, ...
    (github-slugger's rule, which also skips a suffixed slug that is already taken)."""
    occurrences: dict[str, int] = {}
    slugs = []
    for heading in heading_texts(text):
        original = slug = github_slug(heading)
        while slug in occurrences:
            occurrences[original] += 1
            slug = f"{original}-{occurrences[original]}"
        occurrences[slug] = 0
        slugs.append(slug)
    return slugs


def resolve(source: Path, path: str) -> Path:
    """The file a relative link's path names: relative to the linking file's folder, or to
    the repository root when it starts with a slash (as GitHub reads it)."""
    if path.startswith("/"):
        return REPO / path.lstrip("/")
    return (source.parent / path).resolve()


def link_problems(source: Path) -> list[str]:
    """What is wrong with each link of one Markdown file, one line per broken link."""
    problems = []
    for target in link_targets(source.read_text(encoding="utf-8")):
        parts = urlsplit(target)
        if parts.scheme in EXTERNAL_SCHEMES:
            continue
        where = f"{source.relative_to(REPO)}: link {target!r}"
        if parts.scheme or parts.netloc:
            problems.append(f"{where}: not a relative link and not http, https or mailto")
            continue
        path, fragment = unquote(parts.path), unquote(parts.fragment)
        linked = resolve(source, path) if path else source
        if not linked.is_relative_to(REPO):
            problems.append(f"{where}: {linked} is outside the repository")
            continue
        if not linked.exists():
            problems.append(f"{where}: no file or folder {linked.relative_to(REPO)}")
            continue
        if not fragment:
            continue
        if linked.suffix != ".md" or not linked.is_file():
            problems.append(f"{where}: the anchor #{fragment} points into "
                            f"{linked.relative_to(REPO)}, which is not a Markdown file")
            continue
        ids = anchors(linked.read_text(encoding="utf-8"))
        if fragment not in ids:
            problems.append(f"{where}: no heading with the id #{fragment} in "
                            f"{linked.relative_to(REPO)} (its ids: {', '.join(ids)})")
    return problems


@pytest.mark.parametrize("source", markdown_files(),
                         ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(source):
    problems = link_problems(source)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_stays_short():
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= MAX_README_WORDS, (
        f"README.md has {words} words, more than {MAX_README_WORDS}: move reference "
        "material to a page under docs/ and link it")


def test_every_docs_page_is_one_click_from_the_readme():
    linked = {resolve(README, unquote(urlsplit(target).path))
              for target in link_targets(README.read_text(encoding="utf-8"))
              if not urlsplit(target).scheme and urlsplit(target).path}
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "docs/ holds no pages"
    missing = [str(page.relative_to(REPO)) for page in pages if page.resolve() not in linked]
    assert not missing, f"docs pages that README.md does not link: {', '.join(missing)}"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")),
                         ids=lambda path: str(path.relative_to(REPO)))
def test_every_docs_page_opens_with_a_title_and_a_way_back(page):
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# "), f"{page.relative_to(REPO)} does not open with an H1 title"
    first_paragraph = text.split("\n\n")[1]
    assert "../README.md" in link_targets(first_paragraph), (
        f"{page.relative_to(REPO)}: its first paragraph does not link back to ../README.md")


# The checker itself.

def test_code_spans_and_code_blocks_are_not_links():
    text = ("`[params.yaml](nowhere.md)` and `params.yaml`, then [a page](page.md).\n\n"
            "    [indented](code-block.md)\n\n"
            "```\n[fenced](fenced.md)\n```\n")
    assert link_targets(text) == ["page.md"]


def test_reference_links_images_and_autolinks_are_links():
    text = ("See [the page][ref], ![a plot](plot.png) and <https://example.org>.\n\n"
            "| a | b |\n|---|---|\n| [in a table](table.md) | x |\n\n"
            "[ref]: other.md#a-heading\n")
    assert link_targets(text) == ["other.md#a-heading", "plot.png", "https://example.org",
                                  "table.md", "other.md#a-heading"]


@pytest.mark.parametrize(("heading", "slug"), [
    ("Quick start", "quick-start"),
    ("Preflight: `lorasent doctor`", "preflight-lorasent-doctor"),
    ("Generative mode (`train.mode: generative`, seed 000's way, the default)",
     "generative-mode-trainmode-generative-seed-000s-way-the-default"),
    ("More GPUs, more machines", "more-gpus-more-machines"),
    ("The default run: `make run`", "the-default-run-make-run"),
    ("消极 / 中性 *and* snake_case", "消极--中性-and-snake_case"),
])
def test_github_slug(heading, slug):
    assert anchors(f"## {heading}\n") == [slug]


def test_repeated_headings_get_numbered_ids():
    text = "# Notes\n\n## Notes\n\n## Notes 1\n\n## Notes\n"
    assert anchors(text) == ["notes", "notes-1", "notes-1-1", "notes-2"]
