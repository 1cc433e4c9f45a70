"""`bias-discovery view`: serve a run's report on 127.0.0.1 and keep it current.

Each bias also has a page of its own, ``/bias/BIAS_ID`` (linked from its panel), and every
panel of a library bias a review form that posts to ``/bias/BIAS_ID/review`` (`run.reviews`:
the same as `bias-discovery review`); a form carries the server's secret token, so a page of
another site cannot post one. The page is re-rendered when the run's files change (``events.jsonl``, ``run.json``, the
library files, each iteration's validation and merge results: their size and mtime are
checked on each request), and the served page polls ``/version`` every two seconds and reloads itself when
the version moves on, so a report left open follows a run as it goes. Standard library
only (``http.server`` in a thread): nothing to install, nothing reachable from outside.

    server = ReportServer(run_dir, port=0).start()   # tests: any free port
    server.url                                       # http://127.0.0.1:PORT/
    server.stop()
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from pathlib import Path
from typing import Any, get_args
from urllib.parse import parse_qs, quote, unquote

from ..errors import BiasDiscoveryError, ConfigError
from ..run import RunDir
from ..run.reviews import ReviewDecision, default_reviewer

__all__ = ["MAX_FORM_BYTES", "ReportServer"]

MAX_FORM_BYTES = 64 * 1024
"""The largest review form the server reads (a note of a few pages)."""


def _stat_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class ReportServer:
    """An HTTP server for one run's live report. `start()` serves from a daemon thread;
    `serve_forever()` serves from the calling thread (Ctrl-C ends it); `stop()` ends both."""

    def __init__(self, run_dir: Path | str, host: str = "127.0.0.1", port: int = 8765) -> None:
        self.run_dir = Path(run_dir)
        self._lock = threading.Lock()
        self._key: tuple[Any, ...] | None = None
        self._html = ""
        self._version = ""
        self.renders = 0
        """How many times the page was rendered (tests check the cache works)."""
        self._bias_pages: dict[str, tuple[str, str]] = {}
        """Each bias page served: (version, html)."""
        self._token = secrets.token_urlsafe(24)
        self._thread: threading.Thread | None = None
        server = self  # the handler's view of us

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path in ("/", "/index.html", "/report.html"):
                    html, _ = server.page()
                    self._send(HTTPStatus.OK, "text/html; charset=utf-8", html.encode("utf-8"))
                elif path.startswith("/bias/"):
                    found = server.bias_page(unquote(path[len("/bias/") :]))
                    if found is None:
                        self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"no such bias in this run\n")
                    else:
                        self._send(HTTPStatus.OK, "text/html; charset=utf-8", found.encode("utf-8"))
                elif path == "/version":
                    _, version = server.page()
                    state = server.status()
                    body = json.dumps({"version": version, "status": state})
                    self._send(HTTPStatus.OK, "application/json", body.encode("utf-8"))
                else:
                    self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if not (path.startswith("/bias/") and path.endswith("/review")):
                    self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")
                    return
                status, message = server.review_from_form(
                    unquote(path[len("/bias/") : -len("/review")]),
                    self.headers.get("Origin"),
                    self.headers.get("Content-Length"),
                    self.rfile,
                )
                if status == HTTPStatus.SEE_OTHER:
                    self.send_response(status)
                    self.send_header("Location", message)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._send(status, "text/plain; charset=utf-8", (message + "\n").encode("utf-8"))

            def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # quiet: the terminal shows the URL, not every poll

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True

    # -- what is served -------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.httpd.server_address[0]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{self.port}/"

    def _files_key(self) -> tuple[Any, ...]:
        """Size and mtime of every file the report reads that a run changes as it goes."""
        watched = RunDir(self.run_dir).watched_paths()
        return tuple((str(p), _stat_key(p)) for p in watched)

    def status(self) -> str | None:
        try:
            state = RunDir(self.run_dir).read_state()
        except Exception:  # noqa: BLE001 - a half-written or odd run.json: just unknown
            return None
        return state.status if state else None

    def page(self) -> tuple[str, str]:
        """(html, version): re-rendered only when the watched files changed."""
        with self._lock:
            key = self._files_key()
            if key != self._key or not self._html:
                version = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
                self._html = self._render(version)
                self._version = version
                self._key = key
                self.renders += 1
            return self._html, self._version

    @property
    def review_form(self) -> dict[str, str]:
        """What the pages' review forms carry: this server's secret token (a page of another
        site cannot read it, so it cannot post a review) and the default reviewer."""
        return {"token": self._token, "reviewer": default_reviewer()}

    def review_from_form(
        self, bias: str, origin: str | None, length: str | None, body: BufferedIOBase
    ) -> tuple[HTTPStatus, str]:
        """Record the review a page's form posted for `bias`: (303, the bias page to go back to),
        or an error status with what was wrong. Refused: another origin, a wrong token, a body
        over `MAX_FORM_BYTES`, a decision that is not one, a bias the library does not hold."""
        allowed = {f"http://{host}:{self.port}" for host in ("127.0.0.1", "localhost")}
        if origin is not None and origin not in allowed:
            return HTTPStatus.FORBIDDEN, f"a review is recorded from this server's own pages, not from {origin}"
        try:
            size = int(length or "0")
        except ValueError:
            return HTTPStatus.BAD_REQUEST, "Content-Length is not a number"
        if size < 0 or size > MAX_FORM_BYTES:
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a review form is at most {MAX_FORM_BYTES} bytes"
        fields = parse_qs(body.read(size).decode("utf-8", errors="replace"), keep_blank_values=True)

        def field(name: str) -> str:
            return fields.get(name, [""])[0]

        if not hmac.compare_digest(field("token").encode(), self._token.encode()):
            return HTTPStatus.FORBIDDEN, "this form is not from this server (reload the page)"
        decision = field("decision")
        if decision not in get_args(ReviewDecision):
            return (
                HTTPStatus.BAD_REQUEST,
                f"decision must be one of {', '.join(get_args(ReviewDecision))}, got {decision!r}",
            )
        run = RunDir(self.run_dir)
        try:
            review = run.reviews.add(
                run.library.load_latest(),
                bias,
                decision,  # type: ignore[arg-type]
                note=field("note"),
                reviewer=field("reviewer") or None,
            )
        except BiasDiscoveryError as exc:
            return HTTPStatus.BAD_REQUEST, str(exc)
        return HTTPStatus.SEE_OTHER, f"/bias/{quote(review.bias_id)}"

    def bias_page(self, bias_id: str) -> str | None:
        """The live page of one bias (`render.render_bias_page`), re-rendered when the watched
        files changed; None when the run holds no such bias."""
        from .render import render_bias_page

        _, version = self.page()
        with self._lock:
            cached = self._bias_pages.get(bias_id)
            if cached is not None and cached[0] == version:
                return cached[1]
            try:
                html = render_bias_page(self.run_dir, bias_id, live=True, version=version, review_form=self.review_form)
            except ConfigError:
                return None
            except BiasDiscoveryError as exc:
                html = _error_page(str(exc), version)
            self._bias_pages[bias_id] = (version, html)
            return html

    def _render(self, version: str) -> str:
        from .render import render_report

        try:
            return render_report(self.run_dir, live=True, version=version, review_form=self.review_form)
        except BiasDiscoveryError as exc:
            return _error_page(str(exc), version)
        except Exception as exc:  # noqa: BLE001 - keep serving; the next change may fix it
            return _error_page(f"{type(exc).__name__}: {exc}", version)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> ReportServer:
        """Serve from a daemon thread and return at once."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="bias-discovery-view", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve from this thread until `stop()` or Ctrl-C (KeyboardInterrupt propagates)."""
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> ReportServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _error_page(message: str, version: str) -> str:
    """Shown while the run cannot be rendered (e.g. a file being replaced); it keeps polling."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>bias-discovery view: error</title>'
        "<style>body{font-family:system-ui,sans-serif;margin:40px;color:#1f2328}"
        "pre{background:#ffebe9;padding:12px;border-radius:6px;white-space:pre-wrap}</style></head><body>"
        "<h1>The report cannot be drawn right now</h1>"
        f"<pre>{escape(message)}</pre><p>This page retries when the run's files change.</p>"
        "<script>(function(){var v=" + json.dumps(version) + ";function p(){fetch('/version',{cache:'no-store'})"
        ".then(function(r){return r.json()}).then(function(j){if(j.version!==v){location.reload()}else{setTimeout(p,2000)}})"
        ".catch(function(){setTimeout(p,5000)})}setTimeout(p,2000)})();</script></body></html>"
    )
