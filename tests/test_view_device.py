"""``opscope view --device NAME``: the viewer's overlays (the findings of the report's rules,
which cost ops against the device's peaks) use the named device's peaks when the trace has no
device properties; an unknown name is a one-line error, exit 2, before anything is served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import planted
from opscope.cli.app import main
from opscope.report import viewer


def _serve_once(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Patch the viewer so that ``opscope view`` builds its real server, computes the overlays
    the page would ask for, and returns instead of serving forever."""
    seen: list[dict[str, Any]] = []
    real = viewer.make_server

    def make(profile: Any, port: Any = 0, **kw: Any) -> Any:
        srv = real(profile, 0, **kw)

        def once() -> None:
            seen.append({"device": kw.get("device"), "overlays": srv.index.overlays()})

        srv.serve_forever = once  # type: ignore[method-assign]
        return srv

    monkeypatch.setattr(viewer, "make_server", make)
    return seen


def _rules(overlays: dict[str, Any]) -> set[str]:
    return {o["rule"] for o in overlays["overlays"] if o.get("kind") == "finding"}


def test_view_device_gives_the_overlays_its_peaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an MI300X-like tall-skinny GEMM without device properties: only its peaks find it
    path, _ = planted.write("tall-skinny", tmp_path, device_props=False)
    seen = _serve_once(monkeypatch)
    assert main(["view", str(path), "--no-browser"]) == 0
    assert main(["view", str(path), "--no-browser", "--device", "MI300X"]) == 0
    plain, named = seen
    assert plain["device"] is None and named["device"] == "MI300X"
    assert "gemm-memory-bound" not in _rules(plain["overlays"])
    assert "gemm-memory-bound" in _rules(named["overlays"])


def test_view_unknown_device_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = planted.write("clean", tmp_path)
    seen = _serve_once(monkeypatch)
    assert main(["view", str(path), "--no-browser", "--device", "TPUv9"]) == 2
    err = capsys.readouterr().err
    assert "unknown device 'TPUv9'" in err and "Traceback" not in err
    assert seen == []  # nothing was served
