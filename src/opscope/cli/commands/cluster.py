"""``opscope cluster PATH``: per-rank breakdown, collectives and wait, slow ranks and links."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from opscope.errors import OpscopeError

if TYPE_CHECKING:
    from opscope.analysis.compare import Comparison


def register(app: typer.Typer) -> None:
    """Add the ``cluster`` command to ``app``."""

    @app.command("cluster")
    def cluster_cmd(
        *,
        path: Annotated[Path, typer.Argument(help="Directory holding one trace per rank.")],
        engine: str = typer.Option("local", "--engine", help="local (process pool) or ray."),
        workers: int | None = typer.Option(
            None, "--workers", min=0, help="Processes (local) or CPUs of a local Ray instance."
        ),
        address: str | None = typer.Option(
            None,
            "--ray-address",
            "--address",
            help="An existing Ray cluster (HOST:6379 or auto; default $RAY_ADDRESS, else a local "
            "Ray) with --engine ray.",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print the analysis as JSON."),
        md: bool = typer.Option(False, "--md", help="Print Markdown."),
        compare_ranks: tuple[int, int] | None = typer.Option(
            None, "--compare-ranks", help="Also compare rank A with rank B op by op."
        ),
        top: int = typer.Option(20, "--top", min=1, help="Rows to show per table."),
        html_out: Annotated[
            Path | None,
            typer.Option(
                "--html",
                help="Also write an offline HTML page (ranks, stages, slow links, matrix heatmap).",
            ),
        ] = None,
    ) -> None:
        """Analyse a multi-rank run: step breakdown per rank, collectives and their wait,
        slow ranks, slow links and the gap between the fastest and slowest rank."""
        from opscope.cli.output import console, print_json

        if json_out and md:
            raise OpscopeError("--json and --md are exclusive: pick one output")
        if not path.exists():
            raise OpscopeError("no such file or directory", path)
        res = _run_with_progress(path, engine, workers, address, top)
        from opscope.cli.output import err_console

        for rank, why in res.failed:
            err_console.print(f"note: rank {rank} skipped: {why}", markup=False)
        comp = None
        if compare_ranks is not None:
            comp = _compare(path, compare_ranks)
        if html_out is not None:
            from opscope.report.cluster_html import to_html

            try:
                html_out.write_text(to_html(res), encoding="utf-8")
            except OSError as e:
                raise OpscopeError(f"cannot write the HTML page: {e.strerror}", html_out) from e
            err_console.print(f"wrote {html_out}", markup=False)
        if json_out:
            out = res.to_json()
            if comp is not None:
                out["compare_ranks"] = comp.to_json()
            print_json(out)
            return
        from opscope.report.sections_md import cluster_md

        text = cluster_md(res)
        if comp is not None:
            from opscope.report.compare_render import render_markdown

            text += "\n" + render_markdown(comp, top=top)
        if md:
            typer.echo(text, nl=False)
        else:
            from rich.markdown import Markdown

            console.print(Markdown(text))


def _run_with_progress(
    path: Path, engine: str, workers: int | None, address: str | None, top: int
) -> Any:
    """run_cluster with a progress bar of ranks done on a terminal's stderr."""
    from opscope.cli.output import err_console
    from opscope.cluster import run_cluster

    if not err_console.is_terminal:
        return run_cluster(path, engine=engine, workers=workers, address=address, top=top)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "ranks", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console
    ) as bar:
        task = bar.add_task("ranks", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return run_cluster(
            path, engine=engine, workers=workers, address=address, top=top, progress=tick
        )


def _compare(path: Path, ab: tuple[int, int]) -> Comparison:
    """Compare two ranks op by op: only those two ranks are loaded."""
    from opscope.analysis.compare import compare
    from opscope.ingest.multirank import list_ranks, read_inputs

    items = {r: (r, p, f) for r, p, f in list_ranks(path)}
    missing = [r for r in ab if r not in items]
    if missing:
        raise OpscopeError(f"no rank {missing[0]} (ranks: {sorted(items)})", path)
    pa, pb = read_inputs([items[ab[0]], items[ab[1]]], workers=1)
    return compare(pa, pb, names=(f"rank {ab[0]}", f"rank {ab[1]}"))
