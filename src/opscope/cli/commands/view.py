"""``opscope view PATH``: the timeline viewer, a local web app on 127.0.0.1."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.options import PeakDevice
from opscope.cli.output import console, err_console
from opscope.errors import OpscopeError


def register(app: typer.Typer) -> None:
    """Add the ``view`` command."""

    @app.command("view")
    def view_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file or profile directory.")],
        port: Annotated[
            int | None,
            typer.Option(
                "--port",
                help="Port on 127.0.0.1 (default 8642, where the HTML report's finding links "
                "point, else a free one; 0: a free one).",
            ),
        ] = None,
        no_browser: Annotated[
            bool, typer.Option("--no-browser", help="Print the address; do not open a browser.")
        ] = False,
        overlays: Annotated[
            bool,
            typer.Option("--overlays/--no-overlays", help="Run the analyses for the overlay list."),
        ] = True,
        device: PeakDevice = None,
    ) -> None:
        """Open a profile in the timeline viewer (search, flows, call stacks, overlays)."""
        from opscope.ingest import load
        from opscope.report.viewer import DEFAULT_PORT, make_server

        if port is not None and not 0 <= port <= 65535:
            raise OpscopeError(f"port {port} is out of range", path)
        if device is not None:
            from opscope.analysis.devices import check_device_name

            # an unknown name is the user's error now, not on the page's first overlay request
            check_device_name(device)
        profile = load(path)
        try:
            # the overlays' findings (roofline, GEMM/attention/conv efficiency) use its peaks
            server = make_server(profile, port, overlays=overlays, device=device)
        except OSError as e:
            raise OpscopeError(f"cannot listen on 127.0.0.1:{port}: {e.strerror}", path) from e
        console.print(f"opscope viewer: {server.url}  (Ctrl+C to stop)", highlight=False)
        if port is None and server.port != DEFAULT_PORT:
            taken = f"port {DEFAULT_PORT} is taken"
            err_console.print(f"{taken}: the HTML report's links will not reach this viewer")
        if not no_browser:
            try:
                webbrowser.open(server.url)
            except webbrowser.Error:
                err_console.print("could not open a browser; open the address above")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
