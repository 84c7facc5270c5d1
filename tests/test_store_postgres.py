"""The run store on a real PostgreSQL server started by the test (Debian's postgresql package):
round trip, two concurrent writers, the newer-schema refusal, a refused connection and a wrong
password (one line, exit 2)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opscope.errors import StoreError
from opscope.trend.store import SCHEMA_VERSION, open_store

psycopg = pytest.importorskip("psycopg")
sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from trend_store_checks import both_runs, check_round_trip, cli, concurrent_writers  # noqa: E402

pytestmark = pytest.mark.slow

PASSWORD = "s3cret-for-test"


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A throwaway cluster on a free localhost port; password auth over TCP."""
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed")
    as_user: list[str] = []
    # initdb refuses to run as root: run the server as the postgres system user then.
    root = os.geteuid() == 0
    if root:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="opscope-pg-"))
    data = base / "data"
    pwfile = base / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if root:
        shutil.chown(base, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    port = _free_port()

    def run(*cmd: str) -> None:
        r = subprocess.run(
            [*as_user, *cmd], check=False, capture_output=True, text=True, timeout=60
        )
        if r.returncode:
            raise RuntimeError(f"{cmd[0]} failed: {r.stderr.strip() or r.stdout.strip()}")

    try:
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "opscope",
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
        )
        opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-w",
            "-l",
            str(base / "log"),
            "start",
        )
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"could not start PostgreSQL: {e}")
    try:
        yield f"postgresql://opscope:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            check=False,
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def fresh(pg_url: str) -> str:
    """The server with an empty store (tables dropped)."""
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS runs, schema_version")
        c.execute("DROP SEQUENCE IF EXISTS runs_id_seq")
    return pg_url


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return both_runs(tmp_path_factory.getbasetemp())


def test_postgres_round_trip_and_flag(fresh: str, runs: dict[str, Path]) -> None:
    check_round_trip(fresh, runs)
    with psycopg.connect(fresh) as c:
        assert c.execute("SELECT max(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)


def test_postgres_concurrent_writers(fresh: str, runs: dict[str, Path], tmp_path: Path) -> None:
    concurrent_writers(fresh, runs["steady"], tmp_path)


def test_postgres_newer_schema_refused(fresh: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(fresh):
        pass
    with psycopg.connect(fresh, autocommit=True) as c:
        c.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))
    code, out, err = cli(capsys, "store", "list", "--store", fresh)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert f"newer opscope (schema {SCHEMA_VERSION + 1} > {SCHEMA_VERSION})" in err
    assert PASSWORD not in err


def test_refused_connection_one_line(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql://opscope:{PASSWORD}@127.0.0.1:{_free_port()}/postgres"  # nobody listens
    code, out, err = cli(capsys, "store", "list", "--store", url)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "cannot connect" in err and "refused" in err.lower()
    assert PASSWORD not in err


def test_wrong_password_one_line(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = pg_url.replace(PASSWORD, "wrong")
    code, out, err = cli(capsys, "store", "add", "nowhere", "--store", url)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "password authentication failed" in err
    with pytest.raises(StoreError, match="cannot connect"), open_store(url):
        pass
