"""``import opscope`` sets Polars' allocator decay (``_RJEM_MALLOC_CONF``) only when the user has
not and only while Polars is not loaded (it is read once, at the library's start; Polars' own
import puts its 0.5 s default there when the variable is unset)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import opscope

_SHOW = "import os; print(os.environ.get('_RJEM_MALLOC_CONF', '<unset>'))"


def _run(code: str, env_value: str | None) -> str:
    env = dict(os.environ)
    env.pop(opscope.JEMALLOC_ENV, None)
    if env_value is not None:
        env[opscope.JEMALLOC_ENV] = env_value
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("code", "user", "want"),
    [
        ("import opscope; " + _SHOW, None, opscope.JEMALLOC_CONF),
        ("import opscope; " + _SHOW, "narenas:1", "narenas:1"),  # the user's setting is kept
    ],
)
def test_set_only_when_it_can_act_and_the_user_has_not(
    code: str, user: str | None, want: str
) -> None:
    assert _run(code, user) == want


def test_not_set_once_polars_is_loaded() -> None:
    # (Polars' own import sets its 0.5 s default when unset: too late to change, left as is)
    got = _run(
        "import polars; a = __import__('os').environ.get('_RJEM_MALLOC_CONF'); "
        "import opscope; " + _SHOW,
        None,
    )
    assert got != opscope.JEMALLOC_CONF
    assert got == _run("import polars; " + _SHOW, None)


def test_polars_started_with_it() -> None:
    """Polars' jemalloc reads the setting: a malformed value set the same way makes it complain
    on stderr at start, which it does not when opscope's value is used."""
    env = dict(os.environ)
    env.pop(opscope.JEMALLOC_ENV, None)
    ok = subprocess.run(
        [sys.executable, "-c", "import opscope, polars; polars.DataFrame({'a': [1]}).sum()"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "jemalloc" not in ok.stderr.lower()
    env[opscope.JEMALLOC_ENV] = "dirty_decay_ms:notanumber"
    bad = subprocess.run(
        [sys.executable, "-c", "import opscope, polars; polars.DataFrame({'a': [1]}).sum()"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "jemalloc" in bad.stderr.lower() or "malloc_conf" in bad.stderr.lower(), bad.stderr
