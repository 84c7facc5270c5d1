"""``opscope trend RUN_DIR``: step time, throughput, memory and top operators over a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 30
LABEL_WIDTH = 24  # long operator names would squeeze the sparklines out of 80 columns


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """Unicode sparkline of ``values``, binned (median per bin) to at most ``width`` chars."""
    import numpy as np

    if not values:
        return ""
    x = np.asarray(values, dtype=float)
    if x.size > width:
        x = np.array([np.median(b) for b in np.array_split(x, width)])
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return SPARK[0] * x.size
    idx = np.clip(((x - lo) / (hi - lo) * (len(SPARK) - 1)).round().astype(int), 0, len(SPARK) - 1)
    return "".join(SPARK[i] for i in idx)


def _fmt(v: float | None, unit: str) -> str:
    from opscope.report import fmt

    if v is None:
        return "-"
    if unit in {"us", "us/step"}:
        return fmt.us(v) or "-"
    if unit == "bytes":
        return fmt.nbytes(v) or "-"
    return f"{v:,.1f}"


def register(app: typer.Typer) -> None:
    """Add the ``trend`` command to ``app``."""

    @app.command("trend")
    def trend_cmd(
        *,
        run_dir: Annotated[Path, typer.Argument(help="Run directory (opscope record --every N).")],
        json_out: bool = typer.Option(False, "--json", help="Print the trend as JSON."),
        html_out: Annotated[
            Path | None,
            typer.Option("--html", help="Also write an HTML report with the trend section."),
        ] = None,
    ) -> None:
        """Step time, throughput, memory and top operators over a run, with change points."""
        from opscope.trend import trend

        t = trend(run_dir)
        if html_out is not None:
            _write_html(html_out, {"trend": t.to_json()}, f"opscope trend: {run_dir}")
        if json_out:
            from opscope.cli.output import print_json

            print_json(t.to_json())
            return
        from opscope.cli.output import console

        j = t.to_json()
        console.print(f"[bold]{t.run_dir}[/]: {t.steps} steps, {t.samples.height} trace samples")
        # Plain lines, not a table: a table squeezes (truncates) the sparkline in a narrow terminal.
        w = LABEL_WIDTH
        typer.echo(f"{'metric':<{w}} {'trend':<{SPARK_WIDTH}} {'min':>9} {'median':>9} {'max':>9}")
        for metric, s in j["series"].items():
            vals = s["values"]
            if not vals:
                continue
            srt = sorted(vals)
            label = metric if len(metric) <= w else metric[: w - 1] + "…"
            lo, mid, hi = (_fmt(x, s["unit"]) for x in (srt[0], srt[len(srt) // 2], srt[-1]))
            typer.echo(f"{label:<{w}} {sparkline(vals):<{SPARK_WIDTH}} {lo:>9} {mid:>9} {hi:>9}")
        if not t.change_points:
            console.print("no change points (no shift that persists beyond the noise)")
        for c in t.change_points:
            ratio = f"×{c['ratio']:.2f}" if c["ratio"] else "from 0"
            console.print(
                f"change at step {c['step']}: {c['metric']} {_fmt(c['before'], c['unit'])} → "
                f"{_fmt(c['after'], c['unit'])} ({ratio}; steps {c['before_steps'][0]}-"
                f"{c['before_steps'][1]} vs {c['after_steps'][0]}-{c['after_steps'][1]})"
            )
            comp = c.get("comparison")
            if comp and "rows" in comp:
                names = ", ".join(
                    f"{r['key']} {_fmt(r['before_us'], 'us')}→{_fmt(r['after_us'], 'us')}"
                    for r in comp["rows"][:3]
                )
                console.print(
                    f"  traces {Path(comp['before_trace']).name} vs "
                    f"{Path(comp['after_trace']).name}: {names}"
                )
        for n in t.notes:
            console.print(f"[dim]note: {n}[/]")


def _write_html(path: Path, data: dict[str, object], title: str) -> None:
    """Write the HTML report through a temp file and a rename (never a half-written page)."""
    import os
    import tempfile

    from opscope.errors import OpscopeError
    from opscope.report.html import render_html

    page = render_html(data, title=title)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent or Path("."), prefix=".opscope-", suffix=".html")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a report is an ordinary file
        os.replace(tmp, path)
    except OSError as e:
        raise OpscopeError(f"cannot write the HTML report ({e.strerror})", path) from None
