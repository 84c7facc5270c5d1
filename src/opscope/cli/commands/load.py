"""``opscope load PATH``: read a trace (or directory) and print what was read."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from opscope.cli.options import MemoryBudget, apply_memory_budget, set_for_command
from opscope.cli.output import console, err_console, print_json


class _Bar:
    """A rich progress bar on stderr, shown only once a load has run for a moment."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.progress: Any = None
        self.tasks: dict[str, Any] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.progress is None:
            if time.monotonic() - self.t0 < 0.5 or not err_console.is_terminal:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeRemainingColumn(),
                console=err_console,
                transient=True,
            )
            self.progress.start()
        task = self.tasks.get(label)
        if task is None:
            task = self.progress.add_task(label, total=max(total, 1))
            self.tasks[label] = task
        self.progress.update(task, completed=done, total=max(total, 1))

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def register(app: typer.Typer) -> None:
    """Add the ``load`` command."""

    @app.command("load")
    def load_cmd(
        path: Annotated[
            Path, typer.Argument(help="Trace file (.json, .json.gz) or profile directory.")
        ],
        json_out: Annotated[
            bool, typer.Option("--json", help="Print the summary as JSON.")
        ] = False,
        salvage: Annotated[
            bool,
            typer.Option("--salvage", help="Recover the complete events of a truncated trace."),
        ] = False,
        no_cache: Annotated[
            bool, typer.Option("--no-cache", help="Neither read nor write the cache.")
        ] = False,
        cache_beside: Annotated[
            bool,
            typer.Option(
                "--cache-beside",
                help="Keep the cache beside the trace (.NAME.opscope/) instead of the user cache "
                "folder (same as OPSCOPE_CACHE_BESIDE=1).",
            ),
        ] = False,
        memory_budget: MemoryBudget = None,
        show_env: Annotated[
            bool,
            typer.Option(
                "--show-env", help="Also print the trace's environment variables, secrets included."
            ),
        ] = False,
    ) -> None:
        """Read a profile and print what was read."""
        from opscope.ingest import load
        from opscope.ingest.summary import summary

        apply_memory_budget(memory_budget)
        if cache_beside:
            set_for_command("OPSCOPE_CACHE_BESIDE", "1")
        bar = _Bar()
        t0 = time.perf_counter()
        try:
            prof = load(path, salvage=salvage, cache=not no_cache, progress=bar)
        finally:
            bar.close()
        elapsed = time.perf_counter() - t0
        s = summary(prof)
        env = None
        if show_env:  # re-read from the sources: profiles and caches only hold redacted values
            from opscope.doctor.env import trace_env

            env = trace_env(path, show_env=True)
        if json_out:
            print_json({**s, "load_s": round(elapsed, 4)} | ({"env": env} if show_env else {}))
            return
        from rich.table import Table

        t = Table(title=f"{path}", show_header=False, box=None)
        t.add_column("what", style="bold")
        t.add_column("value", justify="right")
        for key in (
            "format",
            "ranks",
            "events",
            "ops",
            "kernels",
            "python_frames",
            "steps",
            "fwd_bwd_links",
            "op_kernel_links",
            "memory_events",
            "stacks",
        ):
            t.add_row(key.replace("_", " "), str(s[key]))
        t.add_row("span", f"{s['span_us'] / 1000:.3f} ms")
        t.add_row("load time", f"{elapsed:.2f} s" + (" (cache)" if s["from_cache"] else ""))
        console.print(t)
        if s["salvaged"]:
            console.print(
                f"[yellow]salvaged[/] {s['salvaged']['events']} complete events "
                f"({s['salvaged']['reason']})"
            )
        for note in s["notes"]:
            console.print(f"[cyan]note[/] {note}")
        for reason, n in sorted(s["oddities"].items()):
            console.print(f"[yellow]tolerated[/] {n} × {reason}")
        if env is not None:
            from opscope.cli.commands.doctor import print_env

            print_env(env)
