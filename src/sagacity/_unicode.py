r"""Text that can deceive a reader: lookalike names, invisible and bidi characters.

Two people read the same saga: the check that counts approvers, and the human looking
at a page or a terminal. Each is deceived differently, so each gets its own function:

- `principal_key(name)` is what principal names are compared by (four eyes, distinct
  approvers): `sam` spelled with a fullwidth s is `sam`, `Bob` is `bob`, and `bob`
  followed by a zero-width space is `bob`. It is Unicode's NFKC with case folding, the invisible
  (default-ignorable) characters removed first, as `NFKC_Casefold` does.
- `principal_name_problem(name)` says why a name cannot be a principal's: spaces around
  it, or a control, invisible or bidi character in it.
- `escape_for_display(text)` shows every such character as `\u202e`, so a right-to-left
  override in an id or an input cannot reorder or hide what a page or `sagacity
  pending` shows.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["escape_for_display", "principal_key", "principal_name_problem"]

# Unicode's Default_Ignorable_Code_Point set (DerivedCoreProperties.txt): characters
# that draw nothing, so two names that differ only by them look the same.
_IGNORABLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_IGNORABLE_RE = re.compile(f"[{_IGNORABLE}]")

# What a name may not hold: controls (C0, C1, DEL), the line and paragraph separators,
# lone surrogates, every invisible character above (zero-width, bidi marks, embeddings,
# overrides and isolates) and any other format character (category Cf).
_NOT_IN_NAME = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_IGNORABLE}]")

# What is escaped on display: every character that draws nothing, draws something else
# than it is, or moves the text around it (controls, format characters such as the bidi
# overrides and zero-width spaces, private-use, unassigned, surrogates, line and
# paragraph separators), and spaces other than the plain one.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"})


def principal_key(name: str) -> str:
    """The form principal names are compared in: NFKC, case-folded, invisibles removed."""
    visible = _IGNORABLE_RE.sub("", name)
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", visible).casefold())


def principal_name_problem(name: str) -> str | None:
    """Why `name` cannot name a principal, or None when it can."""
    if not name.strip():
        return "it is empty or blank"
    if name != name.strip():
        return f"it has spaces around it (give {name.strip()!r})"
    found = _NOT_IN_NAME.search(name) or next(
        (c for c in re.finditer(".", name, re.DOTALL) if unicodedata.category(c.group()) == "Cf"),
        None,
    )
    if found is not None:
        return (
            f"it holds the invisible or control character U+{ord(found.group()):04X} at "
            f"position {found.start()}; a name must read the same as it compares"
        )
    return None


def escape_for_display(text: str, *, keep_newlines: bool = True) -> str:
    r"""`text` with every invisible or reordering character shown as a JSON escape (`\u202e`).

    Used wherever an id, a name or an input is shown (the inbox's pages, `sagacity
    pending`), so a right-to-left override cannot reorder or hide what the reader sees.
    Newlines are kept unless `keep_newlines` is false (one line for a terminal's field); a
    character beyond the BMP is escaped as JSON does, as a surrogate pair.
    """
    return "".join(_shown(char, keep_newlines) for char in text)


def _shown(char: str, keep_newlines: bool) -> str:
    if char.isascii() and (char.isprintable() or (keep_newlines and char == "\n")):
        return char
    category = unicodedata.category(char)
    if category not in _HIDDEN_CATEGORIES and not (category == "Zs" and char != " "):
        return char
    code = ord(char)
    if code > 0xFFFF:  # a JSON escape names UTF-16 units: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"
