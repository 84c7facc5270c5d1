"""The timeline viewer's local web server: its own page and a JSON API, on 127.0.0.1 only.

What it refuses, on purpose: any Host header other than ``127.0.0.1:PORT`` / ``localhost:PORT``
(403; a page on another site cannot reach the API through DNS rebinding), any path holding
``..`` or a backslash (403), and anything that is not one of its few fixed routes (404). It never
maps a URL to a file: assets are read from the package by name, and the data is the one Profile
it was given.
"""

from __future__ import annotations

import errno
import functools
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import msgspec

from opscope.model import Profile
from opscope.report.viewer.links import DEFAULT_PORT
from opscope.report.viewer.overlays import default_overlays
from opscope.report.viewer.query import TimelineIndex

_ASSETS = {
    "/": ("viewer.html", "text/html; charset=utf-8"),
    "/index.html": ("viewer.html", "text/html; charset=utf-8"),
    "/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def _asset(name: str) -> bytes:
    return resources.files("opscope.report.viewer").joinpath("assets", name).read_bytes()


class ViewerServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer over one :class:`TimelineIndex`."""

    daemon_threads = True

    def __init__(self, index: TimelineIndex, port: int = 0) -> None:
        self.index = index
        self.assets = {path: (_asset(name), ctype) for path, (name, ctype) in _ASSETS.items()}
        super().__init__(("127.0.0.1", port), _Handler)
        self.port = int(self.server_address[1])
        self.allowed_hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        # A browser that navigates away mid-answer closes its socket; that is not a bug.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        """The address to open in a browser."""
        return f"http://127.0.0.1:{self.port}/"

    def start_background(self) -> threading.Thread:
        """Serve on a daemon thread (tests, benchmarks); stop with :meth:`shutdown`."""
        t = threading.Thread(target=self.serve_forever, name="opscope-viewer", daemon=True)
        t.start()
        return t


def make_server(
    profile: Profile,
    port: int | None = 0,
    *,
    overlays: bool = True,
    device: str | None = None,
) -> ViewerServer:
    """Index ``profile`` and bind a viewer server to 127.0.0.1:``port`` (0: a free port;
    ``None``: :data:`DEFAULT_PORT`, the port the HTML report's finding links open, else a free
    one when that is taken).

    ``overlays``: highlight what ``build_report(profile, device=device)`` finds (findings,
    anomalies, critical path), computed on the page's first request for them.
    """
    fn = functools.partial(default_overlays, device=device) if overlays else None
    index = TimelineIndex(profile, overlays=fn)
    if port is not None:
        return ViewerServer(index, port)
    try:
        return ViewerServer(index, DEFAULT_PORT)
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        return ViewerServer(index, 0)


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"
    server_version = "opscope-viewer"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the URL only
        return

    def _send(self, status: int, body: bytes, ctype: str, *, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=60" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj: Any, status: int = 200) -> None:
        self._send(status, msgspec.json.encode(obj), "application/json")

    def _error(self, status: HTTPStatus, reason: str) -> None:
        self._json({"error": reason}, int(status))

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only server")

    do_PUT = do_DELETE = do_PATCH = do_POST

    def do_GET(self) -> None:
        host = self.headers.get("Host", "")
        if host not in self.server.allowed_hosts:
            self._error(HTTPStatus.FORBIDDEN, "host not allowed")
            return
        raw = self.path
        parts = urlsplit(raw)
        path = unquote(parts.path)
        bad = ".." in path or "\\" in path or not path.startswith("/") or path.startswith("//")
        if bad or raw.startswith("//") or ".." in unquote(raw.split("?", 1)[0]):
            self._error(HTTPStatus.FORBIDDEN, "path not allowed")
            return
        if path == "/favicon.ico":
            self._send(204, b"", "image/x-icon", cache=True)
            return
        if path in self.server.assets:
            body, ctype = self.server.assets[path]
            self._send(200, body, ctype)
            return
        if not path.startswith("/api/"):
            self._error(HTTPStatus.NOT_FOUND, "not found")
            return
        try:
            q = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            self._api(path[len("/api/") :], q)
        except (ValueError, KeyError) as e:
            self._error(HTTPStatus.BAD_REQUEST, f"bad request: {e}")

    def _api(self, route: str, q: dict[str, str]) -> None:
        idx = self.server.index
        if route == "tracks":
            self._json(idx.tracks_json())
        elif route == "slices":
            tracks = [int(t) for t in q["track"].split(",") if t.strip()]
            t0 = time.perf_counter()
            res = idx.slices(
                tracks,
                int(q["start_ns"]),
                int(q["end_ns"]),
                int(q.get("px", "1000")),
                folded=q.get("fold", "0") == "1",
            )
            res["server_ms"] = (time.perf_counter() - t0) * 1e3
            self._json(res)
        elif route == "search":
            t0 = time.perf_counter()
            res = idx.search(
                q.get("q", ""),
                case=q.get("case", "0") == "1",
                word=q.get("word", "0") == "1",
                limit=int(q.get("limit", "1000")),
                offset=int(q.get("offset", "0")),
            )
            res["server_ms"] = (time.perf_counter() - t0) * 1e3
            self._json(res)
        elif route == "range":
            sel = [int(t) for t in q["track"].split(",") if t.strip()] if q.get("track") else None
            self._json(
                idx.range_summary(
                    int(q["start_ns"]), int(q["end_ns"]), sel, top=int(q.get("top", "10"))
                )
            )
        elif route.startswith("event/"):
            ev = idx.event(int(route[len("event/") :]))
            if ev is None:
                self._error(HTTPStatus.NOT_FOUND, "no such event")
            else:
                self._json(ev)
        elif route.startswith("flows/"):
            self._json(idx.flows(int(route[len("flows/") :])))
        elif route == "overlays":
            self._json(idx.overlays())
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such endpoint")
