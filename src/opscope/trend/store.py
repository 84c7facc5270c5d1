"""The run store: one summary row per recorded run, in DuckDB (default) or PostgreSQL.

A summary holds the git commit, device, model structure hash, profiler settings, headline figures
(median step time and its scaled MAD from the run's unprofiled steps, samples/s, peak memory), and
the top operators and source lines. Adding a run compares it
(:func:`opscope.analysis.compare.compare`) with the previous run of the same model (structure
hash) on the same device, and flags it when the step time got slower beyond the noise.

Both back-ends share one schema and one list of migrations (:data:`MIGRATIONS`); ``schema_version``
records the latest applied. A store written by a newer opscope (a higher version) is refused.
Every write is one transaction.
"""

from __future__ import annotations

import builtins
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import polars as pl

from opscope import units
from opscope.errors import AnalysisError, InputError, StoreError

SCHEMA_VERSION: Final = 1

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        "CREATE SEQUENCE IF NOT EXISTS runs_id_seq START 1",
        """CREATE TABLE IF NOT EXISTS runs (
            id BIGINT PRIMARY KEY DEFAULT nextval('runs_id_seq'),
            added_at TEXT NOT NULL,
            tag TEXT,
            run_dir TEXT NOT NULL,
            run_start TEXT,
            status TEXT,
            git_commit TEXT,
            git_dirty BOOLEAN,
            device_kind TEXT,
            device_name TEXT,
            device TEXT NOT NULL,
            model_hash TEXT,
            model_root TEXT,
            settings TEXT,
            steps BIGINT,
            step_median_us DOUBLE PRECISION,
            step_mad_us DOUBLE PRECISION,
            samples_per_s DOUBLE PRECISION,
            mem_peak_bytes BIGINT,
            top_ops TEXT,
            top_lines TEXT,
            prev_id BIGINT,
            change_pct DOUBLE PRECISION,
            verdict TEXT,
            slower BOOLEAN,
            changes TEXT
        )""",
    ),
}
"""Version -> statements that bring the store from version - 1 to it (never edit a released one;
add the next version)."""

TOP_ROWS: Final = 5
"""Operators and lines kept per run summary."""

LOCK_TIMEOUT_S: Final = 30.0
"""How long a DuckDB writer waits for another process's lock (DuckDB allows one writer process)."""


def default_store() -> str:
    """``$XDG_DATA_HOME/opscope/runs.duckdb`` (``~/.local/share/opscope/runs.duckdb``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "opscope" / "runs.duckdb")


def _is_pg(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _safe(url: str) -> str:
    """The store's name for messages: a PostgreSQL URL without its password."""
    if not _is_pg(url):
        return url
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(url)
    if u.password is None:
        return url
    host = u.hostname or ""
    netloc = f"{u.username}:***@{host}" + (f":{u.port}" if u.port else "")
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


class _Conn:
    """A DB-API connection of either back-end with ``?`` placeholders on both."""

    def __init__(self, raw: Any, pg: bool) -> None:
        self.raw, self.pg = raw, pg

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.pg:
            sql = sql.replace("?", "%s")
            cur = self.raw.cursor()
            cur.execute(sql, params)
            rows = cur.fetchall() if cur.description else []
            cur.close()
            return list(rows)
        res = self.raw.execute(sql, params)
        return list(res.fetchall()) if res.description else []

    def columns(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[list[str], list[Any]]:
        if self.pg:
            cur = self.raw.cursor()
            cur.execute(sql.replace("?", "%s"), params)
            names = [d.name for d in cur.description]
            rows = cur.fetchall()
            cur.close()
            return names, list(rows)
        res = self.raw.execute(sql, params)
        return [d[0] for d in res.description], list(res.fetchall())


@dataclass
class Store:
    """An open run store. Use :func:`open_store` (a context manager).

    A DuckDB file admits one writing process at a time, so the file is opened per operation (and
    a second process waits up to :data:`LOCK_TIMEOUT_S` for it); a PostgreSQL connection stays
    open for the store's life.
    """

    url: str
    pg_conn: _Conn | None = None

    @contextmanager
    def session(self) -> Iterator[_Conn]:
        """A connection for one operation."""
        if self.pg_conn is not None:
            yield self.pg_conn
            return
        raw = _connect_duckdb(self.url)
        try:
            yield _Conn(raw, False)
        finally:
            raw.close()

    @contextmanager
    def transaction(self) -> Iterator[_Conn]:
        """One transaction: committed on success, rolled back on any error."""
        with self.session() as c:
            if c.pg:
                with c.raw.transaction():
                    # Serialise writers: the "previous run" must be the one committed before.
                    c.execute("LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE")
                    yield c
                return
            c.raw.execute("BEGIN TRANSACTION")
            try:
                yield c
            except BaseException:
                c.raw.execute("ROLLBACK")
                raise
            c.raw.execute("COMMIT")

    def add(self, run_dir: str | os.PathLike[str], tag: str | None = None) -> dict[str, Any]:
        """Summarise ``run_dir`` and add it; returns the stored row (with ``id`` and the flag)."""
        s = summarise(run_dir)
        s["tag"] = tag
        s["added_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        with self.transaction() as c:
            prev = c.execute(
                "SELECT id, run_dir FROM runs WHERE device = ? "
                "AND model_hash IS NOT DISTINCT FROM CAST(? AS TEXT) ORDER BY id DESC LIMIT 1",
                (s["device"], s["model_hash"]),
            )
            if prev:
                s["prev_id"] = prev[0][0]
                s.update(_flag(str(prev[0][1]), s))
            cols = [k for k in _COLUMNS if k in s]
            marks = ", ".join("?" for _ in cols)
            rows = c.execute(
                f"INSERT INTO runs ({', '.join(cols)}) VALUES ({marks}) RETURNING id",
                tuple(s[k] for k in cols),
            )
            s["id"] = rows[0][0]
        s.pop("_wall_ns", None)
        return _decode(s)

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every stored run, oldest first."""
        with self.session() as c:
            names, rows = c.columns("SELECT * FROM runs ORDER BY id")
        return [_decode(dict(zip(names, r, strict=True))) for r in rows]

    def trend(
        self, model: str | None = None, metric: str = "step_time"
    ) -> builtins.list[dict[str, Any]]:
        """``metric`` over the stored runs (of one model: a structure hash or its prefix, a
        root type, or a tag), oldest first: ``id, added_at, tag, git_commit, device, model_hash,
        value, slower``."""
        col = _METRIC_COLUMNS.get(metric)
        if col is None:
            raise StoreError(
                f"unknown metric {metric!r} (one of {', '.join(sorted(_METRIC_COLUMNS))})"
            )
        out = []
        for r in self.list():
            if model and not (
                str(r.get("model_hash") or "").startswith(model)
                or r.get("model_root") == model
                or r.get("tag") == model
            ):
                continue
            out.append(
                {
                    "id": r["id"],
                    "added_at": r["added_at"],
                    "tag": r["tag"],
                    "git_commit": r["git_commit"],
                    "device": r["device"],
                    "model_hash": r["model_hash"],
                    "metric": metric,
                    "value": r[col],
                    "slower": r["slower"],
                }
            )
        return out


_COLUMNS: Final = (
    "added_at",
    "tag",
    "run_dir",
    "run_start",
    "status",
    "git_commit",
    "git_dirty",
    "device_kind",
    "device_name",
    "device",
    "model_hash",
    "model_root",
    "settings",
    "steps",
    "step_median_us",
    "step_mad_us",
    "samples_per_s",
    "mem_peak_bytes",
    "top_ops",
    "top_lines",
    "prev_id",
    "change_pct",
    "verdict",
    "slower",
    "changes",
)
_JSON_COLUMNS: Final = ("settings", "top_ops", "top_lines", "changes")
_METRIC_COLUMNS: Final = {
    "step_time": "step_median_us",
    "samples_per_s": "samples_per_s",
    "mem_peak": "mem_peak_bytes",
}


def _decode(r: dict[str, Any]) -> dict[str, Any]:
    for k in _JSON_COLUMNS:
        if isinstance(r.get(k), str):
            r[k] = json.loads(r[k])
    return r


def step_verdict(before_ns: list[float], after_ns: list[float]) -> dict[str, Any]:
    """The compare engine's step-time rule (:mod:`opscope.analysis.compare`: median shift beyond
    ``NOISE_K`` pooled scaled MADs or Mann-Whitney p < ``ALPHA``, and at least
    ``MIN_REL_CHANGE``) applied to two runs' unprofiled per-step wall times."""
    from opscope.analysis.compare import step_time_change

    r = step_time_change(before_ns, after_ns)
    pct = (r["after_us"] / r["before_us"] - 1.0) * 100.0 if r["before_us"] else None
    return {"change_pct": pct, "verdict": r["verdict"], "slower": r["verdict"] == "loss"}


def _flag(prev_dir: str, this: dict[str, Any]) -> dict[str, Any]:
    """This run against the previous run of its model: the step-time verdict from both runs'
    unprofiled steps (the profiler's own overhead makes profiled steps too noisy to judge), and
    :func:`~opscope.analysis.compare.compare` of their traces for the operators that moved."""
    from opscope.analysis.compare import compare

    prev = Path(prev_dir)
    if not (prev / "metrics.jsonl").is_file():
        return {"verdict": "previous run directory gone", "slower": None}
    try:
        out = step_verdict(_clean_wall_ns(prev), this["_wall_ns"])
    except InputError as e:
        return {"verdict": f"not compared: {e}", "slower": None}
    try:
        comp = compare(load_run(prev), load_run(this["run_dir"]), names=("previous", "this"))
    except (AnalysisError, InputError) as e:
        out["changes"] = json.dumps({"error": str(e)})
        return out
    rows = [
        {k: r[k] for k in ("key", "before_us", "after_us", "speedup", "verdict")}
        for r in comp.to_json()["rows"]
        if r["kind"] == "op"
    ][:TOP_ROWS]
    out["changes"] = json.dumps(rows)
    return out


INPROCESS_MAX_BYTES: Final = 32 << 20
"""Runs whose traces total less than this are read in this process: a reader process pool costs
seconds to start, more than parsing (or reading the cache of) small traces."""


def load_run(path: str | os.PathLike[str]) -> Any:
    """:func:`opscope.load` of a run directory, without a process pool for small runs."""
    from opscope.ingest.rundir import list_traces, read_run_dir

    p = Path(path)
    if not p.is_dir():
        raise InputError("not a directory", p)
    size = sum(t.stat().st_size for _, t, _ in list_traces(p) if t.is_file())
    return read_run_dir(p, workers=1 if size < INPROCESS_MAX_BYTES else None)


def _clean_wall_ns(path: Path) -> list[float]:
    from opscope.trend.series import clean_steps, read_settings, step_metrics

    run = read_settings(path)
    metrics = step_metrics(path)
    prof = run.get("profiler") or {}
    clean = clean_steps(metrics, int(prof.get("warmup") or 0))
    use = clean if clean.height else metrics
    return [float(x) for x in use.get_column("wall_ns").drop_nulls().to_list()]


def summarise(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The store's summary of a run directory (InputError when it has no metrics)."""
    from opscope.analysis.attribution import charged_lines
    from opscope.analysis.compare import MAD_SCALE
    from opscope.analysis.hotspots import op_times
    from opscope.trend.series import read_settings, step_metrics

    path = Path(run_dir).resolve()
    run = read_settings(path)
    metrics = step_metrics(path)
    prof = run.get("profiler") or {}
    walls = _clean_wall_ns(path)
    wall = pl.Series("wall_ns", walls, dtype=pl.Float64)
    med = float(wall.median() or 0.0) if wall.len() else 0.0  # type: ignore[arg-type]
    mad = float((wall - med).abs().median() or 0.0) * MAD_SCALE  # type: ignore[arg-type]
    sps = metrics.get_column("samples_per_s").drop_nulls()
    mem = metrics.get_column("mem_allocated_peak").drop_nulls()
    model: dict[str, Any] = {}
    mf = path / "model.json"
    if mf.is_file():
        try:
            model = json.loads(mf.read_text(encoding="utf-8"))
        except ValueError as e:
            raise InputError(f"not valid JSON ({e})", mf) from None
        if not isinstance(model, dict):
            raise InputError("model.json is not a JSON object", mf)
    p = load_run(path)
    top_ops: list[dict[str, Any]] = []
    top_lines: list[dict[str, Any]] = []
    if p.events.height:
        col = "device_ns" if p.has_device else "dur_ns"
        # summed in ns, then µs one division each (units), not a query's product by 1/1000
        ops = (
            op_times(p)
            .group_by("name")
            .agg(pl.col(col).sum().alias("total_us"), pl.len().alias("calls"))
            .sort(["total_us", "name"], descending=[True, False])
            .head(TOP_ROWS)
        )
        top_ops = ops.with_columns(units.us(ops.get_column("total_us"))).to_dicts()
        lines = charged_lines(p).head(TOP_ROWS)
        top_lines = lines.select(
            "file", "line", "function", units.us(lines.get_column("total_ns"), name="total_us")
        ).to_dicts()
    dev: dict[str, Any] = run["device"] if isinstance(run.get("device"), dict) else {}
    git: dict[str, Any] = run["git"] if isinstance(run.get("git"), dict) else {}
    return {
        "run_dir": str(path),
        "run_start": run.get("start_time"),
        "status": run.get("status"),
        "git_commit": git.get("commit"),
        "git_dirty": git.get("dirty"),
        "device_kind": dev.get("kind"),
        "device_name": dev.get("name"),
        "device": f"{dev.get('kind') or '?'}:{dev.get('name') or '?'}x{dev.get('count') or 1}",
        "model_hash": model.get("structure_hash"),
        "model_root": model.get("root_type"),
        "settings": json.dumps(prof, sort_keys=True),
        "steps": metrics.height,
        "step_median_us": units.us_value(med),
        "step_mad_us": units.us_value(mad),
        "samples_per_s": float(sps.median()) if sps.len() else None,  # type: ignore[arg-type]
        "mem_peak_bytes": int(mem.max()) if mem.len() else None,  # type: ignore[arg-type]
        "top_ops": json.dumps(top_ops),
        "top_lines": json.dumps(top_lines),
        "_wall_ns": walls,  # not stored: the per-step times the flag compares
    }


def _connect_duckdb(url: str) -> Any:
    import duckdb

    Path(url).parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        try:
            return duckdb.connect(url)
        except duckdb.IOException as e:
            # Another process holds the file (DuckDB: one writing process at a time): wait.
            if "lock" not in str(e).lower() or time.monotonic() > deadline:
                raise StoreError(f"cannot open the store ({_one_line(e)})", url) from None
            time.sleep(0.05)
        except duckdb.Error as e:
            raise StoreError(f"cannot open the store ({_one_line(e)})", url) from None


def _one_line(e: BaseException) -> str:
    s = " ".join(str(e).split())
    return s[:300]


def _migrate(c: _Conn, url: str) -> None:
    c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    rows = c.execute("SELECT max(version) FROM schema_version")
    have = int(rows[0][0]) if rows and rows[0][0] is not None else 0
    if have > SCHEMA_VERSION:
        raise StoreError(
            f"store created by a newer opscope (schema {have} > {SCHEMA_VERSION}); upgrade opscope",
            _safe(url),
        )
    for v in range(have + 1, SCHEMA_VERSION + 1):
        for stmt in MIGRATIONS[v]:
            c.execute(stmt)
        c.execute("INSERT INTO schema_version (version) VALUES (?)", (v,))


@contextmanager
def open_store(url: str | None = None) -> Iterator[Store]:
    """Open (creating and migrating as needed) the store at ``url``: a DuckDB file path or a
    ``postgresql://`` URL; the default is :func:`default_store`. Raises :class:`StoreError`."""
    url = url or default_store()
    pg = _is_pg(url)
    if pg:
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                "PostgreSQL stores need psycopg: pip install 'opscope[postgres]'"
            ) from None
        try:
            raw: Any = psycopg.connect(url, connect_timeout=10, autocommit=True)
        except psycopg.Error as e:
            raise StoreError(f"cannot connect ({_one_line(e)})", _safe(url)) from None
    else:
        try:
            import duckdb  # noqa: F401
        except ImportError:
            raise StoreError("the run store needs duckdb: pip install 'opscope[store]'") from None
        raw = None
    try:
        with _db_errors(url):
            if pg:
                store = Store(url, _Conn(raw, True))
                with raw.transaction():
                    # one migrator at a time across processes
                    store.pg_conn.execute("SELECT pg_advisory_xact_lock(7301)")  # type: ignore[union-attr]
                    _migrate(store.pg_conn, url)  # type: ignore[arg-type]
            else:
                store = Store(url)
                with store.transaction() as c:
                    _migrate(c, url)
            yield store
    finally:
        if raw is not None:
            raw.close()


@contextmanager
def _db_errors(url: str) -> Iterator[None]:
    """Database errors (a dropped connection, a failed statement) as one-line StoreErrors."""
    try:
        yield
    except StoreError:
        raise
    except Exception as e:
        if _is_db_error(e):
            raise StoreError(f"store error ({_one_line(e)})", _safe(url)) from None
        raise


def _is_db_error(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    return mod.startswith(("duckdb", "_duckdb", "psycopg"))
