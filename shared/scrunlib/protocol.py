"""The anchor's control protocol: one JSON request line, one JSON reply line, per connection.

The socket lives in the container's 0700 spool directory, and the anchor serves only peers
whose uid (SO_PEERCRED) is its own or root's. Requests: `{"op": "start"}`,
`{"op": "kill", "signal": 15}` (`delete` sends the anchor SIGTERM). Replies: `{"ok": true}` or
`{"ok": false, "error": "<message>"}`.

The client side (`request`, for `scrun start` and `kill`) uses the interpreter's `_socket`
and scrunlib.leanjson: the socket module imports enum and selectors, json imports re (their
cost: tools/lint-tree/lint_tree/hotpath.py). The anchor's server side has the socket module
anyway.
"""

from __future__ import annotations

import os
from _socket import AF_UNIX, SOCK_STREAM
from _socket import socket as raw_socket

from scrunlib import leanjson
from scrunlib.errors import AnchorError, reason
from scrunlib.spool import socket_address

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

MAX_MESSAGE = 64 * 1024


def request(socket_path: str, message: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one request to the anchor and return its reply; AnchorError when unreachable."""
    address, dirfd = socket_address(socket_path)
    try:
        conn = raw_socket(AF_UNIX, SOCK_STREAM)
        try:
            conn.settimeout(timeout)
            conn.connect(address)
            send_line(conn, message)
            reply = read_line(conn)
        finally:
            conn.close()
    except (FileNotFoundError, ConnectionRefusedError):
        raise AnchorError("the container's anchor is not running") from None
    except TimeoutError:
        raise AnchorError("the container's anchor did not answer in time") from None
    except (OSError, ValueError) as exc:
        why = reason(exc) if isinstance(exc, OSError) else str(exc)
        raise AnchorError(f"cannot talk to the container's anchor: {why}") from exc
    finally:
        if dirfd is not None:
            os.close(dirfd)
    if not reply.get("ok"):
        raise AnchorError(str(reply.get("error") or "the anchor refused the request"))
    return reply


def read_line(conn: raw_socket) -> dict[str, Any]:
    """Read one JSON object terminated by a newline (bounded in size)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_MESSAGE:
            raise ValueError("message too long")
    if not data:
        raise ValueError("connection closed without a message")
    decoded = leanjson.loads(data.decode())
    if not isinstance(decoded, dict):
        raise ValueError("message is not a JSON object")
    return decoded


def send_line(conn: raw_socket, message: dict[str, Any]) -> None:
    conn.sendall(leanjson.dumps(message).encode() + b"\n")


def listen(socket_path: str) -> raw_socket:
    """Bind and listen on `socket_path` (replacing a stale socket file). A raw socket, as
    the anchor listens before it has imported the socket module (`serving` makes it one)."""
    if os.path.lexists(socket_path):
        os.unlink(socket_path)
    address, dirfd = socket_address(socket_path)
    server = raw_socket(AF_UNIX, SOCK_STREAM)
    try:
        server.bind(address)
        os.chmod(socket_path, 0o600)
        server.listen(16)
    except OSError:
        server.close()
        raise
    finally:
        if dirfd is not None:
            os.close(dirfd)
    return server


def stop_listening(server: raw_socket | socket.socket, socket_path: str) -> None:
    """Close what `listen` opened and remove its socket file."""
    server.close()
    try:  # noqa: SIM105 (contextlib.suppress: not imported on this path)
        os.unlink(socket_path)
    except FileNotFoundError:
        pass


def serving(server: raw_socket) -> socket.socket:
    """The listening socket `listen` made, as a socket module socket (with `accept`)."""
    import socket

    return socket.socket(fileno=server.detach())


def peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid, from the kernel (SO_PEERCRED)."""
    import socket
    import struct

    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return int(uid)


def peer_allowed(conn: socket.socket) -> bool:
    """The anchor's own user or root. The kernel gives the peer's uid as the anchor's user
    namespace sees it: inside rootless podman's, uid 0 is the user, and any other user (the
    host's root too) shows as the overflow uid and is refused."""
    return peer_uid(conn) in (0, os.getuid())
