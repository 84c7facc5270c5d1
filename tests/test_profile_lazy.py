"""``Profile.open(lazy=True)``: the same frames as an eager open, parsed on first use, robust to
the folder going away and to damaged files."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import shutil
from pathlib import Path

import polars as pl
import pytest

from opscope.errors import InputError
from opscope.model import Profile, concat, schema, tablefile
from opscope.model.tablefile import TableFile

KINDS = ["cpu_op", "kernel", "runtime", "memcpy", "cpu_op", "memset", "step", "gpu_annotation"]


def _profile(n: int = 400) -> Profile:
    kinds = [KINDS[i % len(KINDS)] for i in range(n)]
    events = pl.DataFrame(
        {
            "id": list(range(n)),
            "rank": [0] * n,
            "kind": kinds,
            "name": [f"op{i % 7}" for i in range(n)],
            "ts_ns": [i * 1000 for i in range(n)],
            "dur_ns": [(i * 37) % 900 for i in range(n)],
            "device": [0 if k in schema.DEVICE_KINDS else None for k in kinds],
            "input_dims": [f"[[{i},{i + 1}]]" if i % 3 else None for i in range(n)],
            "occupancy": [i / 7 if i % 5 else None for i in range(n)],
            "parent_id": [None, *range(n - 1)],
            "is_backward": [i % 2 == 0 for i in range(n)],
        }
    )
    flows = pl.DataFrame(
        {"rank": [0] * 10, "kind": ["ac2g"] * 10, "src_id": range(10), "dst_id": range(1, 11)}
    )
    steps = pl.DataFrame({"rank": [0, 0], "step": [1, 2], "ts_ns": [0, 5000], "dur_ns": [5, 6]})
    stacks = pl.DataFrame({"stack_id": [0, 0], "depth": [0, 1], "file": ["a.py", "b.py"]})
    return Profile.from_tables(
        meta={"format": "kineto", "ranks": [0], "oddities": {"x": 1}},
        events=events,
        flows=flows,
        steps=steps,
        stacks=stacks,
    )


@pytest.fixture(params=["bytes", "handles"])
def saved(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A saved profile, opened either from in-memory bytes (small files) or from open handles."""
    if request.param == "handles":
        monkeypatch.setattr(tablefile, "SMALL_BYTES", 0)
    return _profile().save(tmp_path / "p")


def _pending(p: Profile, name: str) -> TableFile | None:
    v = p.__dict__[name]
    return v if isinstance(v, TableFile) else None


def test_lazy_tables_equal_eager_ones(saved: Path) -> None:
    orig = _profile()
    eager = Profile.open(saved)
    lazy = Profile.open(saved, lazy=True)
    assert lazy.meta == eager.meta == orig.meta
    for name in schema.TABLES:
        assert lazy.table(name).schema == orig.table(name).schema, name
        assert lazy.table(name).equals(orig.table(name)), name
        assert eager.table(name).equals(orig.table(name)), name


def test_ops_and_kernels_before_events_are_parsed(saved: Path) -> None:
    n = 400
    want_ops = [i for i in range(n) if KINDS[i % len(KINDS)] == "cpu_op"]
    want_kernels = [i for i in range(n) if KINDS[i % len(KINDS)] in ("kernel", "memcpy", "memset")]
    lazy = Profile.open(saved, lazy=True)
    ops = lazy.ops
    pending = _pending(lazy, "events")
    assert pending is not None and not pending.parsed  # rows read, not the whole table
    assert ops.get_column("id").to_list() == want_ops
    assert ops.equals(_profile().ops)
    kernels = lazy.kernels  # a second selection reads the whole table
    assert kernels.get_column("id").to_list() == want_kernels
    assert kernels.equals(_profile().kernels)
    assert pending.parsed
    assert lazy.ops.equals(ops)
    assert lazy.has_device and lazy.ranks == [0]


def test_kernels_first_read_only_their_rows(saved: Path) -> None:
    lazy = Profile.open(saved, lazy=True)
    kernels = lazy.kernels
    pending = _pending(lazy, "events")
    assert pending is not None and not pending.parsed
    assert kernels.equals(_profile().kernels)
    assert kernels.get_column("kind").cast(pl.String).unique().sort().to_list() == [
        "kernel",
        "memcpy",
        "memset",
    ]


def test_height_counts_rows_without_parsing_the_table(saved: Path) -> None:
    orig = _profile()
    lazy = Profile.open(saved, lazy=True)
    for name in schema.TABLES:
        assert lazy.height(name) == orig.table(name).height, name
    pending = _pending(lazy, "events")
    assert pending is not None and not pending.parsed  # the count came from the file
    lazy.events  # noqa: B018 - parsed: the frame's count
    assert pending.parsed and lazy.height("events") == orig.events.height == 400


def test_unparsed_tables_stay_unparsed_through_copies(saved: Path) -> None:
    lazy = Profile.open(saved, lazy=True)
    steps = _profile().steps.with_columns(pl.col("dur_ns") * 2)
    q = lazy.with_meta(extra=1).with_tables(steps=steps)
    for name in ("events", "flows", "memory"):
        pending = _pending(q, name)
        assert pending is not None and not pending.parsed, name
    assert q.steps.get_column("dur_ns").to_list() == [10, 12]
    assert q.meta["extra"] == 1 and "extra" not in lazy.meta
    # Both profiles share the opened file: parsed once, the same frame for both.
    assert q.events is lazy.events
    assert isinstance(q.__dict__["events"], pl.DataFrame)


def test_lazy_profile_survives_its_folder_being_deleted(saved: Path) -> None:
    lazy = Profile.open(saved, lazy=True)
    shutil.rmtree(saved)
    orig = _profile()
    assert lazy.ops.equals(orig.ops)
    for name in schema.TABLES:
        assert lazy.table(name).equals(orig.table(name)), name


def test_copies_pickles_replace_and_concat_parse_everything(saved: Path) -> None:
    orig = _profile()
    for q in (
        pickle.loads(pickle.dumps(Profile.open(saved, lazy=True))),
        copy.deepcopy(Profile.open(saved, lazy=True)),
        copy.copy(Profile.open(saved, lazy=True)),
        dataclasses.replace(Profile.open(saved, lazy=True), meta={"m": 2}),
    ):
        assert not any(isinstance(v, TableFile) for v in q.__dict__.values())
        for name in schema.TABLES:
            assert q.table(name).equals(orig.table(name)), name
    both = concat([Profile.open(saved, lazy=True), Profile.open(saved, lazy=True)])
    want = concat([orig, orig])
    for name in schema.TABLES:
        assert both.table(name).equals(want.table(name)), name


def test_tables_stay_frozen(saved: Path) -> None:
    lazy = Profile.open(saved, lazy=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.events = pl.DataFrame()  # type: ignore[misc]
    assert lazy.events.height == 400


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage_same_size(path: Path) -> None:
    path.write_bytes(b"x" * path.stat().st_size)


def _missing(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("damage", [_cut, _garbage_same_size, _missing])
@pytest.mark.parametrize("lazy", [False, True])
def test_damaged_file_fails_the_open(saved: Path, damage: object, lazy: bool) -> None:
    damage(saved / "events.parquet")  # type: ignore[operator]
    with pytest.raises(ValueError, match=r"events\.parquet"):
        Profile.open(saved, lazy=lazy)


def test_size_is_checked_even_without_written_sizes(saved: Path) -> None:
    # An entry written before sizes were recorded still has its magic bytes checked.
    _cut(saved / "flows.parquet")
    with pytest.raises(ValueError, match=r"cut short|not a Parquet"):
        TableFile(saved / "flows.parquet")


def test_damage_inside_a_file_is_a_typed_error_on_first_use(saved: Path) -> None:
    f = saved / "events.parquet"
    data = bytearray(f.read_bytes())
    mid = len(data) // 2
    data[8:mid] = b"\xff" * (mid - 8)  # same size, magic bytes intact
    f.write_bytes(bytes(data))
    lazy = Profile.open(saved, lazy=True)  # the open-time checks cannot see it
    with pytest.raises(InputError, match=r"events\.parquet: damaged table file") as err:
        _ = lazy.events
    assert "\n" not in str(err.value)
    with pytest.raises(InputError):
        Profile.open(saved)
