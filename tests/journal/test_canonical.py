"""Canonical JSON: the orjson fast path is byte-identical to `rfc8785`, the reference."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from sagacity import SerializationError
from sagacity.journal import GENESIS_HASH, Phase, canonical_bytes, sha256_hex
from sagacity.journal._canonical import _fast_path_is_exact
from sagacity.journal._entry import hashed_bytes
from tests.journal.strategies import (
    MAX_SAFE_INT,
    fast_path_values,
    float_free_values,
    integers,
    json_values,
    names,
    phases,
    texts,
    texts_with_surrogates,
)

# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical form.
NUMBER_VECTORS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]

# RFC 8785 section 3.2.2: the example object, as text, and its canonical form.
RFC_EXAMPLE = (
    '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
    ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    ' "literals": [null, true, false]}'
)
RFC_EXAMPLE_CANONICAL = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
).encode()

# RFC 8785 section 3.2.3: property names sorted by UTF-16 code units.
RFC_SORTING = {
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\U0001f600": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}
RFC_SORTED_NAMES = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]

FAST = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def reference(value: Any) -> bytes | None:
    """`rfc8785.dumps`, or None where it refuses the value."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError):
        return None


def ours(value: Any) -> bytes | None:
    """`canonical_bytes`, or None where it refuses the value."""
    try:
        return canonical_bytes(value)
    except SerializationError:
        return None


class TestRfcVectors:
    @pytest.mark.parametrize(("bits", "expected"), NUMBER_VECTORS)
    def test_number_serialisation(self, bits: str, expected: str) -> None:
        """Every number of RFC 8785 Appendix B is written as the RFC writes it."""
        value = struct.unpack(">d", bytes.fromhex(bits))[0]
        assert canonical_bytes(value) == expected.encode()
        assert canonical_bytes([value]) == f"[{expected}]".encode()

    @pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
    def test_nan_and_infinities_are_refused(self, bits: str) -> None:
        """NaN and the infinities have no canonical form: SerializationError, not a guess."""
        value = struct.unpack(">d", bytes.fromhex(bits))[0]
        with pytest.raises(SerializationError, match="not canonical JSON"):
            canonical_bytes({"amount": value})

    def test_the_rfc_example(self) -> None:
        """The example of section 3.2.2 (numbers, escapes, literals) canonicalizes exactly."""
        assert canonical_bytes(json.loads(RFC_EXAMPLE)) == RFC_EXAMPLE_CANONICAL

    def test_sorting_by_utf16_code_units(self) -> None:
        """Section 3.2.3: names sort by UTF-16, so the emoji precedes U+FB33."""
        encoded = canonical_bytes(RFC_SORTING)
        assert list(orjson.loads(encoded)) == RFC_SORTED_NAMES
        assert encoded == rfc8785.dumps(RFC_SORTING)

    def test_string_escapes(self) -> None:
        """Only quote, backslash and controls are escaped, controls in lowercase hex."""
        value = '"\\/\b\f\n\r\t\x00\x1f\x7f\u2028é😀'
        assert (
            canonical_bytes(value)
            == ('"\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f\u2028é😀"').encode()
        )

    def test_integer_limits(self) -> None:
        """Integers up to ±(2**53 - 1) are numbers; beyond, JCS has no exact form."""
        assert (
            canonical_bytes([MAX_SAFE_INT, -MAX_SAFE_INT])
            == b"[9007199254740991,-9007199254740991]"
        )
        for value in (MAX_SAFE_INT + 1, -MAX_SAFE_INT - 1, 2**64):
            with pytest.raises(SerializationError):
                canonical_bytes({"n": value})

    def test_lone_surrogates_are_refused(self) -> None:
        """A lone surrogate has no UTF-8 form, as a value or as a key."""
        for value in ("\ud800", {"\udfff": 1}, ["a\ud83d"]):
            with pytest.raises(SerializationError):
                canonical_bytes(value)

    def test_non_string_keys_are_refused(self) -> None:
        """JSON object names are strings: an int key is a caller's bug, not converted here."""
        with pytest.raises(SerializationError):
            canonical_bytes({1: "one"})


class TestFastPath:
    @given(float_free_values)
    def test_orjson_matches_rfc8785_wherever_the_fast_path_is_taken(self, value: Any) -> None:
        """Where `_fast_path_is_exact` says yes, orjson's sorted output is JCS, byte for byte."""
        if _fast_path_is_exact(value):
            try:
                fast = orjson.dumps(value, option=FAST)
            except orjson.JSONEncodeError:
                assert reference(value) is None
            else:
                assert fast == rfc8785.dumps(value)

    @given(fast_path_values)
    def test_values_without_floats_or_non_bmp_names_take_the_fast_path(self, value: Any) -> None:
        """Such values are encoded by orjson, not the reference, and identically."""
        assert _fast_path_is_exact(value)
        assert ours(value) == reference(value)

    def test_floats_and_non_bmp_names_take_the_reference_path(self) -> None:
        """Orjson writes 1.0 and 1e16 unlike JCS, and sorts by code point: not for these."""
        for value in (1.0, [1e16], {"a": {"b": -0.0}}, {"\U0001f600": 1, "\ufb33": 2}):
            assert not _fast_path_is_exact(value)
            assert canonical_bytes(value) == rfc8785.dumps(value)

    @given(json_values())
    def test_canonical_bytes_is_rfc8785(self, value: Any) -> None:
        """On random JSON (floats, non-BMP keys, controls) both encoders agree or both refuse."""
        assert ours(value) == reference(value)

    @given(json_values(texts_with_surrogates))
    def test_surrogates_are_refused_like_the_reference(self, value: Any) -> None:
        """Strings with lone surrogates are refused by both; valid ones encode identically."""
        assert ours(value) == reference(value)

    @given(st.integers())
    def test_every_integer_agrees(self, value: int) -> None:
        """Small, big and huge integers: the same bytes, or both refuse."""
        assert ours(value) == reference(value)
        assert ours({"n": [value]}) == reference({"n": [value]})

    @given(st.dictionaries(texts, integers, max_size=6))
    def test_key_order(self, value: dict[str, int]) -> None:
        """Keys of every plane come out in UTF-16 code unit order."""
        encoded = canonical_bytes(value)
        assert list(orjson.loads(encoded)) == sorted(value, key=lambda k: k.encode("utf-16-be"))

    def test_sha256_hex(self) -> None:
        """`sha256_hex` is the SHA-256 of the canonical bytes, in lowercase hex."""
        assert sha256_hex({"b": 1, "a": [1.5]}) == hashlib.sha256(b'{"a":[1.5],"b":1}').hexdigest()


class TestHashedBytes:
    @given(
        saga_id=texts,
        seq=st.integers(min_value=1, max_value=MAX_SAFE_INT),
        phase=phases,
        tool_name=names,
        call_id=names,
        ref_seq=st.one_of(st.none(), st.integers(min_value=1, max_value=MAX_SAFE_INT)),
        payload=json_values(),
    )
    def test_assembled_bytes_equal_jcs_of_the_hashed_object(
        self,
        saga_id: str,
        seq: int,
        phase: Phase,
        tool_name: str | None,
        call_id: str | None,
        ref_seq: int | None,
        payload: Any,
    ) -> None:
        """The journal's field-by-field encoding is JCS of the nine-member object."""
        payload_bytes = reference(payload)
        if payload_bytes is None:
            return
        hashed = {
            "saga_id": saga_id,
            "seq": seq,
            "phase": phase.value,
            "tool_name": tool_name,
            "call_id": call_id,
            "ref_seq": ref_seq,
            "payload": payload,
            "recorded_at": "2026-01-01T00:00:00.000000Z",
            "prev_hash": GENESIS_HASH,
        }
        assert hashed_bytes(
            saga_id,
            seq,
            phase,
            tool_name,
            call_id,
            ref_seq,
            payload_bytes,
            "2026-01-01T00:00:00.000000Z",
            GENESIS_HASH,
        ) == rfc8785.dumps(hashed)

    def test_a_lone_surrogate_in_an_id_is_a_serialization_error(self) -> None:
        """An id with no UTF-8 form raises SerializationError, not an encoder's TypeError."""
        with pytest.raises(SerializationError):
            hashed_bytes("saga", 1, Phase.INTENT, "tool", "\ud800", None, b"null", "t", "0")
