"""Timeline viewer speed on a generated 1M-event profile, in headless Chromium.

Targets (issue 7): first paint <= 2 s, median frame time while zooming and panning <= 16 ms,
search answer <= 200 ms. The profile is generated with Polars, saved with ``Profile.save`` and
reopened with ``Profile.open`` (the cached columnar form ``opscope.load`` returns on a second
open), then served by the viewer; Chromium is Debian's (``/usr/bin/chromium``).

Figures printed:

- ``index``: building the viewer's index over the cached profile (server side, once);
- ``first_paint``: navigation start to the first canvas frame that drew slices;
- ``frame``: the page's draw time per frame (median / p95) over wheel zooms, key zooms and drags;
  ``raf_interval``: the median time between animation frames during the same input;
- ``search``: server time and browser round trip (median) for a few queries.

    python benchmarks/viewer_speed.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import polars as pl

from opscope.model import Profile

ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def generate(n_events: int) -> Profile:
    """Four host threads of nested ops (depth 0-3) and four device streams of kernels."""
    per_track = n_events // 8
    groups = per_track // 5  # one top op, two children, one grandchild each + ... = 5 events
    frames = []
    gdf = pl.DataFrame({"g": pl.int_range(0, groups, eager=True)})
    g = pl.col("g")
    shapes = [
        (0, 0, 40_000),
        (1, 1_000, 15_000),
        (1, 20_000, 15_000),
        (2, 2_000, 5_000),
        (3, 2_500, 800),
    ]
    for t in range(4):
        for j, (depth, off, dur) in enumerate(shapes):
            frames.append(
                gdf.select(
                    pl.lit("cpu_op").alias("kind"),
                    pl.format("aten::op_{}", (g * 7 + j * 13 + t) % 150).alias("name"),
                    pl.lit(100).alias("pid"),
                    pl.lit(1000 + t).alias("tid"),
                    (g * 50_000 + t * 1_000 + off).alias("ts_ns"),
                    pl.lit(dur).alias("dur_ns"),
                    pl.lit(depth).alias("depth"),
                )
            )
    for s in range(4):
        for j in range(5):
            frames.append(
                gdf.select(
                    pl.lit("kernel").alias("kind"),
                    pl.format("void kernel_{}<float, 128>(float*)", (g + j * 31 + s) % 400).alias(
                        "name"
                    ),
                    pl.lit(0).alias("pid"),
                    pl.lit(7 + s).alias("tid"),
                    (g * 50_000 + s * 2_000 + j * 9_000).alias("ts_ns"),
                    pl.lit(6_000).alias("dur_ns"),
                    pl.lit(0).alias("depth"),
                    pl.lit(0).alias("device"),
                    pl.lit(7 + s).alias("stream"),
                )
            )
    ev = pl.concat(frames, how="diagonal_relaxed").with_columns(
        pl.col("ts_ns") + 1_700_000_000_000_000_000, pl.lit(0).alias("rank")
    )
    ev = ev.sort("ts_ns").with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))
    return Profile.from_tables(meta={"sources": ["generated"]}, events=ev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    from opscope.report.viewer import make_server

    t = time.perf_counter()
    prof = generate(args.events)
    with tempfile.TemporaryDirectory() as d:
        prof.save(Path(d) / "p")
        prof = Profile.open(Path(d) / "p")
    print(f"profile: {prof.events.height:,} events ({time.perf_counter() - t:.1f} s to generate)")
    t = time.perf_counter()
    srv = make_server(prof, overlays=False)
    print(f"index: {time.perf_counter() - t:.2f} s")
    srv.start_background()
    idx = srv.index
    for q, case, word in [
        ("aten::op_42", True, True),
        ("kernel_7", False, False),
        ("OP_1", False, False),
    ]:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            r = idx.search(q, case=case, word=word)
            times.append((time.perf_counter() - t) * 1e3)
        print(
            f"search (server) {q!r}: {r['total']:,} matches, "
            f"median {statistics.median(times):.1f} ms"
        )
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=args.chromium, args=ARGS)
        ctx = b.new_context(viewport={"width": 1600, "height": 900}, bypass_csp=True)
        page = ctx.new_page()
        page.goto(srv.url)
        page.wait_for_function(
            "window.__opscope && window.__opscope.stats.firstPaintMs !== null", timeout=30_000
        )
        fp = page.evaluate("window.__opscope.stats.firstPaintMs")
        print(f"first paint: {fp:.0f} ms (target <= 2000)")
        page.wait_for_timeout(500)
        page.evaluate(
            """() => { const s = window.__opscope.stats; s.frames.length = 0; s.raf = [];
            let last = performance.now();
            const tick = (now) => { s.raf.push(now - last); last = now;
              if (s.rafOn) requestAnimationFrame(tick); };
            s.rafOn = true; requestAnimationFrame(tick); }"""
        )
        box = page.locator("#tl").bounding_box()
        cx, cy = box["x"] + box["width"] / 2, box["y"] + 120
        page.mouse.move(cx, cy)
        for _ in range(40):  # zoom in deep with the wheel
            page.mouse.wheel(0, -120)
            page.wait_for_timeout(16)
        for _ in range(20):
            page.keyboard.press("a")
            page.wait_for_timeout(16)
        page.mouse.down()
        for i in range(40):
            page.mouse.move(cx - i * 10, cy + (i % 5))
            page.wait_for_timeout(16)
        page.mouse.up()
        for _ in range(40):  # and back out
            page.mouse.wheel(0, 120)
            page.wait_for_timeout(16)
        for _ in range(20):
            page.keyboard.press("s")
            page.wait_for_timeout(16)
        page.wait_for_timeout(300)
        frames = page.evaluate("window.__opscope.stats.frames.slice()")
        raf = page.evaluate(
            "window.__opscope.stats.rafOn = false, window.__opscope.stats.raf.slice(1)"
        )
        fetches = page.evaluate("window.__opscope.stats.fetches")
        frames.sort()
        med = statistics.median(frames)
        p95 = frames[int(0.95 * (len(frames) - 1))]
        print(
            f"frame (draw time): median {med:.2f} ms, p95 {p95:.2f} ms over {len(frames)} frames "
            "(target median <= 16)"
        )
        print(
            f"raf_interval: median {statistics.median(raf):.2f} ms over {len(raf)} frames; "
            f"{fetches} slice fetches"
        )
        rt = []
        for q in ["aten::op_42", "kernel_7", "aten::op_1"]:
            page.fill("#search", "")
            page.evaluate("window.__opscope.stats.lastSearchMs = null")
            page.fill("#search", q)
            page.wait_for_function("window.__opscope.stats.lastSearchMs !== null", timeout=10_000)
            rt.append(page.evaluate("window.__opscope.stats.lastSearchMs"))
        print(
            f"search (browser round trip): median {statistics.median(rt):.0f} ms, "
            f"max {max(rt):.0f} ms (target <= 200)"
        )
        b.close()
    srv.shutdown()


if __name__ == "__main__":
    main()
