"""Shared fixtures. Real traces come from ../shared/traces and tests skip when it is absent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# In CI every property test draws the same examples run after run (a seed from the test's name):
# a red CI run is then a real regression, reproducible, never the draw of the day. Locally the
# draws stay random, to keep finding new cases (OPSCOPE_HYPOTHESIS=ci to replay CI's).
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI") or os.environ.get("OPSCOPE_HYPOTHESIS") == "ci":
    settings.load_profile("ci")

SHARED_TRACES = Path(
    os.environ.get(
        "OPSCOPE_SHARED_TRACES", Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    )
)


#: Every Kineto trace file of the shared traces (relative paths), the 128-rank job's two ranks
#: included.
SHARED_KINETO_FILES: tuple[str, ...] = (
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "gpu/hta_amd_mi250_minitoy.json.gz",
    "gpu/hta_nccl_a100_rank0of2.json.gz",
    "gpu/hta_triton_a100.json.gz",
    "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    "gpu/tracelens_h100_bert_small.json.gz",
    "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    "compare/hta_trace_diff_test_v100_rank1of2.json.gz",
    "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of real traces; skips the test when it is not there."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"shared traces not found at {SHARED_TRACES}")
    return SHARED_TRACES


def shared_trace(rel: str) -> Path:
    """One shared trace by relative path; skips when absent."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    return p


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """opscope's user cache folder moved under ``tmp_path`` (``$XDG_CACHE_HOME``), and
    ``OPSCOPE_CACHE_DIR`` unset: tests never touch the real ``~/.cache``."""
    d = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(d))
    monkeypatch.delenv("OPSCOPE_CACHE_DIR", raising=False)
    return d / "opscope"


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every test's cache goes to a session temporary folder, never the real ``~/.cache`` nor
    beside a trace (``OPSCOPE_CACHE_BESIDE`` unset); tests wanting more use ``user_cache``.
    What a CLI command run through ``CliRunner`` (not ``main()``, which restores it) set in
    the environment for its run (``--memory-budget``...) is put back after the test."""
    root = tmp_path_factory.getbasetemp() / "session-xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    monkeypatch.delenv("OPSCOPE_CACHE_DIR", raising=False)
    monkeypatch.delenv("OPSCOPE_CACHE_BESIDE", raising=False)
    yield
    from opscope.cli.options import restore_environment

    restore_environment()
