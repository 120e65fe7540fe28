"""Who is asking the dashboard, and what they may read (docs/dashboard.md, "Safety").

On a shared machine loopback is every local user, so "the dashboard is on loopback" says nothing
about who asks. The kernel knows: over the Unix socket ``run/web.sock`` it hands the peer's uid
to us (``SO_PEERCRED``); over TCP from this machine the client's end of the connection is a
socket whose owner ``sock_diag`` netlink (as ``ss -e`` shows it) or ``/proc/net/tcp[6]`` names
(an SSH tunnel's end is the user's own sshd process, so a tunnelled browser is that user too). A request from elsewhere (the
admin chose ``--web-address 0.0.0.0``) has no uid: it gets the shared view only.

The rule itself is :func:`may_read_job`: a job's page (its log, its events) is for the job's
owner and root; everyone gets the shared view (GPUs, queue, reasons), which holds no log, env or
manifest text. This module does no HTTP; the server asks it.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import socket
import struct

ROOT = 0


def peer_uid_unix(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix stream socket (the kernel's word)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def peer_uid_tcp(peer: tuple, local: tuple, proc_net: str | None = None) -> int | None:
    """The uid owning the client's end of a TCP connection from this machine (its local address
    is the peer's, its remote address ours). None when the peer is not on this machine (or its
    socket is gone: the client left). Asked of the kernel by ``sock_diag`` netlink, an exact lookup
    of that one socket (~0.02 ms, what ``ss`` uses); where that fails, the tables in
    ``/proc/net`` are read (``proc_net``: only those, for tests)."""
    try:
        peer_ip, peer_port = _plain(ipaddress.ip_address(peer[0])), int(peer[1])
        local_ip, local_port = _plain(ipaddress.ip_address(local[0])), int(local[1])
    except (ValueError, IndexError, TypeError):
        return None
    if proc_net is None:
        try:
            return _sock_diag_uid(peer_ip, peer_port, local_ip, local_port)
        except OSError:
            proc_net = "/proc/net"
    return _proc_net_uid(peer_ip, peer_port, local_ip, local_port, proc_net)


_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, _NLMSG_ERROR = 4, 20, 1, 2
_NO_COOKIE = struct.pack("=II", 0xFFFFFFFF, 0xFFFFFFFF)


def _sock_diag_uid(peer_ip, peer_port: int, local_ip, local_port: int) -> int | None:
    """One ``inet_diag_req_v2`` for the client's socket by its four-tuple (no dump, no race with
    sockets coming and going); an IPv4 client may be an AF_INET socket or a mapped AF_INET6 one."""
    tries = [(socket.AF_INET, peer_ip, local_ip)] if peer_ip.version == 4 else []
    tries.append((socket.AF_INET6, _mapped(peer_ip), _mapped(local_ip)))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(2)
        for seq, (family, source, destination) in enumerate(tries, 1):
            sockid = (
                struct.pack("!HH", peer_port, local_port)
                + source.packed.ljust(16, b"\0")
                + destination.packed.ljust(16, b"\0")
                + struct.pack("=I", 0)
                + _NO_COOKIE
            )
            request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
            sock.send(struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, seq, 0) + request)
            answer = sock.recv(65536)
            _length, kind = struct.unpack_from("=IH", answer)
            if kind == _NLMSG_ERROR:
                continue  # ENOENT: no such socket in this family
            # inet_diag_msg: family, state, timer, retrans (4 bytes), the socket id (48), expires,
            # rqueue, wqueue (12), then uid
            return struct.unpack_from("=I", answer, 16 + 4 + 48 + 12)[0]
    return None


def _mapped(ip) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed) if ip.version == 4 else ip


def _proc_net_uid(peer_ip, peer_port: int, local_ip, local_port: int, proc_net: str) -> int | None:
    """The same from ``/proc/net/tcp[6]``, matched as the kernel prints the rows (not parsed). A
    slower read (~13 ms with 2,000 sockets), and one that can miss a row while the table changes
    under it, so it is the fallback only."""
    for table in ("tcp", "tcp6"):
        wanted_local = _kernel_text(peer_ip, peer_port, table)
        wanted_remote = _kernel_text(local_ip, local_port, table)
        if wanted_local is None or wanted_remote is None:
            continue
        try:
            with open(os.path.join(proc_net, table), "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        at = data.find(wanted_local + b" " + wanted_remote + b" ")
        if at < 0:
            continue
        end = data.find(b"\n", at)
        fields = data[data.rfind(b"\n", 0, at) + 1 : end if end >= 0 else len(data)].split()
        try:
            return int(fields[7])
        except (IndexError, ValueError):
            continue
    return None


def _kernel_text(ip, port: int, table: str) -> bytes | None:
    """An address as ``/proc/net/<table>`` prints it: each 32-bit word of the address as a number
    in the machine's byte order, in hex, then the port: ``0100007F:1F90`` is 127.0.0.1:8080. An
    IPv4 address in ``tcp6`` is the mapped one (``::ffff:a.b.c.d``, a dual-stack socket's view)."""
    if table == "tcp6":
        packed = _mapped(ip).packed
    elif ip.version == 4:
        packed = ip.packed
    else:
        return None
    words = "".join(f"{struct.unpack('=I', packed[i : i + 4])[0]:08X}" for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}".encode()


def _plain(ip) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``, how a dual-stack socket sees IPv4) as IPv4."""
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def may_read_job(viewer_uid: int | None, owner_uid: int | None) -> bool:
    """A job's log and events are its owner's and root's: what the file system gives them anyway."""
    if viewer_uid is None:
        return False
    return viewer_uid == ROOT or (owner_uid is not None and viewer_uid == owner_uid)


def refusal(name: str, owner_uid: int | None) -> str:
    """The 403's one line: whose the job is and what to do instead."""
    if owner_uid is None:
        return f"job/{name} has no owner left (its manifest and log are gone): only root sees its page"
    try:
        owner = pwd.getpwuid(owner_uid).pw_name
    except KeyError:
        owner = f"uid {owner_uid}"
    return (
        f"job/{name} is {owner}'s: its log and events are shown only to {owner} and root; "
        f"the shared view (GPUs, queue, reasons) is for everyone"
    )
