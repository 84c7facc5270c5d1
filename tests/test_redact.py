"""Secrets in trace metadata never reach opscope's outputs unless asked with --show-env."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from opscope.cli.app import main
from opscope.redact import REDACTED, is_secret, redact, secret_names

pytestmark = pytest.mark.timeout(120)

# Fake secrets planted in copies of real traces: distinctive so a substring search is exact.
FAKE = {
    "HF_TOKEN": "hf_FAKEtok3n_0123456789abcdef",
    "AWS_SECRET_ACCESS_KEY": "FAKEawsSecretKey0123456789",
    "DB_PASSWORD": "FAKEpassw0rd!",
    "JUPYTER_SESSION_COOKIE": "FAKEcookie42",
}
LIST_SECRET = "FAKElistAuthValue77"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in-process (saves an interpreter start per call); same exit codes."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())


# -- the rule -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "hf_token",
        "GITHUBTOKEN",
        "x-api-key",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "MYSQL_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "Authorization",
        "SESSION_ID",
        "browser_cookie",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "CUDA_VERSION", "LD_LIBRARY_PATH", "HOSTNAME"])
def test_plain_names(name: str) -> None:
    assert not is_secret(name)


def test_redact_shapes() -> None:
    env = {
        "env": {"HF_TOKEN": "abc", "PATH": "/bin"},
        "list": ["API_KEY=xyz", "HOME=/root", "asttokens==3.0.0"],
        "records": [{"name": "MY_SECRET", "value": "s3"}, {"name": "USER", "value": "me"}],
        "nested": {"a": {"b": {"password": {"deep": 1}}}},
    }
    out = redact(env)
    assert out["env"] == {"HF_TOKEN": REDACTED, "PATH": "/bin"}
    assert out["list"] == [f"API_KEY={REDACTED}", "HOME=/root", "asttokens==3.0.0"]
    assert out["records"] == [
        {"name": "MY_SECRET", "value": REDACTED},
        {"name": "USER", "value": "me"},
    ]
    assert out["nested"]["a"]["b"]["password"] == REDACTED
    assert env["env"]["HF_TOKEN"] == "abc"  # a copy, not in place
    assert redact(env, show_env=True) is env
    assert secret_names(env) == ["API_KEY", "HF_TOKEN", "MY_SECRET", "password"]


def test_redact_deep_nesting_is_bounded() -> None:
    obj: Any = {"leaf": "x"}
    for _ in range(5000):
        obj = {"a": obj}
    out = redact(obj)  # no RecursionError
    depth = 0
    while isinstance(out, dict):
        out = out["a"] if "a" in out else out.get("leaf")
        depth += 1
    assert out == REDACTED and depth < 100


# -- planted secrets in a real trace ----------------------------------------------------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    d = json.loads(gzip.decompress(src.read_bytes()))
    d["metadata"]["system"]["env"].update(FAKE)
    d["metadata"]["system"]["env_list"] = [f"MY_AUTH_HEADER={LIST_SECRET}", "LANG=C"]
    out = tmp_path_factory.mktemp("planted") / "bert.json.gz"
    out.write_bytes(gzip.compress(json.dumps(d).encode(), compresslevel=1))
    return out


def _assert_clean(text: str) -> None:
    for v in [*FAKE.values(), LIST_SECRET]:
        assert v not in text


def test_profile_meta_and_cache_are_clean(planted: Path) -> None:
    from opscope.ingest import load

    prof = load(planted)
    text = json.dumps(prof.meta, default=str)
    _assert_clean(text)
    assert '"HF_TOKEN": "<redacted>"' in text  # the name survives, its value does not
    # The cache entry on disk holds the same meta.
    entry = Path(prof.meta.get("cache_path") or planted.parent / f".{planted.name}.opscope")
    if not entry.is_dir():
        prof2 = load(planted)
        entry = Path(str(prof2.meta["cache_path"]))
    for f in entry.iterdir():
        _assert_clean(f.read_bytes().decode("latin-1"))


def test_load_json_is_clean_and_show_env_reveals(planted: Path) -> None:
    r = _cli("load", str(planted), "--json", "--no-cache")
    assert r.returncode == 0, r.stderr
    _assert_clean(r.stdout + r.stderr)
    r = _cli("load", str(planted), "--json", "--no-cache", "--show-env")
    assert r.returncode == 0, r.stderr
    assert FAKE["HF_TOKEN"] in r.stdout and LIST_SECRET in r.stdout
    env = json.loads(r.stdout)["env"][str(planted)]
    assert env["metadata.system.env"]["DB_PASSWORD"] == FAKE["DB_PASSWORD"]
    r = _cli("load", str(planted), "--show-env")  # the table form
    assert r.returncode == 0, r.stderr
    assert FAKE["JUPYTER_SESSION_COOKIE"] in r.stdout


def test_doctor_is_clean_and_show_env_reveals(planted: Path) -> None:
    for args in (["--json"], [], ["--markdown"]):
        r = _cli("doctor", str(planted), *args)
        assert r.returncode == 0, r.stderr
        _assert_clean(r.stdout + r.stderr)
    r = _cli("doctor", str(planted), "--json")
    checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
    assert set(FAKE) <= set(checks["data.secrets"]["evidence"]["names"])
    r = _cli("doctor", str(planted), "--json", "--show-env")
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["env"][str(planted)]
    assert env["metadata.system.env"]["HF_TOKEN"] == FAKE["HF_TOKEN"]


def test_report_outputs_are_clean(planted: Path, tmp_path: Path) -> None:
    for args in (["--json"], ["--md"], ["--html", str(tmp_path / "r.html")]):
        r = _cli("report", str(planted), *args)
        assert r.returncode == 0, r.stderr
        _assert_clean(r.stdout + r.stderr)
    assert (tmp_path / "r.html").stat().st_size > 0
    _assert_clean((tmp_path / "r.html").read_text(errors="replace"))


def test_html_is_clean(planted: Path, tmp_path: Path) -> None:
    out = tmp_path / "h.html"
    r = _cli("html", str(planted), "-o", str(out))
    assert r.returncode == 0, r.stderr
    _assert_clean(r.stdout + r.stderr + out.read_text(errors="replace"))


def test_export_is_clean(planted: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.json.gz"
    r = _cli("export", str(planted), "--perfetto", str(out))
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode(errors="replace")
    assert '"traceEvents"' in text
    _assert_clean(r.stdout + r.stderr + text)


def test_viewer_api_is_clean(planted: Path) -> None:
    from opscope.ingest import load
    from opscope.report.viewer.query import TimelineIndex

    idx = TimelineIndex(load(planted))
    parts = [json.dumps(idx.tracks_json(), default=str)]
    for i in range(0, idx.profile.events.height, 97):
        parts.append(json.dumps(idx.event(i), default=str))
    _assert_clean("".join(parts))


def test_ascend_metadata_is_clean(tmp_path: Path) -> None:
    src = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    md = dst / "profiler_metadata.json"
    meta = json.loads(md.read_text()) if md.is_file() else {}
    meta["ENV_VARIABLES"] = {"ASCEND_TOKEN": FAKE["HF_TOKEN"], "PATH": "/usr/bin"}
    meta["hub_auth"] = FAKE["DB_PASSWORD"]
    md.write_text(json.dumps(meta))
    from opscope.ingest import load

    prof = load(dst, cache=False)
    _assert_clean(json.dumps(prof.meta, default=str))
    r = _cli("doctor", str(dst), "--json", "--show-env")
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["env"][str(dst)]
    assert env["profiler_metadata.json.ENV_VARIABLES"]["ASCEND_TOKEN"] == FAKE["HF_TOKEN"]
