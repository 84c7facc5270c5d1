"""``opscope sweep matmul|linear``: time an operator at a shape and its variants."""

from __future__ import annotations

import typer

_VARIANTS_HELP = "Comma-separated: original, padded, transposed_b, contiguous_b, linear, addmm, "
_VARIANTS_HELP += "identity, dtype:bf16 ..."


def _print(df: object, json_out: bool, title: str) -> None:
    import polars as pl

    assert isinstance(df, pl.DataFrame)
    if json_out:
        from opscope.cli.output import print_json

        print_json({"sweep": df.to_dicts()})
        return
    from rich.table import Table

    from opscope.cli.output import console

    t = Table(title=title)
    hidden = {"device", "q1_us", "q3_us"}
    cols = [x for x in df.columns if x not in hidden]
    for c in cols:
        t.add_column(c, justify="left" if c in ("variant", "dtype") else "right")
    for r in df.iter_rows(named=True):
        t.add_row(*[f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols])
    console.print(t)


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command group to ``app``."""
    sweep_app = typer.Typer(
        help="Micro-benchmark an operator's shape and its candidate fixes.", no_args_is_help=True
    )
    app.add_typer(sweep_app, name="sweep")
    _register_conv(sweep_app)

    @sweep_app.command("matmul")
    def matmul_cmd(
        *,
        m: int = typer.Option(..., "--m", min=1, help="Rows of the left operand."),
        k: int = typer.Option(..., "--k", min=1, help="Inner dimension."),
        n: int = typer.Option(..., "--n", min=1, help="Columns of the result."),
        dtype: str = typer.Option("float32", "--dtype", help="fp32, tf32, fp16, bf16, fp64."),
        device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or npu."),
        pad_to: int | None = typer.Option(None, "--pad-to", min=1, help="Pad multiple."),
        variants: str = typer.Option(
            "original,padded,transposed_b,contiguous_b,linear", "--variants", help=_VARIANTS_HELP
        ),
        bias: bool = typer.Option(False, "--bias", help="Add a bias (linear/addmm fuse it)."),
        budget: float = typer.Option(2.0, "--budget", min=0.05, help="Seconds to spend."),
        json_out: bool = typer.Option(False, "--json", help="Print the table as JSON."),
    ) -> None:
        """[m, k] @ [k, n] and its variants, with median, IQR and speedup vs the original."""
        from opscope.advise.sweep import sweep_matmul

        vs = tuple(v.strip() for v in variants.split(",") if v.strip())
        df = sweep_matmul(
            m, k, n, dtype, device, variants=vs, pad_to=pad_to, bias=bias, budget_s=budget
        )
        _print(df, json_out, f"matmul {m}x{k} @ {k}x{n} {dtype}")

    @sweep_app.command("linear")
    def linear_cmd(
        *,
        m: int = typer.Option(..., "--m", min=1),
        k: int = typer.Option(..., "--k", min=1),
        n: int = typer.Option(..., "--n", min=1),
        dtype: str = typer.Option("float32", "--dtype"),
        device: str = typer.Option("auto", "--device"),
        budget: float = typer.Option(2.0, "--budget", min=0.05),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """The seed's layer: matmul(x, W.t()) + bias vs contiguous weight vs F.linear."""
        from opscope.advise.sweep import sweep_linear

        df = sweep_linear(m, k, n, dtype, device, budget_s=budget)
        _print(df, json_out, f"linear {m}x{k} -> {n} {dtype}")


def _register_conv(sweep_app: typer.Typer) -> None:
    @sweep_app.command("conv")
    def conv_cmd(
        *,
        n: int = typer.Option(..., "--n", min=1, help="Batch."),
        c: int = typer.Option(..., "--c", min=1, help="Input channels."),
        h: int = typer.Option(..., "--h", min=1, help="Height."),
        w: int = typer.Option(..., "--w", min=1, help="Width."),
        k: int = typer.Option(..., "--k", min=1, help="Output channels."),
        r: int = typer.Option(3, "--r", min=1, help="Kernel size."),
        dtype: str = typer.Option("float32", "--dtype"),
        device: str = typer.Option("auto", "--device"),
        pad_to: int | None = typer.Option(None, "--pad-to", min=1),
        budget: float = typer.Option(2.0, "--budget", min=0.05),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """conv2d and its variants: padded channels, channels_last."""
        from opscope.advise.sweep import sweep_conv

        df = sweep_conv(n, c, h, w, k, r, dtype, device, pad_to=pad_to, budget_s=budget)
        _print(df, json_out, f"conv2d [{n},{c},{h},{w}] * [{k},{c},{r},{r}] {dtype}")
