"""``jsonsafe.encode`` (finite's JSON sharing the plain parts) is byte for byte
``msgspec.json.encode(finite(obj))`` on every kind of value, shares a plain tree whole (a spy:
finite() is not called on it), and never changes its argument."""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from enum import Enum, StrEnum
from typing import Any

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from opscope import jsonsafe
from opscope.jsonsafe import encode, finite


class _Colour(StrEnum):
    RED = "red"


class _Mixed(str, Enum):  # noqa: UP042  (its str() is not its text, unlike a StrEnum's)
    A = "a"


class _Key(str):
    def __str__(self) -> str:
        return "other"


ODD: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    1e300,
    np.float64(2.5),
    np.float64(math.nan),
    np.int64(3),
    _Colour.RED,
    _Mixed.A,
    _Key("k"),
    (1, 2.0, math.nan),
    OrderedDict(x=math.nan, y=1),
    frozenset({1}),
    b"bytes",
    object,
]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.sampled_from(ODD),
)
keys = st.one_of(
    st.text(max_size=4),
    st.integers(-5, 5),
    st.sampled_from([_Colour.RED, _Mixed.A, _Key("k"), 1.5, True, None]),
)
trees = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=5),
    ),
    max_leaves=40,
)


def _outcome(fn: Any, tree: Any) -> object:
    """The bytes, or the error's type when the value cannot be encoded (a NumPy float is kept
    by finite() and refused by msgspec, either way)."""
    try:
        return fn(tree)
    except Exception as e:
        return type(e)


def _reference(tree: Any) -> bytes:
    return msgspec.json.encode(finite(tree))


@settings(max_examples=400, deadline=None)
@given(trees)
def test_encode_is_the_json_of_finite(tree: Any) -> None:
    before = copy.deepcopy(tree)
    assert _outcome(encode, tree) == _outcome(_reference, tree)
    # unchanged (compared by their reprs: NaN is not equal to itself)
    assert repr(tree) == repr(before)


def test_each_odd_value_at_every_depth() -> None:
    for v in ODD:
        for tree in (v, [v], {"k": v}, [1, {"a": [2.5, v]}], {v if isinstance(v, str) else "x": 1}):
            assert _outcome(encode, tree) == _outcome(_reference, tree), tree


def test_a_plain_tree_is_encoded_as_it_is(monkeypatch: Any) -> None:
    plain = {"rows": [{"x": float(i), "y": [i, str(i), None, True, math.nan]} for i in range(50)]}
    assert jsonsafe._shared(plain) is plain
    want = _reference(plain)
    called: list[Any] = []
    monkeypatch.setattr(jsonsafe, "finite", lambda o: called.append(o) or finite(o))
    assert encode(plain) == want
    assert called == []
    monkeypatch.undo()
    # NaN and infinities are plain: msgspec writes them as null, as finite() makes them
    assert msgspec.json.encode([math.nan, math.inf, -math.inf]) == b"[null,null,null]"
    nan = [math.nan]
    assert jsonsafe._shared(nan) is nan and encode(nan) == _reference(nan) == b"[null]"
    # one tuple: its row is rebuilt, the other rows shared
    odd = {"rows": [*plain["rows"], {"x": (1, 2)}]}
    made = jsonsafe._shared(odd)
    assert made["rows"][0] is plain["rows"][0] and made["rows"][-1] == {"x": [1, 2]}
    assert encode(odd) == _reference(odd)
