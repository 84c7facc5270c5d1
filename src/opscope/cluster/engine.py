"""Engines for the cluster analysis: each rank is summarised on its own, the parent aggregates.

:func:`rank_summary` loads ONE rank (through the columnar cache: a second run is near-instant),
computes its summary tables (:func:`opscope.analysis.cluster.rank_tables`: a row per step and per
collective call) and returns them as Parquet bytes, a few KB; the events never leave the worker.
Engines:

- ``"local"``: a process pool started with ``spawn`` (forking after Polars has started its
  threads can deadlock); results are taken as they complete.
- ``"ray"`` (optional extra ``opscope[ray]``): the same function as Ray tasks, on the cluster at
  ``address`` (or ``$RAY_ADDRESS``) or on a local ``ray.init(num_cpus=workers)``. Results come
  back through Ray's object store, taken in batches with ``ray.wait`` as they are ready (the
  parent may be on another machine than the tasks). The trace paths must be readable by every
  node.

Python modules are imported once per worker process (Ray and the pool reuse their workers), not
per rank. The parent gathers the summaries as they arrive and writes them every
:data:`GATHER_BATCH` ranks as one Parquet file per table, so it holds at most a batch of
summaries; it then scans those files lazily (``pl.scan_parquet``) and aggregates them
(:func:`opscope.analysis.cluster.aggregate`): its memory is the summaries', never all events.

A rank that cannot be read (a corrupt file, a missing folder, a worker that died) is reported
and skipped, never fatal: the result lists it in ``failed`` with the reason, and the analysis
runs on the ranks that were read. Only when no rank could be read is it an error.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Final

import polars as pl

from opscope.errors import InputError, OpscopeError

ENGINES: Final = ("local", "ray")
_TABLES: Final = ("steps", "collectives", "links", "hccl", "stages")


def rank_summary(rank: int, path: str, fmt: str, cache: bool = True) -> dict[str, bytes]:
    """Summary tables of one rank as Parquet bytes by table name (see module doc)."""
    from opscope.analysis.cluster import rank_tables
    from opscope.ingest import ascend
    from opscope.ingest.multirank import read_inputs

    prof = read_inputs([(rank, Path(path), fmt)], cache=cache, workers=1)[0]
    links = hccl = stages = None
    if fmt == "ascend":
        from opscope.analysis.cluster_ascend import links as asc_links
        from opscope.analysis.cluster_ascend import read_stages

        comm = ascend.read_communication(Path(path))
        links = asc_links(comm, Path(path), rank)
        hccl = comm["collectives"].with_columns(pl.lit(rank, pl.Int32).alias("rank"))
        stages = read_stages(Path(path), rank)
    tables = rank_tables(prof, links, hccl=hccl, stages=stages)
    del prof
    out: dict[str, bytes] = {}
    for name in _TABLES:
        buf = io.BytesIO()
        tables[name].write_parquet(buf)
        out[name] = buf.getvalue()
    return out


GATHER_BATCH: Final = 64
"""Ranks whose summaries the parent holds before it writes them out as one Parquet part."""


class _Gather:
    """Collects per-rank summaries as they arrive and writes every :data:`GATHER_BATCH` ranks
    one Parquet file per table (``work/partK/TABLE.parquet``): the parent holds at most a batch
    of summaries and the work folder a few files, not five per rank."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.parts = 0
        self.pending: dict[str, list[pl.DataFrame]] = {t: [] for t in _TABLES}
        self.held = 0

    def add(self, blobs: dict[str, bytes]) -> None:
        for name in _TABLES:
            self.pending[name].append(pl.read_parquet(io.BytesIO(blobs[name])))
        self.held += 1
        if self.held >= GATHER_BATCH:
            self.flush()

    def flush(self) -> None:
        if self.held == 0:
            return
        d = self.work / f"part{self.parts}"
        d.mkdir(parents=True, exist_ok=True)
        for name, frames in self.pending.items():
            pl.concat(frames, how="vertical").write_parquet(d / f"{name}.parquet")
            frames.clear()
        self.parts += 1
        self.held = 0


def _failure(e: BaseException) -> str:
    return str(e) if isinstance(e, OpscopeError) else f"{type(e).__name__}: {e}"


def _local_job(job: tuple[int, str, str, bool]) -> tuple[int, dict[str, bytes] | str]:
    """(rank, its summary) or (rank, reason) when the rank could not be read."""
    rank, path, fmt, cache = job
    try:
        return rank, rank_summary(rank, path, fmt, cache)
    except Exception as e:  # one bad rank must not stop the others (reported by the caller)
        return rank, _failure(e)


def run_cluster(
    path: str | os.PathLike[str],
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    cache: bool = True,
    top: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Cluster analysis of the ranks under ``path`` (a :class:`opscope.analysis.cluster.Cluster`).

    ``workers``: processes (local) or CPUs of a local Ray instance (default: up to 4, never more
    than the CPUs or the ranks); ``0`` runs the ranks one after the other in this process.
    ``address``: an existing Ray cluster (``engine="ray"`` only; default ``$RAY_ADDRESS``, else
    a local Ray instance).
    """
    from opscope.analysis.cluster import aggregate
    from opscope.ingest.multirank import list_ranks

    if engine not in ENGINES:
        raise OpscopeError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if address is not None and engine != "ray":
        raise OpscopeError("--ray-address needs --engine ray")
    items = list_ranks(Path(path))
    n = workers if workers is not None else min(4, os.cpu_count() or 1, len(items))
    n = max(0, min(n, len(items)))
    work = Path(tempfile.mkdtemp(prefix="opscope-cluster-"))
    gather = _Gather(work)
    failed: dict[int, str] = {}
    done = 0

    def record(rank: int, out: dict[str, bytes] | str) -> None:
        nonlocal done
        if isinstance(out, str):
            failed[rank] = out
        else:
            gather.add(out)
        done += 1
        if progress is not None:
            progress(done, len(items))

    try:
        jobs = [(r, str(p), fmt, cache) for r, p, fmt in items]
        if engine == "ray":
            _run_ray(jobs, max(1, n), address, record)
        elif n == 0:
            for job in jobs:
                record(*_local_job(job))
        else:
            _run_pool(jobs, n, record)
        gather.flush()
        if len(failed) == len(jobs):
            first = min(failed)
            raise InputError(
                f"no rank could be read ({len(failed)} failed; rank {first}: {failed[first]})",
                Path(path),
            )
        scans = {t: pl.scan_parquet(str(work / "part*" / f"{t}.parquet")) for t in _TABLES}
        return aggregate(
            scans["steps"],
            scans["collectives"],
            scans["links"],
            hccl=scans["hccl"],
            stages=scans["stages"],
            engine=engine,
            top=top,
            failed=tuple(sorted(failed.items())),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


_Record = Callable[[int, "dict[str, bytes] | str"], None]


def _run_pool(jobs: list[tuple[int, str, str, bool]], n: int, record: _Record) -> None:
    """The jobs on ``n`` spawned processes; each result is recorded as soon as it arrives."""
    with ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_local_job, job): job[0] for job in jobs}
        for fut in as_completed(futures):
            try:
                record(*fut.result())
            except Exception as e:  # the worker process itself died
                record(futures[fut], _failure(e))


RAY_CONNECT_TIMEOUT_S: Final = 10.0
"""How long to try a HOST:PORT Ray address before giving up (Ray itself retries for minutes)."""


def _reachable(address: str) -> None:
    """A one-line error when ``HOST:PORT`` (or ``ray://HOST:PORT``) does not accept a TCP
    connection; ``auto`` and other forms are left to Ray."""
    m = re.fullmatch(r"(?:ray://)?\[?([^\[\]]+?)\]?:(\d+)", address)
    if m is None:
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), RAY_CONNECT_TIMEOUT_S).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise OpscopeError(f"cannot reach the Ray cluster at {address}: {why}") from e


RAY_BATCH: Final = 64
"""Results the parent takes from Ray per ``ray.wait`` (it does not wait for all of them)."""


def _run_ray(
    jobs: list[tuple[int, str, str, bool]], n: int, address: str | None, record: _Record
) -> None:
    """The jobs as Ray tasks; each result (or failure) is recorded as soon as it is ready."""
    try:
        import ray
    except ImportError as e:
        raise OpscopeError("the ray engine needs Ray: pip install 'opscope[ray]'") from e
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        _reachable(address)
    started = False
    if not ray.is_initialized():
        try:
            if address is not None:
                ray.init(address=address, log_to_driver=False)
            else:
                # Ray runs its workers at niceness 15 by default: on a busy machine they then
                # get a fraction of the CPU the local pool's workers get (1,000 ranks: 0.28 of a
                # core against 0.70 at the same load). A local instance started for this run
                # runs them at the caller's priority, as the pool does.
                ray.init(
                    num_cpus=n,
                    include_dashboard=False,
                    log_to_driver=False,
                    _system_config={"worker_niceness": 0},
                )
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise OpscopeError(f"cannot start or reach Ray ({address or 'local'}): {e}") from e
        started = True
    try:
        task: Any = ray.remote(num_cpus=1, max_retries=0)(rank_summary)
        refs = {task.remote(r, p, fmt, cache): r for r, p, fmt, cache in jobs}
        pending = list(refs)
        while pending:
            # Whatever is ready, up to a batch, with a short timeout: results stream in and
            # the progress bar moves without one wait per task over the whole pending list.
            ready, pending = ray.wait(
                pending, num_returns=min(RAY_BATCH, len(pending)), timeout=0.2
            )
            if not ready:
                ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    out: dict[str, bytes] | str = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    out = _failure(e.as_instanceof_cause())  # type: ignore[no-untyped-call]
                except ray.exceptions.RayError as e:  # a worker or node lost
                    out = _failure(e)
                record(refs[ref], out)
    finally:
        if started:
            ray.shutdown()
