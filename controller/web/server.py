"""The read-only web dashboard: a small HTTP server on a thread of gflowd.

It serves the page (``dashboard.html``, one static file with inline CSS and vanilla JS, read from
the package), ``/api/state``, the JSON the page polls, built by
:func:`controller.web.view.build_view` from the files gflowd already writes (``node.yaml``,
``run/index.json`` or ``status/*.yaml``, ``events.jsonl``), and ``/api/job?name=NAME``, one job's
status, events and log tail for the page's job view. It never writes anything and never
calls into the controller, so it cannot slow or break a reconcile pass beyond the CPU it uses.

Safety, in short:
- read-only: GET and HEAD only; every other method gets 405;
- no path traversal: URLs are matched against a fixed table; no URL is ever turned into a path;
- no HTML injection: job-provided strings travel as JSON and the page sets them as text
  (``textContent``), never as markup; the JSON has ``<`` escaped and a Content-Security-Policy
  allows only the page's own inline script (by hash) to run;
- loopback by default, and while bound to loopback the ``Host`` header must name loopback, so a
  web page elsewhere cannot read the dashboard through DNS rebinding;
- per-user: a job's page (its log and events) goes only to the job's owner and root, whose uid
  the kernel gives (``controller.web.access``: ``SO_PEERCRED`` on ``run/web.sock``, the client
  socket's owner from ``sock_diag`` over loopback); everyone else gets 403 and the shared view.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import ipaddress
import json
import logging
import math
import os
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from controller.client.read.events import aggregate
from controller.client.read.state import job_rows, manifest_owner_uid, manifest_owners, read_index, read_status
from controller.client.read.usage import read_usage
from controller.paths import Home, UnsafeName
from controller.util.yamlio import load_one, load_own
from controller.web import access
from controller.web.view import build_view

log = logging.getLogger("gflowd.web")
MAX_HOURS = 24.0 * 7
EVENTS_TAIL_BYTES = 1024 * 1024  # ~5,000 events: enough to fold a flood of identical ones (x1500)
LOG_TAIL_BYTES = 16 * 1024  # the job view's log tail
JOB_EVENTS_LIMIT = 50
MIN_REBUILD_INTERVAL = 1.0  # seconds: at most one rebuild per second, however many browsers poll
REBUILD_SHARE = 0.1  # and, for a large home, at most this share of one core's time
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class DashboardError(Exception):
    """The dashboard cannot start (e.g. the port is taken); the message is one line for users."""


class Forbidden(Exception):
    """The viewer may not read this job's page; the message says whose it is (a 403)."""


# -- reading the state files ---------------------------------------------------------------------------


def read_events_tail(path: Path, max_bytes: int = EVENTS_TAIL_BYTES) -> list[dict[str, Any]]:
    """The last events of ``events.jsonl`` (only its tail is read: the file may be 10 MiB)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read(max_bytes)
    except OSError:
        return []
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line is cut
    events = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            events.append(record)
    return events


def read_node(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        data = load_own(text)  # our own subset of YAML: fast
    except ValueError:
        try:
            data = load_one(text)
        except ValueError:
            return None
    return data if isinstance(data, dict) else None


def read_jobs(home: Home) -> tuple[dict[str, dict[str, Any]], float | None, dict[str, dict[str, Any]]]:
    """Every job's summary row, when gflowd last wrote the index, and the reservations' rows. The
    index is a cache of the status files; without it (gflowd never ran a pass, or it was removed)
    the status files are read (and no reservation is drawn)."""
    index = read_index(home)
    if index is not None:
        jobs, updated, reservations = index.get("jobs"), index.get("updated"), index.get("reservations")
        return (
            jobs if isinstance(jobs, dict) else {},
            updated if isinstance(updated, (int, float)) else None,
            reservations if isinstance(reservations, dict) else {},
        )
    return job_rows(home), None, {}


def read_log_tail(path: Path, max_bytes: int = LOG_TAIL_BYTES) -> tuple[str | None, bool]:
    """The end of a log (text, whether earlier output was cut); None when there is no log."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - max_bytes))
            data = handle.read(max_bytes)
    except OSError:
        return None, False
    cut = size > max_bytes
    if cut and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # from the first whole line
    return data.decode("utf-8", errors="replace"), cut


def job_detail(home: Home, name: str, viewer_uid: int | None) -> dict[str, Any] | None:
    """``/api/job``: what ``gflowctl describe`` and ``logs --tail`` show of job ``name``: its status
    document, its owner, its latest events (repeats folded) and the end of its log. None when no
    job has that name; UnsafeName for a name that is no job name; Forbidden when ``viewer_uid`` is
    neither the job's owner nor root (None: a viewer the kernel could not name)."""
    status = read_status(home, name)
    row = job_rows(home).get(name)
    if status is not None and status.get("kind") != "JobStatus":
        status = None  # a sweep's status: the view is for jobs
    if status is None and row is None:
        return None
    manifest = (row or {}).get("manifest") or ((status or {}).get("status") or {}).get("manifest")
    owner_uid = manifest_owner_uid(home, manifest)
    if owner_uid is None:  # the manifest is gone: the log's owner (the job wrote it as its user)
        try:
            owner_uid = os.stat(home.log_file(name)).st_uid
        except OSError:
            pass  # nobody's: root alone may look
    if not access.may_read_job(viewer_uid, owner_uid):
        raise Forbidden(access.refusal(name, owner_uid))
    events = [e for e in read_events_tail(home.events_file) if e.get("object") == f"job/{name}"]
    log_text, cut = read_log_tail(home.log_file(name))
    return {
        "name": name,
        "owner": manifest_owners(home)(manifest),
        "params": _sweep_params(home, name, row),
        "status": status or {"status": {k: v for k, v in (row or {}).items() if k in ("phase", "reason", "message")}},
        "events": aggregate(events)[-JOB_EVENTS_LIMIT:][::-1],
        "log": {"path": home.display(home.log_file(name)), "text": log_text, "cut": cut},
    }


def _sweep_params(home: Home, name: str, row: dict[str, Any] | None) -> str:
    """A sweep child's values, read as gflowd's user: a job's page goes only to its owner and root
    (``web/access.py``), who may both read the Sweep manifest."""
    from controller.client.read.state import sweep_params  # lazy: only a job page of a sweep child

    return sweep_params(home)(name, (row or {}).get("owner"))


class StateView:
    """The JSON of ``/api/state``, rebuilt only when a state file changed (or every 30 s, so the
    window of the timeline moves), and at most once per second, or less often when a rebuild is slow
    (thousands of jobs), so the dashboard never takes more than a tenth of gflowd's time. One
    cache serves every client."""

    def __init__(self, home: Home, clock: Callable[[], float] = time.time):
        self.home = home
        self.clock = clock
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self._cache: dict[float | None, tuple[tuple, float, str, bytes]] = {}
        self._min_interval = MIN_REBUILD_INTERVAL

    def _signature(self) -> tuple:
        def stat(path: Path) -> tuple | None:
            try:
                st = os.stat(path)
            except OSError:
                return None
            return (st.st_mtime_ns, st.st_size, st.st_ino)

        index = stat(self.home.index_file)
        # without an index, the status files are the source: their folder changes when one is replaced
        status = stat(self.home.status_dir) if index is None else None
        return (index, status, stat(self.home.node_file), stat(self.home.events_file), stat(self.home.gpu_usage_file))

    def render(self, hours: float | None) -> tuple[str, bytes]:
        """(ETag, JSON body) for a timeline of the last ``hours`` (None: fitted to the jobs)."""
        with self._lock:
            now = self.clock()
            cached = self._cache.get(hours)
            if cached is not None and now - cached[1] < self._min_interval:
                return cached[2], cached[3]
            key = (self._signature(), int(now // 30))
            if cached is not None and cached[0] == key:
                return cached[2], cached[3]
            began = time.monotonic()
            jobs, updated, reservations = read_jobs(self.home)
            owner = manifest_owners(self.home)
            owners = {
                name: owner(row.get("manifest"))
                for name, row in jobs.items()
                if row.get("phase") in ("Pending", "Running", "Rejected")
            }
            view = build_view(
                read_node(self.home.node_file),
                jobs,
                read_events_tail(self.home.events_file),
                now=now,
                hours=hours,
                updated=updated,
                host=self.host,
                owners=owners,
                usage=read_usage(self.home),
                reservations=reservations,
            )
            # "<" only occurs inside JSON strings: escaping it keeps the body inert even if some
            # client ever took it for HTML
            body = json.dumps(view, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c").encode()
            etag = '"' + hashlib.sha256(repr((key, hours)).encode()).hexdigest()[:20] + '"'
            self._cache[hours] = (key, now, etag, body)
            self._min_interval = max(MIN_REBUILD_INTERVAL, (time.monotonic() - began) / REBUILD_SHARE)
            if len(self._cache) > 16:  # a few window sizes are in use at a time
                self._cache = {hours: self._cache[hours]}
            return etag, body


# -- the page --------------------------------------------------------------------------------------------


def _csp_hash(page: str, tag: str) -> str:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.DOTALL)
    if match is None:
        raise RuntimeError(f"dashboard.html has no inline <{tag}>")
    digest = hashlib.sha256(match.group(1).encode()).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


def load_page() -> tuple[bytes, str]:
    """The page and a Content-Security-Policy that lets only its own inline script and style run."""
    page = resources.files("controller.web").joinpath("dashboard.html").read_text(encoding="utf-8")
    policy = (
        f"default-src 'none'; script-src {_csp_hash(page, 'script')}; style-src {_csp_hash(page, 'style')}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return page.encode("utf-8"), policy


# -- HTTP ------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "gflowd-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # keep-alive: the page polls
    timeout = 60  # an idle or stalled connection gives its thread back

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _refuse_method(self) -> None:
        self._send(405, b"read-only: only GET and HEAD\n", "text/plain; charset=utf-8", {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

    def version_string(self) -> str:
        return self.server_version

    _viewer: tuple[int | None] | None = None

    @property
    def viewer_uid(self) -> int | None:
        """Who asks, from the kernel, once per connection and only when a page needs it (the
        client's socket exists while the connection is open)."""
        if self._viewer is None:
            if self.server.unix:
                uid = access.peer_uid_unix(self.connection)
            elif _is_loopback(str(self.client_address[0])):
                uid = access.peer_uid_tcp(self.client_address, self.connection.getsockname())
            else:
                uid = None  # from elsewhere: the shared view only
            self._viewer = (uid,)
        return self._viewer[0]

    def address_string(self) -> str:
        return "web.sock" if self.server.unix else str(self.client_address[0])

    def _serve(self, head: bool) -> None:
        if not self._host_allowed():
            self._send(421, b"this dashboard answers only to localhost\n", "text/plain; charset=utf-8", head=head)
            return
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(
                200,
                self.server.page,
                "text/html; charset=utf-8",
                {"Content-Security-Policy": self.server.policy, "Cache-Control": "no-cache"},
                head=head,
            )
        elif url.path == "/api/state":
            try:
                self._state(url.query, head)
            except Exception:  # a bug, or a state file like none gflowd writes: say so, keep serving
                log.exception("dashboard: building /api/state failed")
                self._send(500, b'{"error": "internal error; see gflowd\'s log"}', "application/json", head=head)
        elif url.path == "/api/job":
            try:
                self._job(url.query, head)
            except Exception:
                log.exception("dashboard: building /api/job failed")
                self._send(500, b'{"error": "internal error; see gflowd\'s log"}', "application/json", head=head)
        elif url.path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8", head=head)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8", head=head)

    def _job(self, query: str, head: bool) -> None:
        names = parse_qs(query).get("name", [])
        try:
            detail = job_detail(self.server.state.home, names[-1], self.viewer_uid) if names else None
        except UnsafeName:
            detail = None
        except Forbidden as exc:
            self._send(403, json.dumps({"error": str(exc)}).encode(), "application/json", head=head)
            return
        if detail is None:
            self._send(404, json.dumps({"error": "no such job"}).encode(), "application/json", head=head)
            return
        body = json.dumps(detail, separators=(",", ":"), default=str).replace("<", "\\u003c").encode()
        self._send(200, body, "application/json", {"Cache-Control": "no-cache"}, head=head)

    def _state(self, query: str, head: bool) -> None:
        values = parse_qs(query).get("hours", [])
        hours: float | None = None  # absent or "fit": the window that fits the jobs there are
        if values and values[-1] != "fit":
            try:
                hours = float(values[-1])
            except ValueError:
                hours = math.nan
            if not (0 < hours <= MAX_HOURS):  # also false for nan
                body = json.dumps(
                    {"error": f"hours must be fit or a number above 0 and at most {MAX_HOURS:g}"}
                ).encode()
                self._send(400, body, "application/json", head=head)
                return
        etag, body = self.server.state.render(hours)
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if etag in (t.strip() for t in self.headers.get("If-None-Match", "").split(",")):
            self._send(304, b"", None, headers, head=True)
            return
        self._send(200, body, "application/json", headers, head=head)

    def _host_allowed(self) -> bool:
        if not self.server.loopback:
            return True  # the admin chose to listen beyond this machine
        host = self.headers.get("Host")
        if host is None:
            return True
        try:
            name = urlsplit("//" + host).hostname or ""
        except ValueError:
            return False
        return name in LOOPBACK_NAMES or name.endswith(".localhost")

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str | None,
        headers: dict[str, str] | None = None,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if status != 304:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head and status != 304:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    unix = False

    def __init__(self, address: tuple[str, int], state: StateView, loopback: bool):
        self.state = state
        self.loopback = loopback
        self.page, self.policy = load_page()
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        # a browser closing its tab mid-answer is routine: no traceback in gflowd's log
        log.debug("dashboard request from %s failed", client_address, exc_info=True)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN: a DNS query on a machine that may have none
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The same dashboard on ``run/web.sock`` (``curl --unix-socket``): every local user may
    connect (0666), and the kernel says who did (SO_PEERCRED)."""

    daemon_threads = True
    unix = True
    loopback = True  # only this machine reaches it; the Host check stays on

    def __init__(self, path: Path, state: StateView, page: bytes, policy: str):
        self.state, self.page, self.policy = state, page, policy
        try:
            os.unlink(path)  # a stale socket of a gflowd that was killed (run/ is gflowd's alone)
        except FileNotFoundError:
            pass
        super().__init__(str(path), _Handler)
        os.chmod(path, 0o666)

    def handle_error(self, request, client_address) -> None:
        log.debug("dashboard request on web.sock failed", exc_info=True)


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class Dashboard:
    """The server and its thread. ``port=0`` picks a free port; :attr:`url` says which."""

    def __init__(self, home: Home, address: str, port: int, clock: Callable[[], float] = time.time):
        self.home = home
        try:
            family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
        except (socket.gaierror, UnicodeError) as exc:
            raise DashboardError(f"--web-address {address}: not an address this machine has ({exc})") from None
        server_class = type("_Server", (_Server,), {"address_family": family})
        try:
            self._server = server_class((address, port), StateView(home, clock), _is_loopback(address))
        except OSError as exc:
            flag = f"--web-address {address}" if exc.errno == errno.EADDRNOTAVAIL else f"--web-port {port}"
            raise DashboardError(f"{flag}: cannot listen on {address}: {exc.strerror or exc}") from None
        self._unix: _UnixServer | None = None
        try:
            self._unix = _UnixServer(home.web_socket, self._server.state, self._server.page, self._server.policy)
        except OSError as exc:  # e.g. a path over the 107 bytes a socket's may have: TCP still serves
            log.warning("dashboard: no %s (%s); the TCP port serves alone", home.web_socket, exc.strerror or exc)
        self._thread: threading.Thread | None = None
        self._unix_thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    @property
    def serves_socket(self) -> bool:
        """Whether the pages are on ``run/web.sock`` too (``run/web.json`` says so: record/startup.py)."""
        return self._unix is not None

    def start(self) -> Dashboard:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5}, name="gflowd-web", daemon=True
        )
        self._thread.start()
        if self._unix is not None:
            self._unix_thread = threading.Thread(
                target=self._unix.serve_forever, kwargs={"poll_interval": 0.5}, name="gflowd-web-sock", daemon=True
            )
            self._unix_thread.start()
        log.info("web dashboard at %s (read-only)", self.url)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        if self._unix_thread is not None and self._unix is not None:
            self._unix.shutdown()
            self._unix_thread.join(5)
            self._unix_thread = None
        self._server.server_close()
        if self._unix is not None:
            self._unix.server_close()
        try:
            self.home.web_socket.unlink()
        except FileNotFoundError:
            pass


def start_dashboard(home: Home, address: str, port: int) -> Dashboard:
    """Listen and serve on a daemon thread; :class:`DashboardError` when it cannot listen."""
    return Dashboard(home, address, port).start()
