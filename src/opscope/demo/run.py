"""The demo workflow: record, analyse, advise, verify, fix, compare, report.

Everything printed is measured in this run. The steps are plain functions of their inputs so the
command (``opscope demo``) stays a thin caller and tests can check the summary it returns.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from opscope import units
from opscope.errors import OpscopeError
from opscope.model import Profile

#: Samples per step; with HIDDEN=1024 this makes linear_11's activations [256, 1024] x [1024, 256].
BATCH = 256


@dataclass(frozen=True)
class DemoConfig:
    """What ``opscope demo`` was asked to do."""

    out: Path
    device: str = "auto"
    steps: int = 3  # profiled (active) steps per model
    verify_budget_s: float = 8.0


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` / ``npu`` / ``cpu``, whichever is here; check an explicit one."""
    from opscope.advise._bench import resolve_device as _resolve

    try:
        return _resolve(device)
    except OpscopeError:
        raise
    except Exception as e:  # torch says why a device is unusable; keep it to one line
        raise OpscopeError(f"device {device!r} is not usable here: {e}") from e


def _train_fn(model_cls: type, device: str, total_steps: int, seed: int) -> Callable[[], None]:
    def train() -> None:
        import torch
        import torch.nn.functional as F

        from opscope.demo.model import make_batch

        torch.manual_seed(seed)
        model = model_cls().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        images, labels = make_batch(BATCH, device, seed)
        for _ in range(total_steps):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(images), labels)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()  # opscope's optimizer hook marks the step here, as under `opscope record`

    return train


def record_model(model_cls: type, out: Path, device: str, steps: int) -> Path:
    """Record ``steps`` profiled training steps of ``model_cls`` as ``opscope record`` does."""
    from opscope.record.api import RecordSettings
    from opscope.record.launcher import record_callable

    # lines: each op charged to the line that called it (the seed names `x = torch.matmul(...)`)
    settings = RecordSettings(wait=1, warmup=1, active=steps, lines=True)
    total = settings.wait + settings.warmup + settings.active
    result = record_callable(
        _train_fn(model_cls, device, total, seed=0),
        out,
        settings,
        command=["opscope", "demo", f"--device={device}", model_cls.__name__],
    )
    if result.exit_code != 0 or not result.traces:
        raise OpscopeError(f"recording {model_cls.__name__} failed ({result.status})", out)
    return result.run_dir


def linear_11_location() -> tuple[str, int, int]:
    """File and line range of ``SeedLinear.forward`` (the seed's ``linear_11`` code)."""
    from opscope.demo.model import SeedLinear

    lines, start = inspect.getsourcelines(SeedLinear.forward)
    return inspect.getsourcefile(SeedLinear) or "", start, start + len(lines) - 1


def charged_lines_text(l11: dict[str, Any]) -> str:
    """``model.py:40 `x = torch.matmul(x, self.weight.t())`, 41 `x += self.bias``` — the exact
    lines of linear_11 the profile charged, with their code."""
    file, first, _ = linear_11_location()
    try:
        code = Path(file).read_text(encoding="utf-8").splitlines()
    except OSError:
        code = []
    lines = sorted({int(o["line"]) for o in l11["ops"] if o.get("line") is not None})
    if not lines:
        return f"{Path(file).name}:{first}"
    parts = [f"{n} `{code[n - 1].strip()}`" if 0 < n <= len(code) else str(n) for n in lines]
    return f"{Path(file).name}:" + ", ".join(parts)


def _is_demo_line(file: Any, line: Any, first: int, last: int) -> bool:
    return isinstance(file, str) and file.endswith("demo/model.py") and first <= int(line) <= last


def linear_11_trace(profile: Profile) -> dict[str, Any]:
    """What the profile charges to linear_11's lines, forward and backward, by operator."""
    from opscope.analysis.attribution import charges

    _, first, last = linear_11_location()
    ch = charges(profile).filter(
        pl.col("file").str.ends_with("demo/model.py") & pl.col("line").is_between(first, last)
    )
    names = profile.events.select(pl.col("id").alias("op_id"), pl.col("name").alias("op"))
    by_op = (
        ch.join(names, on="op_id", how="left")
        .group_by("op", "is_backward", "line")
        .agg(pl.len().alias("calls"), pl.col("time_ns").sum().alias("time_us"))
        # ties in a defined order (the group-by's is not), the µs one division each (units)
        .sort(["time_us", "op", "is_backward", "line"], descending=[True, False, False, False])
    )
    by_op = by_op.with_columns(units.us(by_op.get_column("time_us")))
    fwd = float(ch.filter(~pl.col("is_backward").fill_null(False))["time_ns"].sum()) / 1000
    bwd = float(ch.filter(pl.col("is_backward").fill_null(False))["time_ns"].sum()) / 1000
    return {
        "lines": [first, last],
        "fwd_us": fwd,
        "bwd_us": bwd,
        "device_time": bool(ch["device"].any()) if ch.height else False,
        "ops": by_op.to_dicts(),
    }


def run_demo(cfg: DemoConfig, console: Console) -> dict[str, Any]:
    """Run the whole demo, printing each part as it is measured; return the JSON summary."""
    from opscope.advise.verify import verify
    from opscope.analysis.compare import compare
    from opscope.demo.model import FixedVisionModel, VisionModel
    from opscope.ingest import load
    from opscope.report.build import build_report
    from opscope.report.compare_render import render_rich
    from opscope.report.html import render_html, write_html

    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    cfg.out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    console.rule(f"[bold]opscope demo[/] on {device}")
    console.print(
        f"1. Recording {cfg.steps} training steps of the built-in VisionModel "
        f"(batch {BATCH}, hidden 1024) with the seed's profiler settings "
        "(shapes, stacks, modules, memory, FLOPs)…"
    )
    orig_dir = record_model(VisionModel, cfg.out / "original", device, cfg.steps)
    profile = load(orig_dir)
    # the same report as `opscope report` / `opscope html`: analyses, findings, source view
    report = build_report(profile, top=10)
    data = report.to_json()
    device_time = profile.has_device
    basis = "device kernel time" if device_time else "host time (this profile has no device)"

    console.rule("2. Hotspots")
    _print_rows(
        console,
        "operators",
        data["hotspots"]["ops"][:8],
        ["name", "calls", "total_us", "self_us", "pct"],
    )
    if data["hotspots"]["kernels"]:
        _print_rows(
            console,
            "kernels",
            data["hotspots"]["kernels"][:8],
            ["name", "calls", "total_us", "pct"],
        )

    console.rule(f"3. Time per source line ({basis})")
    sources = data.get("sources", [])
    _print_rows(
        console,
        "lines",
        sources[:8],
        ["file", "line", "function", "module", "fwd_us", "bwd_us", "total_us"],
    )
    file, first, last = linear_11_location()
    top_line = sources[0] if sources else None
    l11_on_top = bool(top_line and _is_demo_line(top_line["file"], top_line["line"], first, last))
    all_lines = report.sections["attribution"].lines.sort("total_ns", descending=True)
    rank = next(
        (
            i + 1
            for i, s in enumerate(all_lines.select("file", "line").iter_rows())
            if _is_demo_line(s[0], s[1], first, last)
        ),
        None,
    )
    l11 = linear_11_trace(profile)
    where = charged_lines_text(l11)
    console.print(
        f"linear_11 ({where}) is "
        + (
            "on top."
            if l11_on_top
            else f"line #{rank} of {all_lines.height} by time."
            if rank
            else "not charged."
        )
    )

    console.rule("4. Anomalies")
    anomalies = data.get("anomalies", [])
    if anomalies:
        _print_rows(
            console,
            "anomalies",
            anomalies,
            ["name", "input_shapes", "calls", "outlier_calls", "median_us", "outlier_median_us"],
        )
    else:
        console.print("none: every (operator, shape) group ran within its robust spread.")

    console.rule("5. Backward work traced to the forward layer")
    console.print(
        f"linear_11 at {where}: forward {l11['fwd_us'] / 1000:.2f} ms, "
        f"backward {l11['bwd_us'] / 1000:.2f} ms over {cfg.steps} steps ({basis})"
    )
    _print_rows(
        console,
        "operators charged to linear_11",
        l11["ops"][:10],
        list(l11["ops"][0]) if l11["ops"] else ["op"],
    )

    console.rule("6. Findings")
    from opscope.advise.rule import Findings

    findings = report.sections.get("findings") or Findings()  # a failed rule run is in errors
    _print_findings(console, findings.to_json())

    console.rule("7. Verification on this device")
    verified = verify(profile, findings, device=device, budget_s=cfg.verify_budget_s)
    ver_rows = [
        {
            "finding": f.title,
            "speedup": f.verified_speedup,
            "result": (f.verification or {}).get("summary", ""),
        }
        for f in verified
        if f.verification
    ]
    if ver_rows:
        _print_rows(console, "micro-benchmarks", ver_rows, ["finding", "speedup", "result"])
    else:
        console.print("no finding had a fix that can be measured in isolation.")

    console.rule("8. The fixed model, recorded and compared")
    fixed_dir = record_model(FixedVisionModel, cfg.out / "fixed", device, cfg.steps)
    fixed = load(fixed_dir)
    comp = compare(profile, fixed, names=("original", "fixed"))
    console.print(render_rich(comp, top=10))
    comp_json = comp.to_json()
    st = comp_json["step_time"]
    if device == "cpu":
        notes.append(
            "On a CPU the gains may be small or absent: the layout and alignment fixes target "
            "tensor cores and NPU cube units; the figures above are what this CPU measured."
        )
    if not st.get("significant"):
        notes.append("The step-time change is within the step-to-step noise of this run.")

    console.rule("9. Report")
    html_path = cfg.out / "report.html"
    final = report.with_sections(findings=verified, comparison=comp)
    write_html(html_path, render_html(final, title=f"opscope demo: {orig_dir.name}"))
    console.print(f"HTML report: {html_path}  (open it in any browser; it needs no network)")
    console.print(f"Timeline:    opscope view {orig_dir}")
    for n in notes:
        console.print(f"[yellow]note:[/] {n}")
    elapsed = time.perf_counter() - t0
    console.print(f"done in {elapsed:.1f} s")
    return {
        "device": device,
        "steps": cfg.steps,
        "runs": {"original": str(orig_dir), "fixed": str(fixed_dir)},
        "basis": "device" if device_time else "host",
        "hotspots": data["hotspots"],
        "sources": sources,
        "linear_11": {
            "file": file,
            "lines": l11["lines"],
            "charged_lines": sorted({int(o["line"]) for o in l11["ops"]}),
            "where": where,
            "on_top": l11_on_top,
            "rank_by_time": rank,
            "source_rows": _us_rows(
                all_lines.filter(
                    pl.col("file").str.ends_with("demo/model.py")
                    & pl.col("line").is_between(first, last)
                )
            ),
            "fwd_us": l11["fwd_us"],
            "bwd_us": l11["bwd_us"],
            "ops": l11["ops"],
        },
        "anomalies": anomalies,
        "findings": verified.to_json(),
        "comparison": comp_json,
        "report_html": str(html_path),
        "notes": notes,
        "elapsed_s": elapsed,
    }


def _us_rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    from opscope.analysis.hotspots import to_us

    return to_us(df).to_dicts()


def _print_rows(console: Console, title: str, rows: list[dict[str, Any]], cols: list[str]) -> None:
    from opscope.report import fmt

    if not rows:
        console.print(f"{title}: none")
        return
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in cols:
        numeric = any(isinstance(r.get(c), int | float) for r in rows)
        t.add_column(
            fmt.header(c), overflow="fold", max_width=60, justify="right" if numeric else "left"
        )
    for r in rows:
        t.add_row(*(Text(fmt.by_column(c, r.get(c)) or "—") for c in cols))
    console.print(t)


def _print_findings(console: Console, findings: list[dict[str, Any]]) -> None:
    if not findings:
        console.print("no findings.")
        return
    for i, f in enumerate(findings, 1):
        where = f"{Path(f['file']).name}:{f['line']}" if f.get("file") else "—"
        console.print(
            f"[bold]{i}. [{f['severity']}] {f['title']}[/]  ({f['rule']}; {where}; "
            f"module {f.get('module') or '—'}; saving ≈ {f['saving_us'] / 1000:.2f} ms/step, "
            f"{f['saving_pct']:.1f}% of the step)",
            highlight=False,
            markup=True,
        )
        if f.get("fix"):
            console.print(f["fix"].rstrip(), markup=False, highlight=False)
