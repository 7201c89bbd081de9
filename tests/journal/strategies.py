"""Hypothesis strategies for JSON values and journal entries."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sagacity.journal import Phase

MAX_SAFE_INT = 2**53 - 1

# Every kind of character JCS treats differently: controls (escaped), ASCII, the rest of
# the Basic Multilingual Plane (UTF-16 sorts it like code points, except after the
# surrogate block), and characters beyond U+FFFF (two UTF-16 code units).
characters = st.one_of(
    st.characters(max_codepoint=0x1F),
    st.characters(min_codepoint=0x20, max_codepoint=0x7F),
    st.characters(min_codepoint=0x80, max_codepoint=0xD7FF),
    st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF),
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
)
texts = st.text(characters, max_size=12)
bmp_texts = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), max_size=12)
lone_surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts_with_surrogates = st.text(st.one_of(characters, lone_surrogates), min_size=1, max_size=8)

integers = st.one_of(
    st.integers(min_value=-100, max_value=100),
    st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT),
    st.sampled_from([MAX_SAFE_INT, -MAX_SAFE_INT, 2**31, -(2**31), 2**32]),
)
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 0.1, 1e21, 1e-7, 1e16, 5e-324, 1.7976931348623157e308]),
)
scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)


def json_values(
    leaves: st.SearchStrategy[Any] = scalars, keys: st.SearchStrategy[str] = texts
) -> st.SearchStrategy[Any]:
    """Nested JSON values built from `leaves`, with object names drawn from `keys`."""
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(keys, children, max_size=4),
        ),
        max_leaves=16,
    )


# Values without floats: the fast path takes them unless a name lies beyond U+FFFF.
float_free_values = json_values(st.one_of(st.none(), st.booleans(), integers, texts))
fast_path_values = json_values(st.one_of(st.none(), st.booleans(), integers, texts), bmp_texts)

phases = st.sampled_from(list(Phase))
names = st.one_of(st.none(), texts)
