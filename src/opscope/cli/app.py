"""Entry point of the ``opscope`` command.

Each sub-command lives in its own module under :mod:`opscope.cli.commands` and exposes
``register(app: typer.Typer) -> None``; they are discovered here, so adding a command is adding a
file. Errors a user can cause (:class:`~opscope.errors.OpscopeError`) become one line on stderr
and their exit code (2 for bad input); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from opscope import __version__
from opscope.cli.options import restore_environment
from opscope.cli.output import err_console
from opscope.errors import OpscopeError

app = typer.Typer(
    name="opscope",
    help="Find out why a PyTorch model runs slower than it should, and prove the fix.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"opscope {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """opscope: profile, analyse, advise, verify, compare."""


def _register_commands() -> None:
    from opscope.cli import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_commands()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, from the console script, exits with) the exit code."""
    try:
        return _run(argv)
    finally:
        restore_environment()


def _run(argv: list[str] | None) -> int:
    try:
        # in non-standalone mode click returns a command's typer.Exit code instead of raising it
        result = app(args=argv, prog_name="opscope", standalone_mode=False)
    except OpscopeError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, markup=True, soft_wrap=True)
        return e.exit_code
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except typer.BadParameter as e:
        e.show()
        return 2
    except Exception as e:  # click's usage errors arrive here in non-standalone mode
        show = getattr(e, "show", None)
        code = getattr(e, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        raise
    return result if isinstance(result, int) else 0


def _console_main() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _console_main()
