"""The Profile: one immutable, serialisable, columnar view of a recorded run.

A Profile is a bag of Polars DataFrames declared in :mod:`opscope.model.schema` plus a small JSON
``meta`` dict. It never holds per-event Python objects. Readers build it; everything downstream
only reads it.

A Profile opened with ``Profile.open(d, lazy=True)`` (what the cache does) parses each table on its
first access: ``profile.events`` is still a DataFrame, it is just read when first asked for, and
``ops`` / ``kernels`` read only their rows until ``events`` itself is needed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, overload

import polars as pl

from opscope.model import schema
from opscope.model.tablefile import TableFile

# zstd level 1 without column statistics: a cold load's cache write of a 1 GB trace takes about
# 0.75 of the CPU time of zstd's default level with statistics, for the same size (5% of the
# JSON) and read time; lz4 reads barely faster at twice the size. Nothing here prunes row groups
# by statistics.
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 1,
    "statistics": False,
}
# meta.json key of each table file's size, checked at open (a file cut short or overwritten).
_BYTES_KEY = "table_bytes"


@dataclass(frozen=True)
class Profile:
    """Every table of one profile (one or many ranks), plus metadata.

    ``meta`` keys in use:

    - ``format``: ``"kineto"`` or ``"ascend"`` (``"mixed"`` when ranks differ)
    - ``sources``: list of the files/directories read
    - ``ranks``: sorted list of rank ids
    - ``oddities``: ``{reason: count}`` of tolerated odd input (bad fields, clamped durations...)
    - ``salvaged``: ``{"events": n, "reason": str}`` when a truncated input was salvaged
    - ``trace_meta``: per-rank dict of the trace's own top-level metadata (secrets redacted)
    - ``run``: the run directory's ``run.json`` when loaded from one
    """

    events: pl.DataFrame = field(default_factory=lambda: schema.empty("events"))
    flows: pl.DataFrame = field(default_factory=lambda: schema.empty("flows"))
    stacks: pl.DataFrame = field(default_factory=lambda: schema.empty("stacks"))
    memory: pl.DataFrame = field(default_factory=lambda: schema.empty("memory"))
    counters: pl.DataFrame = field(default_factory=lambda: schema.empty("counters"))
    steps: pl.DataFrame = field(default_factory=lambda: schema.empty("steps"))
    kernel_metrics: pl.DataFrame = field(default_factory=lambda: schema.empty("kernel_metrics"))
    devices: pl.DataFrame = field(default_factory=lambda: schema.empty("devices"))
    threads: pl.DataFrame = field(default_factory=lambda: schema.empty("threads"))
    metrics: pl.DataFrame = field(default_factory=lambda: schema.empty("metrics"))
    modules: pl.DataFrame = field(default_factory=lambda: schema.empty("modules"))
    meta: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_tables(cls, meta: Mapping[str, Any] | None = None, **tables: pl.DataFrame) -> Profile:
        """Build a Profile, conforming each given table to its declared schema."""
        unknown = [t for t in tables if t not in schema.TABLES]
        if unknown:
            raise ValueError(f"unknown tables: {unknown}")
        conformed = {name: schema.conform(name, df) for name, df in tables.items()}
        return cls(meta=dict(meta or {}), **conformed)

    def table(self, name: str) -> pl.DataFrame:
        """The table called ``name`` (one of :data:`opscope.model.schema.TABLES`)."""
        if name not in schema.TABLES:
            raise KeyError(name)
        df: pl.DataFrame = getattr(self, name)
        return df

    def with_tables(self, **tables: pl.DataFrame) -> Profile:
        """A copy with some tables replaced (conformed to the schema)."""
        conformed = {name: schema.conform(name, df) for name, df in tables.items()}
        return self._replace(**conformed)

    def with_meta(self, **meta: Any) -> Profile:
        """A copy with ``meta`` keys added or replaced."""
        return self._replace(meta={**self.meta, **meta})

    def _replace(self, **changes: Any) -> Profile:
        # dataclasses.replace would read (and so parse) every unparsed table; this hands the
        # unparsed ones over as they are.
        raw = {f.name: self.__dict__[f.name] for f in fields(self)}
        return type(self)(**{**raw, **changes})

    def _rows(self, name: str, predicate: pl.Expr) -> pl.DataFrame:
        pending = self.__dict__.get(name)
        if isinstance(pending, TableFile):
            return pending.rows(predicate)
        return self.table(name).filter(predicate)

    def scan(self, name: str, columns: Sequence[str] | None = None) -> pl.LazyFrame:
        """The table called ``name`` as a ``pl.LazyFrame`` (only ``columns`` when given).

        A table not parsed yet (a Profile opened with ``lazy=True``) is scanned from its file, so
        a query over it reads only the columns and rows it needs (``collect(engine=
        "streaming")`` keeps it in bounded memory); a parsed one is its frame's ``lazy()``.
        Reading errors of a damaged file surface on collect (see :meth:`collect`).
        """
        if name not in schema.TABLES:
            raise KeyError(name)
        pending = self.__dict__.get(name)
        lf = pending.scan() if isinstance(pending, TableFile) else self.table(name).lazy()
        return lf.select(columns) if columns is not None else lf

    def collect(self, name: str, lf: pl.LazyFrame, *, streaming: bool = True) -> pl.DataFrame:
        """``lf``, a query over :meth:`scan` of ``name``, collected (streaming by default); a
        damaged table file raises :class:`~opscope.errors.InputError` naming it."""
        pending = self.__dict__.get(name)
        if isinstance(pending, TableFile):
            return pending.collect(lf, streaming=streaming)
        return lf.collect(engine="streaming") if streaming else lf.collect()

    def height(self, name: str) -> int:
        """The rows of the table called ``name``, without parsing it when it is not parsed yet
        (the count of its file's metadata)."""
        pending = self.__dict__.get(name)
        if isinstance(pending, TableFile):
            return int(pending.collect(pending.scan().select(pl.len()), streaming=False).item())
        return self.table(name).height

    def file_bytes(self, name: str) -> int | None:
        """The size of ``name``'s table file while that table is not parsed, else None."""
        pending = self.__dict__.get(name)
        return pending.nbytes if isinstance(pending, TableFile) else None

    def projected(self, columns: Sequence[str | pl.Expr]) -> Profile:
        """A copy whose ``events`` holds only ``columns`` (in that order); other tables shared.

        For analyses that read a few columns of a huge file-backed profile: the events file is
        read for those columns alone (streaming), never whole. A column may be an expression
        over the events aliased to a column name (a column kept only on the rows that need it:
        less memory). An events table already parsed is selected from. ``ops`` / ``kernels`` of
        the copy are its selections of those columns. The copy is not schema-conformed: only
        code reading just ``columns`` may use it.
        """
        # Left in the read's chunks (one per row group): a rechunk raised the peak by half the
        # frame (10 M events: 1.66 -> 2.22 GB) and cost 1-3 s, for no gain measurable in the
        # analyses' times.
        ev = self.collect("events", self.scan("events").select(columns))
        return self._replace(events=ev)

    def __getstate__(self) -> dict[str, Any]:
        # A pickle or copy carries every table parsed, never an open file.
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # Convenience views --------------------------------------------------------------------------

    @cached_property  # as kernels: the rules and analyses ask for it a dozen times a report
    def ops(self) -> pl.DataFrame:
        """Host operators (``kind == "cpu_op"``)."""
        got = self._of_one_kind(("cpu_op",))
        return got if got is not None else self._rows("events", pl.col("kind") == "cpu_op")

    @cached_property  # a Profile is immutable; the rules ask for it dozens of times a report
    def kernels(self) -> pl.DataFrame:
        """Device work (:data:`~opscope.model.kinds.DEVICE_WORK`): kernels, communication,
        memcpy, memset (not annotations)."""
        got = self._of_one_kind(schema.DEVICE_WORK)
        if got is not None:
            return got
        return self._rows("events", pl.col("kind").is_in(schema.DEVICE_WORK))

    def _of_one_kind(self, kinds: Sequence[str]) -> pl.DataFrame | None:
        """The parsed events of ``kinds`` when every event is of one kind (a partial Ascend
        rank's communication alone): none of them or all, without the filter's query (~0.1 ms
        on a wide frame of any height); None otherwise. All of them is the frame itself only
        where each column is one chunk, as a filter of all rows leaves it (a filter keeps a
        frame's aligned chunks or rechunks it: float sums over the chunks would differ)."""
        ev = self.__dict__.get("events")
        if not isinstance(ev, pl.DataFrame):
            return None
        # analysis.tree's switch, read only when analysis is imported: the model does not
        # import it (a cache hit's `p.ops` imports no analysis), and unimported it is unchanged
        tree = sys.modules.get("opscope.analysis.tree")
        if tree is not None and not tree.SHORTCUTS:
            return None
        kind = ev.get_column("kind")
        if not len(kind) or kind.null_count():
            return None
        # (the least and greatest value: kept with the column, no query)
        lo, hi = kind.min(), kind.max()
        if lo != hi:
            return None
        if lo not in kinds:
            return ev.clear()  # (the same empty columns, flags and chunk as the filter's)
        return ev if max(ev.n_chunks("all")) == 1 else None

    @property
    def ranks(self) -> list[int]:
        """Sorted rank ids present in the profile."""
        r = self.meta.get("ranks")
        if r is not None:
            return [int(x) for x in r]
        return sorted(int(x) for x in self.events.get_column("rank").unique().drop_nulls())

    @cached_property
    def has_device(self) -> bool:
        """True when the profile holds any device kernel / copy."""
        return self.kernels.height > 0

    # Serialisation ------------------------------------------------------------------------------

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write every table as Parquet plus ``meta.json`` into ``directory``, atomically.

        The directory is written under a temporary name beside it and renamed into place, so a
        reader never sees half of it.
        """
        target = Path(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            for name in schema.TABLES:
                self.table(name).write_parquet(tmp / f"{name}.parquet", **WRITE_OPTIONS)
            finish_folder(tmp, target, self.meta)
        except BaseException:
            _rmtree(tmp)
            raise
        return target

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, lazy: bool = False) -> Profile:
        """Read a Profile written by :meth:`save`.

        ``lazy`` checks and opens every table file now but parses each on its first access, so
        a caller that needs a few tables pays for those only. The files stay readable to the
        Profile when the folder is replaced or deleted after the open. A file damaged inside
        (which the open-time checks cannot see) raises :class:`~opscope.errors.InputError` on
        that table's first access.

        Raises ``ValueError`` on a version mismatch or a table file that is missing, cut short,
        not Parquet or not the size :meth:`save` wrote; ``OSError`` when unreadable.
        """
        d = Path(directory)
        meta = json.loads((d / "meta.json").read_text())
        version = meta.pop("schema_version", None)
        if version != schema.SCHEMA_VERSION:
            raise ValueError(f"{d}: schema version {version}, expected {schema.SCHEMA_VERSION}")
        sizes = meta.pop(_BYTES_KEY, None) or {}
        files = {}
        for name in schema.TABLES:
            path = d / f"{name}.parquet"
            if not path.is_file():
                raise ValueError(f"{path}: missing")
            files[name] = TableFile(path, sizes.get(name))
        tables: dict[str, Any] = files if lazy else {n: f.frame() for n, f in files.items()}
        return cls(meta=meta, **tables)


def concat(profiles: list[Profile], meta: Mapping[str, Any] | None = None) -> Profile:
    """Join profiles of different ranks into one, renumbering event ids so they stay unique.

    Each input's ``rank`` columns must already hold its rank. Id columns (``id``, ``parent_id``,
    ``launch_id``, ``op_id``, ``fwd_id``, flow ``src_id``/``dst_id``, memory ``op_id``,
    kernel_metrics ``event_id``) are offset; stack ids are offset likewise.
    """
    if not profiles:
        return Profile.from_tables(meta=meta)
    event_ids = ["id", "parent_id", "launch_id", "op_id", "fwd_id"]
    out: dict[str, list[pl.DataFrame]] = {name: [] for name in schema.TABLES}
    ev_off = 0
    st_off = 0
    for p in profiles:
        ev = p.events.with_columns([pl.col(c) + ev_off for c in event_ids])
        ev = ev.with_columns(pl.col("stack_id") + st_off)
        out["events"].append(ev)
        out["flows"].append(
            p.flows.with_columns(pl.col("src_id") + ev_off, pl.col("dst_id") + ev_off)
        )
        out["memory"].append(p.memory.with_columns(pl.col("op_id") + ev_off))
        out["kernel_metrics"].append(p.kernel_metrics.with_columns(pl.col("event_id") + ev_off))
        out["stacks"].append(p.stacks.with_columns(pl.col("stack_id") + st_off))
        for name in ("counters", "steps", "devices", "threads", "metrics", "modules"):
            out[name].append(p.table(name))
        ev_off += p.events.height
        if p.stacks.height:
            st_off += int(p.stacks.get_column("stack_id").max()) + 1  # type: ignore[arg-type]
    tables = {name: pl.concat(dfs, how="vertical") for name, dfs in out.items()}
    tables["modules"] = tables["modules"].unique(maintain_order=True)
    merged_meta: dict[str, Any] = {}
    for p in profiles:
        for k, v in p.meta.items():
            merged_meta.setdefault(k, v)
    merged_meta["ranks"] = sorted({r for p in profiles for r in p.ranks})
    merged_meta.update(meta or {})
    return Profile(meta=merged_meta, **tables)


class _Table:
    """A Profile field's storage: a DataFrame, or a :class:`TableFile` parsed on first access
    and then replaced by its DataFrame."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> _Table: ...
    @overload
    def __get__(self, obj: Profile, owner: type[Any] | None = None) -> pl.DataFrame: ...
    def __get__(self, obj: Profile | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name]
        if isinstance(value, TableFile):
            value = value.frame()
            obj.__dict__[self.name] = value
        return value

    def __set__(self, obj: Profile, value: pl.DataFrame | TableFile) -> None:
        # Reached only from the dataclass __init__ (object.__setattr__): the frozen __setattr__
        # still refuses assignment from outside.
        obj.__dict__[self.name] = value


# Installed after @dataclass built __init__ (its fields have factories, so no class attribute
# of theirs is left to shadow); a data descriptor is consulted before the instance __dict__.
for _name in schema.TABLES:
    setattr(Profile, _name, _Table(_name))


def finish_folder(tmp: Path, target: Path, meta: Mapping[str, Any]) -> None:
    """Complete a Profile folder whose table files are all in ``tmp``: ``meta.json`` (with each
    table file's size, checked at open) written, then ``tmp`` renamed to ``target`` (an existing
    ``target`` replaced), so a reader never sees half of it. :meth:`Profile.save`'s end, and the
    out-of-core load's, which writes the events file itself."""
    sizes = {name: (tmp / f"{name}.parquet").stat().st_size for name in schema.TABLES}
    doc = {"schema_version": schema.SCHEMA_VERSION, **meta, _BYTES_KEY: sizes}
    (tmp / "meta.json").write_text(json.dumps(doc, default=str))
    if target.exists():
        old = target.with_name(f".{target.name}.old.{os.getpid()}")
        target.rename(old)
        tmp.rename(target)
        _rmtree(old)
    else:
        tmp.rename(target)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
