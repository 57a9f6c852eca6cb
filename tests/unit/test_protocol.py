"""The anchor's control protocol: one JSON line each way, peers checked by uid."""

import threading

import pytest
from scrunlib import protocol
from scrunlib.errors import AnchorError


def serve_once(path, reply):
    server = protocol.serving(protocol.listen(path))
    seen: dict[str, object] = {}

    def handle():
        conn, _ = server.accept()
        with conn:
            seen["allowed"] = protocol.peer_allowed(conn)
            seen["request"] = protocol.read_line(conn)
            protocol.send_line(conn, reply)
        server.close()

    thread = threading.Thread(target=handle)
    thread.start()
    return thread, seen


def test_request_and_reply(tmp_path):
    path = str(tmp_path / "anchor.sock")
    thread, seen = serve_once(path, {"ok": True, "job": 5})
    assert protocol.request(path, {"op": "kill", "signal": 10}) == {"ok": True, "job": 5}
    thread.join()
    assert seen == {"allowed": True, "request": {"op": "kill", "signal": 10}}


def test_refusal_becomes_an_error(tmp_path):
    path = str(tmp_path / "anchor.sock")
    thread, _ = serve_once(path, {"ok": False, "error": "container has already stopped"})
    with pytest.raises(AnchorError, match="already stopped"):
        protocol.request(path, {"op": "start"})
    thread.join()


def test_socket_is_private(tmp_path):
    path = tmp_path / "anchor.sock"
    protocol.listen(str(path)).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_missing_anchor(tmp_path):
    with pytest.raises(AnchorError) as caught:
        protocol.request(str(tmp_path / "gone.sock"), {"op": "start"})
    assert str(caught.value) == "the container's anchor is not running"


def test_long_socket_paths_work(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    path = str(deep / "anchor.sock")
    thread, _ = serve_once(path, {"ok": True})
    assert protocol.request(path, {"op": "start"}) == {"ok": True}
    thread.join()
