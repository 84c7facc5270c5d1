"""Engines for the cluster analysis: each rank is summarised on its own, the parent aggregates.

:func:`rank_summary` loads ONE rank (through the columnar cache: a second run is near-instant),
computes its summary tables (:func:`opscope.analysis.cluster.rank_tables`) and returns them as
Parquet bytes; the events never leave the worker. Engines:

- ``"local"``: a process pool started with ``spawn`` (forking after Polars has started its
  threads can deadlock). Each worker writes its rank's Parquet files into a work folder and
  returns only the folder's path: nothing is pickled back but a string.
- ``"ray"`` (optional extra ``opscope[ray]``): the same function as Ray tasks, on the cluster at
  ``address`` or on a local ``ray.init(num_cpus=workers)``. A task returns the Parquet bytes
  through Ray's object store (the parent may be on another machine than the task), and the
  parent writes them to the same work folder. The trace paths must be readable by every node.

A rank that cannot be read (a corrupt file, a missing folder, a worker that died) is reported
and skipped, never fatal: the result lists it in ``failed`` with the reason, and the analysis
runs on the ranks that were read. Only when no rank could be read is it an error.

The parent then scans the small Parquet files lazily (``pl.scan_parquet``) and aggregates them
(:func:`opscope.analysis.cluster.aggregate`): its memory is the summaries', never all events.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
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


def _write(work: Path, rank: int, blobs: dict[str, bytes]) -> str:
    d = work / f"rank{rank}"
    d.mkdir(parents=True, exist_ok=True)
    for name, data in blobs.items():
        tmp = d / f".{name}.parquet.tmp"
        tmp.write_bytes(data)
        tmp.replace(d / f"{name}.parquet")
    return str(d)


def _failure(e: BaseException) -> str:
    return str(e) if isinstance(e, OpscopeError) else f"{type(e).__name__}: {e}"


def _local_job(job: tuple[int, str, str, bool, str]) -> tuple[int, str | None]:
    """(rank, None) when summarised, (rank, reason) when the rank could not be read."""
    rank, path, fmt, cache, work = job
    try:
        _write(Path(work), rank, rank_summary(rank, path, fmt, cache))
    except Exception as e:  # one bad rank must not stop the others (reported by the caller)
        return rank, _failure(e)
    return rank, None


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
    ``address``: an existing Ray cluster (``engine="ray"`` only).
    """
    from opscope.analysis.cluster import aggregate
    from opscope.ingest.multirank import list_ranks

    if engine not in ENGINES:
        raise OpscopeError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if address is not None and engine != "ray":
        raise OpscopeError("--address needs --engine ray")
    items = list_ranks(Path(path))
    n = workers if workers is not None else min(4, os.cpu_count() or 1, len(items))
    n = max(0, min(n, len(items)))
    work = Path(tempfile.mkdtemp(prefix="opscope-cluster-"))
    failed: dict[int, str] = {}
    try:
        jobs = [(r, str(p), fmt, cache, str(work)) for r, p, fmt in items]
        if engine == "ray":
            failed = _run_ray(jobs, work, max(1, n), address, progress)
        elif n == 0:
            for i, job in enumerate(jobs):
                rank, err = _local_job(job)
                if err is not None:
                    failed[rank] = err
                if progress is not None:
                    progress(i + 1, len(jobs))
        else:
            with ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn")) as pool:
                futures = [pool.submit(_local_job, job) for job in jobs]
                for i, (job, fut) in enumerate(zip(jobs, futures, strict=True)):
                    try:
                        rank, err = fut.result()
                    except Exception as e:  # the worker process itself died
                        rank, err = job[0], _failure(e)
                    if err is not None:
                        failed[rank] = err
                    if progress is not None:
                        progress(i + 1, len(jobs))
        if len(failed) == len(jobs):
            first = min(failed)
            raise InputError(
                f"no rank could be read ({len(failed)} failed; rank {first}: {failed[first]})",
                Path(path),
            )
        scans = {t: pl.scan_parquet(str(work / "rank*" / f"{t}.parquet")) for t in _TABLES}
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


def _run_ray(
    jobs: list[tuple[int, str, str, bool, str]],
    work: Path,
    n: int,
    address: str | None,
    progress: Callable[[int, int], None] | None,
) -> dict[int, str]:
    """Run the jobs as Ray tasks; returns the ranks that failed with their reasons."""
    failed: dict[int, str] = {}
    try:
        import ray
    except ImportError as e:
        raise OpscopeError("the ray engine needs Ray: pip install 'opscope[ray]'") from e
    started = False
    if not ray.is_initialized():
        try:
            if address is not None:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise OpscopeError(f"cannot start or reach Ray ({address or 'local'}): {e}") from e
        started = True
    try:
        task: Any = ray.remote(num_cpus=1, max_retries=0)(rank_summary)
        refs = {task.remote(r, p, fmt, cache): r for r, p, fmt, cache, _ in jobs}
        pending = list(refs)
        done_n = 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    _write(work, refs[ref], ray.get(ref))
                except ray.exceptions.RayTaskError as e:
                    cause = e.as_instanceof_cause()  # type: ignore[no-untyped-call]
                    failed[refs[ref]] = _failure(cause)
                except ray.exceptions.RayError as e:  # a worker or node lost
                    failed[refs[ref]] = _failure(e)
                done_n += 1
                if progress is not None:
                    progress(done_n, len(jobs))
    finally:
        if started:
            ray.shutdown()
    return failed
