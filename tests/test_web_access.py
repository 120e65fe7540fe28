"""The dashboard on a shared box: no user reads through it what the file system refuses them
(issue 32, hole 3). Loopback is every local user, so a root gflowd's dashboard must know who asks:
over TCP from the client's socket (sock_diag netlink, else /proc/net/tcp), over run/web.sock
from SO_PEERCRED.

The attack, as the issue filed it: mallory (an ordinary uid) fetches ``/api/job?name=<alice's
job>`` and reads alice's 0640 log. Real root gflowd, real HTTP from forked children that dropped
to the users' uids, a real job running as alice.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401 - loaded before the children drop to other uids (getaddrinfo needs it)
import http.client
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import run_as, wait_for, wait_phase
from test_web_e2e import dashboard_address

ALICE, MALLORY = 65534, 65533
SECRET = "alice-private-output-7f3a"

root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: gflowd runs jobs as their owners, the test acts as two users"
)


@pytest.fixture
def shared_home():
    """A home anyone can traverse, with a sticky, world-writable spec dir (docs/multi-user.md)."""
    root = Path(tempfile.mkdtemp(prefix="gflow-web-"))
    os.chmod(root, 0o755)
    (root / "jobs").mkdir()
    os.chmod(root / "jobs", 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=10)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.socket_path)


def get(where: tuple[str, int] | str, path: str) -> tuple[int, str]:
    """(status, body) of one GET, over TCP (host, port) or the Unix socket at ``where``."""
    conn = _UnixConnection(where) if isinstance(where, str) else http.client.HTTPConnection(*where, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", errors="replace")
    finally:
        conn.close()


def get_as(uid: int, where: tuple[str, int] | str, path: str) -> tuple[int, str]:
    """The same GET from a child that dropped to ``uid`` (the answer travels back on its stderr)."""

    def work() -> int:
        status, body = get(where, path)
        sys.stderr.write(json.dumps({"status": status, "body": body}))
        return 0

    code, out = run_as(uid, work)
    assert code == 0, out
    answer = json.loads(out)
    return answer["status"], answer["body"]


def alice_job(home: Path) -> Path:
    manifest = home / "jobs" / "alice-train.yaml"
    manifest.write_text(f"metadata: {{name: alice-train}}\nspec:\n  command: [echo, {SECRET}]\n")
    os.chown(manifest, ALICE, ALICE)
    os.chmod(manifest, 0o640)
    return manifest


@root_only
@pytest.mark.parametrize("over", ["loopback", "web.sock"])
def test_another_users_job_log_is_refused(shared_home, gflowd, over):
    alice_job(shared_home)
    daemon = gflowd("--web-port", "0", home=shared_home)
    wait_phase(shared_home, "alice-train", "Succeeded", timeout=30, daemon=daemon)
    log = shared_home / "logs" / "alice-train.log"
    wait_for(lambda: SECRET in log.read_text(), message="alice's job to write its log")
    assert log.stat().st_uid == ALICE and not log.stat().st_mode & stat.S_IROTH  # the file system refuses mallory
    tcp = dashboard_address(daemon)
    where = tcp if over == "loopback" else str(shared_home / "run" / "web.sock")
    page = "/api/job?name=alice-train"
    status, body = get(tcp, page)  # root reads every log, as on the file system (and loads what the children use)
    assert status == 200 and SECRET in body, (status, body[:300])

    status, body = get_as(MALLORY, where, page)  # the attack
    assert status == 403, (status, body[:300])
    assert SECRET not in body
    error = json.loads(body)["error"]
    assert "alice-train" in error and "nobody" in error, error  # whose it is (uid 65534 is nobody)
    status, body = get_as(MALLORY, where, "/api/state")  # the shared view stays everyone's
    assert status == 200 and "alice-train" in body and SECRET not in body, (status, body[:300])
    status, body = get_as(ALICE, where, page)  # the owner reads her own log
    assert status == 200, (status, body[:300])
    assert SECRET in json.loads(body)["log"]["text"]
    if over == "web.sock":
        assert stat.S_IMODE(os.stat(where).st_mode) == 0o666  # every user may ask; the kernel says who asks


def test_peer_uid_over_tcp_comes_from_the_client_sockets_row():
    """The rule's two halves, without root: the client's uid from sock_diag (else /proc/net/tcp[6]),
    or SO_PEERCRED."""
    from controller.web.access import peer_uid_tcp, peer_uid_unix

    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            server = socket.socket(family)
            server.bind((address, 0))
        except OSError:
            continue  # no IPv6 here
        with server:
            server.listen()
            client = socket.create_connection(server.getsockname()[:2])
            accepted, peer = server.accept()
            with client, accepted:
                assert peer_uid_tcp(peer, accepted.getsockname()) == os.geteuid()  # sock_diag
                assert peer_uid_tcp(peer, accepted.getsockname(), proc_net="/proc/net") == os.geteuid()
        # an address no socket of this machine has: nobody is named
        assert peer_uid_tcp((address, 1), (address, 2)) is None
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_uid_unix(left) == os.geteuid()


@pytest.mark.parametrize(
    ("viewer", "owner", "allowed"),
    [
        (0, 1000, True),  # root reads every log
        (1000, 1000, True),  # the owner reads hers
        (1001, 1000, False),  # another user does not
        (None, 1000, False),  # a viewer the kernel could not name (from elsewhere): shared view only
        (1000, None, False),  # a job whose owner is unknown (manifest and log gone): root only
        (0, None, True),
    ],
)
def test_who_may_read_a_jobs_page(viewer, owner, allowed):
    from controller.web.access import may_read_job

    assert may_read_job(viewer, owner) is allowed


def test_peer_uid_reads_the_client_rows_uid_column(tmp_path):
    """As the kernel prints the table: the server's own row (uid 0) and the client's (uid 1000)."""
    from controller.web.access import peer_uid_tcp

    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (tmp_path / "tcp").write_text(
        header
        + "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1 0 100 0 0 10 0\n"
        + "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0 20 4 30 10 -1\n"
        + "   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 102 1 0 20 4 30 10 -1\n"
    )
    (tmp_path / "tcp6").write_text(
        header
        + "   0: 0000000000000000FFFF00000100007F:C350 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 "
        "00:00000000 00000000  1001        0 103 1 0 20 4 30 10 -1\n"
    )
    assert peer_uid_tcp(("127.0.0.1", 0xD431), ("127.0.0.1", 8080), proc_net=str(tmp_path)) == 1000
    assert peer_uid_tcp(("::ffff:127.0.0.1", 0xC350), ("::ffff:127.0.0.1", 8080), proc_net=str(tmp_path)) == 1001
    assert peer_uid_tcp(("127.0.0.1", 0xD432), ("127.0.0.1", 8080), proc_net=str(tmp_path)) is None
