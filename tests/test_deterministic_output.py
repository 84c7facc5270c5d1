"""The same trace gives the same report, byte for byte, whatever the thread count or hash seed.

Polars' ``group_by``/``unique`` return groups in an order that varies with the threads that ran
them, and an unstable ``sort`` may swap equal keys; Python's ``set`` order follows
``PYTHONHASHSEED``. A table that orders rows by a non-unique key then differs between two runs of
one trace, which breaks golden tests and ``opscope compare`` as a CI gate. Each real trace under
``../shared/traces`` is rendered (``report --json``, ``report --md`` and the findings) in three
fresh subprocesses:

* run A: ``POLARS_MAX_THREADS=1``, ``PYTHONHASHSEED=0``, the report's parts one after the other
  (``OPSCOPE_THREADS=1``), an empty trace cache (the trace is parsed);
* run B: Polars' default thread count, ``PYTHONHASHSEED=1729``, the report's parts on the default
  threads, run A's cache (the trace is read back from Parquet),
* run C: ``POLARS_MAX_THREADS=16`` (more threads than this machine may have: the group order
  changes with the thread count, and 1 vs a 2-core default missed ties that 3 or 16 showed),
  ``PYTHONHASHSEED=4242``, the report's parts on as many threads as there are CPUs
  (``OPSCOPE_THREADS=16``), a cache of its own (parsed again, with 16 threads),

and B's and C's outputs must be identical to A's. The one field stripped before comparing is
``from_cache`` (top level and under ``load``): it says which path read the trace and is meant to
differ. The reports hold no clock time or elapsed time. Each subprocess renders every trace (one
interpreter start per run, not per trace); ``test_driver_matches_cli`` checks that what the
driver renders is what ``opscope report --json``/``--md`` print.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_KINETO_FILES, SHARED_TRACES

# Every real input the report reads (the Ascend kernel_details.csv alone is not a profile).
_INPUTS = [
    *SHARED_KINETO_FILES,
    "ascend/alexnet_ddp_910b/level0_rank0_ascend_pt",
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",
    "ascend/small_two_rank/test_rank_0",
    "ascend/small_two_rank/test_rank_1",
]

# What `opscope report --json` / `--md` do (cli/commands/report.py), for each path in argv, in one
# interpreter; prints {path: {"json": ..., "md": ...}}.
_DRIVER = """
import json, sys
from pathlib import Path
from opscope.report.base import render
from opscope.report.build import build_report
out = {}
for p in sys.argv[1:]:
    report = build_report(Path(p), top=20, salvage=False, device=None)
    out[p] = {"json": render(report, "json") + "\\n", "md": render(report, "markdown")}
sys.stdout.write(json.dumps(out))
"""

_RUNS = {
    "A": {"POLARS_MAX_THREADS": "1", "PYTHONHASHSEED": "0", "OPSCOPE_THREADS": "1"},
    "B": {"POLARS_MAX_THREADS": None, "PYTHONHASHSEED": "1729", "OPSCOPE_THREADS": None},
    "C": {"POLARS_MAX_THREADS": "16", "PYTHONHASHSEED": "4242", "OPSCOPE_THREADS": "16"},
}
# The runs that read run A's cache (the others parse the trace into a cache of their own).
_WARM = {"B"}


def _env(settings: dict[str, str | None], cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    for k, v in settings.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env["OPSCOPE_CACHE_DIR"] = str(cache)
    env.pop("OPSCOPE_CACHE_BESIDE", None)
    return env


def _present() -> list[Path]:
    return [SHARED_TRACES / rel for rel in _INPUTS if (SHARED_TRACES / rel).exists()]


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, str]]]:
    """{run: {path: {"json", "md"}}}: run A with an empty cache, then B reading A's cache, and C
    with an empty cache of its own."""
    paths = _present()
    if not paths:
        pytest.skip(f"shared traces not found at {SHARED_TRACES}")
    cache_a = tmp_path_factory.mktemp("det-cache")
    out: dict[str, dict[str, dict[str, str]]] = {}
    for run, settings in _RUNS.items():  # in turn: B must find A's cache entries
        cache = cache_a if run in ("A", *_WARM) else tmp_path_factory.mktemp(f"det-cache-{run}")
        res = subprocess.run(
            [sys.executable, "-c", _DRIVER, *map(str, paths)],
            env=_env(settings, cache),
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, f"run {run} failed:\n{res.stderr[-3000:]}"
        out[run] = json.loads(res.stdout)
    return out


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    """The report JSON without ``from_cache`` (which loader read the trace: meant to differ)."""
    doc = dict(doc)
    doc.pop("from_cache", None)
    if isinstance(doc.get("load"), dict):
        doc["load"] = {k: v for k, v in doc["load"].items() if k != "from_cache"}
    return doc


def _bytes(text: str) -> str:
    """The JSON text with ``from_cache`` set to one value (an unescaped key: never trace text)."""
    return text.replace('"from_cache":true', '"from_cache":false')


def _first_difference(a: Any, b: Any, at: str = "") -> str | None:
    """Where two JSON values first differ (for a readable failure), else None."""
    if type(a) is not type(b):
        return f"{at or '/'}: {a!r:.200} != {b!r:.200}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{at or '/'}: keys {list(a)} != {list(b)}"
        for k in a:
            d = _first_difference(a[k], b[k], f"{at}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{at}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_difference(x, y, f"{at}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{at}: {a!r:.200} != {b!r:.200}"


def _pair(
    renders: dict[str, dict[str, dict[str, str]]], rel: str, other: str = "B"
) -> tuple[dict[str, str], dict[str, str]]:
    key = str(SHARED_TRACES / rel)
    if key not in renders["A"]:
        pytest.skip(f"shared trace not found: {key}")
    return renders["A"][key], renders[other][key]


_OTHER = pytest.mark.parametrize("other", ["B", "C"])


@pytest.mark.slow
@_OTHER
@pytest.mark.parametrize("rel", _INPUTS)
def test_findings_identical(
    renders: dict[str, dict[str, dict[str, str]]], rel: str, other: str
) -> None:
    a, b = _pair(renders, rel, other)
    fa, fb = json.loads(a["json"])["findings"], json.loads(b["json"])["findings"]
    assert fa, f"{rel}: no findings to compare"
    assert fa == fb, _first_difference(fa, fb, "/findings")


@pytest.mark.slow
@_OTHER
@pytest.mark.parametrize("rel", _INPUTS)
def test_json_identical(
    renders: dict[str, dict[str, dict[str, str]]], rel: str, other: str
) -> None:
    a, b = _pair(renders, rel, other)
    ja, jb = json.loads(a["json"]), json.loads(b["json"])
    assert ja["from_cache"] is False  # run A parsed the trace (run B may read A's cache)
    sa, sb = _strip(ja), _strip(jb)
    assert sa == sb, _first_difference(sa, sb)
    # and byte for byte, not only equal as values (key order, float text)
    assert _bytes(a["json"]) == _bytes(b["json"])


@pytest.mark.slow
@_OTHER
@pytest.mark.parametrize("rel", _INPUTS)
def test_markdown_identical(
    renders: dict[str, dict[str, dict[str, str]]], rel: str, other: str
) -> None:
    a, b = _pair(renders, rel, other)
    assert a["md"].strip(), f"{rel}: empty Markdown"
    if a["md"] != b["md"]:
        la, lb = a["md"].splitlines(), b["md"].splitlines()
        i = next(
            (i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y),
            min(len(la), len(lb)),
        )
        got = la[i] if i < len(la) else "<end>"
        want = lb[i] if i < len(lb) else "<end>"
        pytest.fail(f"{rel}: Markdown differs at line {i + 1}:\nA: {got}\nB: {want}")


@pytest.mark.slow
def test_driver_matches_cli(renders: dict[str, dict[str, dict[str, str]]], tmp_path: Path) -> None:
    """The driver prints what ``opscope report --json`` / ``--md`` print (a third setting:
    4 Polars threads, another hash seed, a cache of its own)."""
    rel = "gpu/hta_amd_mi250_minitoy.json.gz"
    a, _ = _pair(renders, rel)
    env = _env({"POLARS_MAX_THREADS": "4", "PYTHONHASHSEED": "31337"}, tmp_path / "cache")
    for flag, key in (("--json", "json"), ("--md", "md")):
        cli = [sys.executable, "-m", "opscope", "report", flag, str(SHARED_TRACES / rel)]
        res = subprocess.run(cli, env=env, check=False, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        if key == "json":
            assert _strip(json.loads(res.stdout)) == _strip(json.loads(a["json"]))
            assert _bytes(res.stdout) == _bytes(a["json"])
        else:
            assert res.stdout == a["md"]


# Planted ties: the tables the report showed in a different order from run to run. Many groups
# of equal size, planted in reverse key order, so that neither the trace's order nor a lucky
# hash order gives the expected rows: only a sort on the keys does.


def test_live_at_peak_ties_ordered_by_keys() -> None:
    import opscope.analysis  # noqa: F401
    from helpers.synth import Builder
    from opscope.analysis.registry import run

    b = Builder()
    st = b.step(0, 0, 1000)
    names = [f"aten::op{i:02d}" for i in range(30)]
    total = 0
    for i, name in enumerate(reversed(names)):  # op29 allocates first
        op = b.op(name, 10 + i, 1, parent=st, step=0)
        total += 64
        b.alloc(10 + i, 64, addr=i + 1, op=op, total=total, reserved=4096, step=0)
    res = run("memory", b.build())
    for table in (res.live_at_peak, res.never_freed):  # type: ignore[attr-defined]
        assert table.get_column("bytes").to_list() == [64] * 30  # all tied, all live at the end
        assert table.get_column("op").to_list() == names


def test_comm_exposed_operators_ties_ordered_by_name() -> None:
    from helpers.synth import Builder
    from opscope.advise import advise

    b = Builder()
    st = b.step(0, 0, 1000)
    names = [f"ncclKernel_AllReduce_{i:02d}" for i in range(12)]
    for i, name in enumerate(reversed(names)):  # one call each: every count ties
        op = b.op("c10d::allreduce_", 10 + 50 * i, 5, parent=st, step=0)
        b.kernel(name, 20 + 50 * i, 40, op, kind="communication")
    found = [f for f in advise(b.build()).items if f.rule == "comm-exposed"]
    exposed = [f for f in found if f.title.startswith("exposed communication")]
    assert len(exposed) == 1, [f.title for f in found]
    # the five most frequent names; all tie at one call, so the first five by name
    assert exposed[0].evidence["operators"] == names[:5]
