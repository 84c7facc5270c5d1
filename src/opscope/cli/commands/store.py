"""``opscope store add|list|trend``: the run store (DuckDB file or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

_STORE_HELP = (
    "Store: a DuckDB file path or postgresql://user:pass@host/db "
    "(default $XDG_DATA_HOME/opscope/runs.duckdb; env OPSCOPE_STORE)."
)


def _fmt_us(v: Any) -> str:
    from opscope.report.compare_render import fmt_us

    return "-" if v is None else fmt_us(float(v))


def register(app: typer.Typer) -> None:
    """Add the ``store`` command group to ``app``."""
    store_app = typer.Typer(
        help="Keep run summaries and watch them over time.", no_args_is_help=True
    )
    app.add_typer(store_app, name="store")

    @store_app.command("add")
    def add_cmd(
        *,
        run_dir: Annotated[Path, typer.Argument(help="Run directory (opscope record).")],
        tag: str | None = typer.Option(None, "--tag", help="A label for this run."),
        store: str | None = typer.Option(None, "--store", envvar="OPSCOPE_STORE", help=_STORE_HELP),
        json_out: bool = typer.Option(False, "--json", help="Print the stored summary as JSON."),
    ) -> None:
        """Summarise a run and add it; flag it when slower than the previous run of its model."""
        from opscope.trend.store import open_store

        with open_store(store) as s:
            row = s.add(run_dir, tag=tag)
        if json_out:
            from opscope.cli.output import print_json

            print_json(row)
            return
        msg = f"added run {row['id']}: median step {_fmt_us(row['step_median_us'])}"
        if row.get("prev_id") is not None:
            pct = row.get("change_pct")
            change = "" if pct is None else f" {pct:+.1f}%"
            msg += f"; vs run {row['prev_id']}:{change} ({row.get('verdict')})"
        typer.echo(msg)
        if row.get("slower"):
            typer.echo(
                f"SLOWER than run {row['prev_id']} of the same model on {row['device']} "
                "beyond its noise"
            )

    @store_app.command("list")
    def list_cmd(
        *,
        store: str | None = typer.Option(None, "--store", envvar="OPSCOPE_STORE", help=_STORE_HELP),
        json_out: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
    ) -> None:
        """Every stored run, oldest first."""
        from opscope.trend.store import open_store

        with open_store(store) as s:
            rows = s.list()
        if json_out:
            from opscope.cli.output import print_json

            print_json(rows)
            return
        from rich.table import Table

        from opscope.cli.output import console

        tab = Table(box=None)
        for c in ("id", "added", "tag", "commit", "device", "model", "step", "samples/s", "flag"):
            tab.add_column(c)
        for r in rows:
            sps = r.get("samples_per_s")
            tab.add_row(
                str(r["id"]),
                str(r["added_at"]),
                r.get("tag") or "",
                (r.get("git_commit") or "")[:10],
                r["device"],
                (r.get("model_hash") or "")[:10],
                _fmt_us(r.get("step_median_us")),
                "-" if sps is None else f"{sps:,.1f}",
                "SLOWER" if r.get("slower") else "",
            )
        console.print(tab)

    @store_app.command("trend")
    def trend_cmd(
        *,
        model: str | None = typer.Option(
            None, "--model", help="Structure hash (or prefix), root module type, or tag."
        ),
        metric: str = typer.Option(
            "step_time", "--metric", help="step_time, samples_per_s or mem_peak."
        ),
        store: str | None = typer.Option(None, "--store", envvar="OPSCOPE_STORE", help=_STORE_HELP),
        json_out: bool = typer.Option(False, "--json", help="Print the series as JSON."),
    ) -> None:
        """A metric over the stored runs (of one model), with a sparkline."""
        from opscope.cli.commands.trend import sparkline
        from opscope.trend.store import open_store

        with open_store(store) as s:
            rows = s.trend(model=model, metric=metric)
        if json_out:
            from opscope.cli.output import print_json

            print_json({"metric": metric, "model": model, "runs": rows})
            return
        vals = [float(r["value"]) for r in rows if r["value"] is not None]
        typer.echo(f"{metric} over {len(rows)} run(s): {sparkline(vals)}")
        for r in rows:
            v = r["value"]
            shown = _fmt_us(v) if metric == "step_time" else ("-" if v is None else f"{v:,.1f}")
            flag = "  SLOWER" if r["slower"] else ""
            typer.echo(
                f"  run {r['id']} {r['added_at']} {(r['git_commit'] or '')[:10]} "
                f"{r['tag'] or ''} {shown}{flag}"
            )
