"""The secrets check's shortcuts (opscope/redact.py) answer what the full tests answer: a word
found in ASCII by upper case as the case-insensitive regex finds it, and the names of metadata
whose JSON dump holds no secret word none (the walk skipped), on real metadata and planted."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import opscope
from opscope import redact
from opscope.redact import SECRET_WORDS, secret_names

ROOTS = [Path("/work/ascend_data/st/level2/rank_1_ascend_pt")]
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACES = [
    SHARED / "gpu" / "kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    SHARED / "ascend" / "small_two_rank" / "test_rank_0",
    *ROOTS,
]


def _texts() -> list[str]:
    rng = random.Random(3)
    alphabet = "aAkKeEyYtToOnNsScCrRpPwWdDuUhHiI_-=\0\n ſ\u212aıİ"
    out = [*SECRET_WORDS, *(w.lower() for w in SECRET_WORDS), "ſession", "\u212aEY", "keyboard"]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(5000)]
    for w in SECRET_WORDS:  # each word with one letter swapped for a look-alike or dropped
        for i in range(len(w)):
            out += [w[:i] + w[i + 1 :], w[:i] + "ſ" + w[i + 1 :], w[:i] + "\u212a" + w[i + 1 :]]
            out.append(w[:i] + w[i].swapcase() + w[i + 1 :])
    return out


def test_has_secret_word_is_the_regex() -> None:
    texts = _texts()
    got = [redact._has_secret_word(t) for t in texts]
    assert got == [redact._SECRET_RE.search(t) is not None for t in texts]
    assert any(got) and not all(got)


def _planted() -> list[Any]:
    env = {"HOME": "/root", "PATH": "/usr/bin"}
    return [
        {},
        {"a": 1, "b": [1.5, None, True], "c": {"d": "e"}},
        {"HF_TOKEN": "x", **env},
        {"env": ["PATH=/bin", "hf_token=abc", "pip==1.0"]},
        {"env": ["PATH=/bin", "pkg==KEY"]},  # a word in a value only: no name
        {"vars": [{"name": "DB_PASSWORD", "value": "p"}, {"name": "USER", "value": "me"}]},
        {"vars": [{"name": "DB_PASSWORD"}]},  # a record without a value
        {"\u212aey": 1},  # a Kelvin sign, a "k" to the regex
        {"ſession": 1},
        {"x\nTOKEN": 1, "y\\": "z"},  # escaped characters beside a word
        {"\ttoken": 1},
        {1: "KEY", None: 2, False: 3, 2.5: 4},  # keys JSON writes as text
        {("a", "b"): 1, "TOKEN": 2},  # a key JSON cannot write
        {"s": {1, 2}, "COOKIE": 3},  # a value JSON cannot write
        ("AUTH=1", {"k": "v"}),
        float("nan"),
        "SECRET=1",
        _deep(70, {"TOKEN": 1}),  # below the walk's depth: not a name it finds
        _deep(20, {"PASSWD": 1}),
    ]


def _deep(n: int, leaf: Any) -> Any:
    for _ in range(n):
        leaf = {"a": leaf}
    return leaf


def _metadata() -> list[Any]:
    out = []
    for p in TRACES:
        if p.exists():
            meta = opscope.load(p, cache=False).meta.get("trace_meta") or {}
            out.append(meta)
    return out


@pytest.mark.parametrize("obj", _planted())
def test_secret_names_equal_the_walk(obj: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    got = secret_names(obj)
    monkeypatch.setattr(redact, "may_hold_secret", lambda o: True)
    assert got == secret_names(obj)


def test_real_metadata_skips_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    metas = _metadata()
    assert metas
    for meta in metas:
        assert not redact.may_hold_secret(meta)  # the shortcut is taken
        assert secret_names(meta) == []
        with monkeypatch.context() as m:
            m.setattr(redact, "may_hold_secret", lambda o: True)
            assert secret_names(meta) == []
        planted = {"0": meta, "env": {"HF_TOKEN": "x"}}
        assert redact.may_hold_secret(planted)
        assert secret_names(planted) == ["HF_TOKEN"]


def test_every_name_found_is_in_text_the_check_reads() -> None:
    for obj in _planted():
        if secret_names(obj):
            assert redact.may_hold_secret(obj)
