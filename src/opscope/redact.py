"""The one place that decides what is a secret, used by every reader and every output.

Real traces carry the recording machine's environment (``metadata.system.env`` in Kineto traces
written by benchmark harnesses, ``ENV_VARIABLES`` in Ascend ``profiler_metadata.json``), and
those hold tokens and keys (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``...). A variable whose *name*
contains one of :data:`SECRET_WORDS` (case-insensitive, anywhere in the name, so ``HFTOKEN`` and
``x-api-key`` match too) has its value replaced by :data:`REDACTED`. Over-redacting a harmless
``KEYBOARD`` variable is the accepted price of never printing a real key.

Three shapes of environment are recognised: a mapping ``{"NAME": "value"}``, a list of
``"NAME=value"`` strings, and a list of ``{"name": "NAME", "value": "..."}`` records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

#: Name parts that mark a value as secret.
SECRET_WORDS: Final = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
)
#: What a secret value is replaced by.
REDACTED: Final = "<redacted>"

_SECRET_RE: Final = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# "NAME=value" with an environment-variable name; "pkg==1.0" (pip lists) is not an assignment.
_ASSIGN_RE: Final = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=(?!=)(.*)$", re.DOTALL)
# Record keys that carry a variable's name / value in list-of-records environments.
_NAME_KEYS: Final = ("name", "key", "NAME", "Name")
_VALUE_KEYS: Final = ("value", "VALUE", "Value")
# Redaction walks metadata, which a hostile trace could nest arbitrarily deep.
_MAX_DEPTH: Final = 64


def is_secret(name: object) -> bool:
    """True when a variable called ``name`` holds a secret (see :data:`SECRET_WORDS`)."""
    return isinstance(name, str) and _has_secret_word(name)


def _has_secret_word(text: str) -> bool:
    """Whether ``text`` holds one of :data:`SECRET_WORDS` in any case."""
    if text.isascii():
        # ASCII text matches case-insensitively where its upper case matches: a search of
        # each word (in C), where the regex tries its nine words at each character
        upper = text.upper()
        return any(w in upper for w in SECRET_WORDS)
    return _SECRET_RE.search(text) is not None  # (Unicode's case folding: "ſ" is an "s")


def redact(obj: Any, *, show_env: bool = False) -> Any:
    """A copy of ``obj`` with the values of secret-looking names replaced by ``"<redacted>"``.

    Walks dicts and lists (JSON-like data). ``show_env=True`` returns ``obj`` unchanged (the
    user asked for it with ``--show-env``). Deeper than 64 levels the remainder is replaced by
    ``"<redacted>"`` too: nothing unexamined is passed on.
    """
    if show_env:
        return obj
    return _walk(obj, 0)


def _walk(obj: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return REDACTED if isinstance(obj, Mapping | list | tuple) else obj
    if isinstance(obj, Mapping):
        name = next((obj[k] for k in _NAME_KEYS if k in obj), None)
        hide_value = is_secret(name)
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if is_secret(k) or (hide_value and k in _VALUE_KEYS):
                out[k] = REDACTED
            else:
                out[k] = _walk(v, depth + 1)
        return out
    if isinstance(obj, list | tuple):
        return [_walk(v, depth + 1) for v in obj]
    if isinstance(obj, str):
        m = _ASSIGN_RE.match(obj)
        if m is not None and is_secret(m.group(1)):
            return f"{m.group(1)}={REDACTED}"
    return obj


def secret_names(obj: Any) -> list[str]:
    """The names in ``obj`` whose values :func:`redact` hides (sorted, unique)."""
    if not may_hold_secret(obj):
        return []  # (the walk below tests each key: ~1.6 µs a key, 0.15 ms on Ascend metadata)
    found: set[str] = set()

    def visit(o: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        shape = _shape(o)
        if shape == "map":
            name = next((o[k] for k in _NAME_KEYS if k in o), None)
            if is_secret(name) and any(k in o for k in _VALUE_KEYS):
                found.add(str(name))
            for k, v in o.items():
                if is_secret(k):
                    found.add(str(k))
                else:
                    visit(v, depth + 1)
        elif shape == "seq":
            for v in o:
                visit(v, depth + 1)
        elif shape == "str" and "=" in o:  # (no "=": no assignment, without the regex)
            m = _ASSIGN_RE.match(o)
            if m is not None and is_secret(m.group(1)):
                found.add(m.group(1))

    visit(obj, 0)
    return sorted(found)


_SCALARS: Final = frozenset((int, float, bool, type(None)))


def _shape(o: Any) -> str:
    """``"map"`` (a Mapping), ``"seq"`` (a list or tuple), ``"str"`` or ``""`` (other): the
    JSON types by their exact type first (an ABC's isinstance was most of a walk's time)."""
    t = type(o)
    if t is str:
        return "str"
    if t is dict:
        return "map"
    if t is list or t is tuple:
        return "seq"
    if t in _SCALARS:
        return ""
    if isinstance(o, Mapping):
        return "map"
    if isinstance(o, list | tuple):
        return "seq"
    return "str" if isinstance(o, str) else ""


def may_hold_secret(obj: Any) -> bool:
    """False when no text of ``obj`` (JSON-like data) holds a secret word in any case, so that
    no name of it is secret: every name :func:`secret_names` tests (a key, a record's name, a
    ``NAME=value`` string's name) is text of its JSON dump, whose escapes replace no letter
    (``ensure_ascii=False``). One search of the dump, not a test a key; True where it cannot
    say (data JSON does not hold: a set, a tuple key)."""
    try:
        text = json.dumps(obj, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return True
    return _has_secret_word(text)


# A source line assigning a string literal to a secret-looking name (``HF_TOKEN = "hf_..."``,
# ``api_key: str = '...'``, ``os.environ["AWS_SECRET_ACCESS_KEY"] = "..."``, ``token="..."`` as
# a keyword argument).
_SRC_ASSIGN_RE: Final = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<q>['"]\])?\s*(?::\s*[A-Za-z_][\w\[\], .|]*)?\s*=\s*"""
    r"""(?P<lit>[rbfuRBFU]{0,2}(?P<quote>'''|\"\"\"|'|")(?P<value>.*?)(?P=quote))"""
)


def redact_source_line(text: str) -> str:
    """``text`` (one line of source code) with string literals assigned to secret-looking names
    (:func:`is_secret`) replaced by ``"<redacted>"``: captured source must not carry keys."""

    def hide(m: re.Match[str]) -> str:
        if not is_secret(m.group("name")) or not m.group("value"):
            return m.group(0)
        q = m.group("quote")
        start = m.start("lit") - m.start(0)
        return m.group(0)[:start] + f"{q}{REDACTED}{q}"

    return _SRC_ASSIGN_RE.sub(hide, text)
