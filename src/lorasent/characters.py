"""The characters no reader sees: Unicode's default-ignorable code points
(:data:`DEFAULT_IGNORABLE`), the format characters, and those with no visible glyph
(:func:`is_blank`). The split's text key drops them, a class name holding one is
refused, the review's Markdown spells them out.
"""

from __future__ import annotations

import re
import unicodedata

# ---------------------------------------------------------- characters no reader sees
#
# Two texts that differ only in characters no one sees (a zero-width space, a soft
# hyphen, a byte-order mark, a word joiner) are the same text to a reader, so the split's
# deduplication and the queue compare them as one (:func:`without_ignorable`, used by
# :func:`lorasent.stages.split.normalise_text`). A class name must be what it shows, so
# one holding such a character is refused, naming it (:func:`invisible_characters`,
# :func:`character_name`: lorasent.params), and the review's Markdown spells each of them
# out (:func:`lorasent.review.markup.visible`). The invisible characters are those of
# Unicode's Default_Ignorable_Code_Point property (:data:`DEFAULT_IGNORABLE`; Python's
# unicodedata does not give it) and the format characters, general category Cf
# (bidirectional controls, the Arabic and Syriac marks among them).

# Default_Ignorable_Code_Point, as first..last code points: the ranges of
# DerivedCoreProperties.txt of the Unicode Character Database
# (https://www.unicode.org/Public/UCD/latest/ucd/DerivedCoreProperties.txt, the same since
# Unicode 14.0 added U+180F). tests/test_tables.py checks them against the `regex`
# module's \p{Default_Ignorable_Code_Point}.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),    # SOFT HYPHEN
    (0x034F, 0x034F),    # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),    # ARABIC LETTER MARK
    (0x115F, 0x1160),    # HANGUL CHOSEONG FILLER, HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),    # KHMER VOWEL INHERENT AQ, AA
    (0x180B, 0x180F),    # MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
    (0x200B, 0x200F),    # ZERO WIDTH SPACE, ZWNJ, ZWJ, LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),    # the bidirectional embeddings and overrides
    (0x2060, 0x206F),    # WORD JOINER, invisible operators, bidirectional isolates, ...
    (0x3164, 0x3164),    # HANGUL FILLER
    (0xFE00, 0xFE0F),    # VARIATION SELECTORS 1-16
    (0xFEFF, 0xFEFF),    # ZERO WIDTH NO-BREAK SPACE (the byte-order mark)
    (0xFFA0, 0xFFA0),    # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),    # unassigned
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT CONTROLS
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM ... END PHRASE
    (0xE0000, 0xE0FFF),  # TAGS, VARIATION SELECTORS 17-256, unassigned
)
_IGNORABLE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in DEFAULT_IGNORABLE)
                        + "]")


def is_ignorable(ch: str) -> bool:
    """Whether the one character ``ch`` is a ``Default_Ignorable_Code_Point``."""
    return _IGNORABLE.fullmatch(ch) is not None


def is_invisible(ch: str) -> bool:
    """Whether the one character ``ch`` is default-ignorable (:data:`DEFAULT_IGNORABLE`)
    or a format character (general category ``Cf``)."""
    return is_ignorable(ch) or unicodedata.category(ch) == "Cf"


# Graphic characters that fonts draw as a blank and no Unicode property marks (they are
# symbols, So): used to pad or hide text ("invisible" names and messages).
BLANK_GLYPHS = ("\u2800",       # BRAILLE PATTERN BLANK
                "\U0001D159")   # MUSICAL SYMBOL NULL NOTEHEAD


def is_blank(ch: str) -> bool:
    """Whether the one character ``ch`` has no visible glyph: default-ignorable or format
    (:func:`is_invisible`), white space or a space separator (general categories Zs, Zl,
    Zp), a C0 control (NUL among them; categories Cc below U+0080) or DEL, a lone
    surrogate (Cs), or a blank graphic character (:data:`BLANK_GLYPHS`).

    The C1 controls (U+0080 to U+009F) are left out: in real texts they are the bytes of
    UTF-8 read as Latin-1 (``â\\x80\\x99`` is ``’``), so two texts that differ in them differ
    in a character a reader of the original sees."""
    category = unicodedata.category(ch)
    return (is_invisible(ch) or ch.isspace() or category in ("Zs", "Zl", "Zp", "Cs")
            or (category == "Cc" and (ch < "\x80" or ch == "\x7f")) or ch in BLANK_GLYPHS)


class _Folding(dict[int, str | None]):
    """:func:`folded`'s table for :meth:`str.translate`, each code point worked out once,
    the first time it is seen."""

    def __missing__(self, code: int) -> str | None:
        ch = chr(code)
        value = (" " if ch.isspace() or ch in BLANK_GLYPHS or unicodedata.category(ch)
                 in ("Zs", "Zl", "Zp") else None if is_blank(ch) else ch)
        self[code] = value
        return value


_FOLDING = _Folding()


def folded(text: str) -> str:
    """``text`` with each character of no visible glyph (:func:`is_blank`) folded into
    what a reader sees: a space for one that shows as a gap (white space, a space
    separator, a blank graphic character), nothing for the rest (zero-width: NUL, a
    zero-width space, a byte-order mark, U+1D173...)."""
    return text.translate(_FOLDING)


def without_ignorable(text: str) -> str:
    """``text`` without its default-ignorable characters (:data:`DEFAULT_IGNORABLE`)."""
    return _IGNORABLE.sub("", text)


def character_name(ch: str) -> str:
    """``U+200B ZERO WIDTH SPACE``: the code point and its Unicode name (``U+E0FFF``
    alone for a code point without one)."""
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def invisible_characters(text: str) -> list[tuple[int, str]]:
    """``(position from 1, character)`` of each invisible character of ``text``
    (:func:`is_invisible`), in order."""
    return [(i, ch) for i, ch in enumerate(text, start=1) if is_invisible(ch)]
