"""The serving client's REST path against hostile servers on 127.0.0.1 (issue 36): ``--timeout`` bounds the whole
call, also when the server drips its answer; an oversized reply is refused; a reply that is JSON but not an object
of outputs ends in one line naming ``--server``. In process (no TensorFlow: the REST client is the standard
library), each server a thread; the time bounds are generous (timeout + 10 s), not tight."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from xlnet_tf.cli import serving_client as client
from xlnet_tf.errors import InputError

TIMEOUT = 2.0


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 whose POST handler is ``handle(handler)``."""

    def __init__(self, handle):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    handle(self)
                except OSError:  # the client hung up: what a timeout does
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _reply(body: bytes, status: int = 200, length=None):
    def handle(h):
        h.send_response(status)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        h.wfile.write(body)
    return handle


def _settings(server, **values):
    return client.ServingClientSettings(server=server, model_name="m", protocol="rest", timeout=TIMEOUT,
                                        texts=("Dull.",), **values).validate()


def _call(handle, **values):
    server = _Server(handle)
    try:
        start = time.monotonic()
        try:
            return client.predict_rest(_settings(server.address, **values), [{"sentence": "Dull."}]), \
                time.monotonic() - start
        except InputError as error:
            return error, time.monotonic() - start
    finally:
        server.close()


def _one_line(error, *parts):
    assert isinstance(error, InputError), error
    assert "\n" not in str(error)
    for part in parts:
        assert part in str(error), str(error)


def test_an_input_file_with_a_lone_surrogate_names_its_line(tmp_path):
    """JSON's "\\ud800" ended in a UnicodeEncodeError traceback when the request was encoded."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"sentence": "ok"}\n{"sentence": "ok \\ud800"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:2: 'sentence' holds a lone surrogate \(not valid Unicode\)"):
        client.read_rows(str(path))


def test_a_text_argument_that_is_not_utf8_is_refused_before_a_request():
    """Argument bytes that are not UTF-8 (a Latin-1 terminal's 'caf\\xe9') reached the request as a lone surrogate:
    over gRPC a UnicodeEncodeError traceback naming no argument, over REST sent on as JSON's "\\udce9"."""
    run = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.serving_client", "--server=127.0.0.1:9",
                          "--model_name=m", "--protocol=rest", b"caf\xe9", "fine"], capture_output=True)
    err = run.stderr.decode("utf-8", "replace")
    assert run.returncode == 1 and "Traceback" not in err, err
    assert "text 1 ('caf\\udce9'): not UTF-8" in err and "text 2" not in err, err


def test_a_good_reply_is_read():
    rows, _ = _call(_reply(json.dumps({"outputs": {"label": ["0"]}}).encode()))
    assert rows == [{"label": "0"}]


@pytest.mark.parametrize("drip", ["body", "headers"])
def test_timeout_bounds_the_whole_call_against_a_dripping_server(drip):
    """Content-Length 100000, then one byte a second: every read succeeds within a per-read timeout."""
    def handle(h):
        if drip == "headers":
            for byte in b"HTTP/1.0 200 OK\r\nContent-Length: 100000\r\n":
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
                time.sleep(0.5)
            return
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(60):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(1)

    error, took = _call(handle)
    _one_line(error, "--server=127.0.0.1:", f"within --timeout={TIMEOUT:g} s")
    assert took < TIMEOUT + 10, took


@pytest.mark.parametrize("how", ["announced", "streamed"])
def test_an_oversized_reply_is_refused(how):
    big = b"[" + b"0," * 400_000 + b"0]"  # 800 kB against --max_reply_mb=0.5
    handle = _reply(big) if how == "announced" else _reply(big, length=10**9)
    if how == "streamed":
        def handle(h):  # noqa: F811 - no Content-Length: read until the server closes
            h.send_response(200)
            h.end_headers()
            h.wfile.write(big)
    error, _ = _call(handle, max_reply_mb=0.5)
    _one_line(error, "--server=127.0.0.1:", "--max_reply_mb=0.5", "refused")


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b"42", b"null", b'"text"', b"{\"outputs\": 7}"])
def test_json_that_is_not_an_object_of_outputs_is_one_line(body):
    error, _ = _call(_reply(body))
    _one_line(error)
    assert "--server=127.0.0.1:" in str(error) or "the server's reply" in str(error)


def test_an_http_error_with_a_non_object_body_and_a_closed_port_are_one_line():
    error, _ = _call(_reply(b"[1]", status=500))
    _one_line(error, "--server=127.0.0.1:", "HTTP 500")
    error, _ = _call(_reply(b'{"error": "Servable not found"}', status=404))
    _one_line(error, "--model_name=m", "HTTP 404", "Servable not found")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening
    try:
        s = _settings(f"127.0.0.1:{closed.getsockname()[1]}")
        with pytest.raises(InputError, match="no REST model server answers") as caught:
            client.predict_rest(s, [{"sentence": "x"}])
        _one_line(caught.value)
    finally:
        closed.close()


def test_rows_from_rest_refuses_a_reply_that_is_not_an_object():
    for reply in ([1, 2, 3], 42, None):
        with pytest.raises(InputError, match="not an object of outputs"):
            client.rows_from_rest(reply, 1)


def test_a_url_as_server_and_a_reply_without_outputs_are_refused():
    """``--server`` is host:port: a URL (http://host:port) is named at once, not tried as
    http://http://host:port; a reply with no outputs (REST {"outputs": {}}, a gRPC response with none) is an error,
    not a row of nothing each."""
    s = client.ServingClientSettings(server="http://localhost:8501", model_name="m", texts=["x"])
    assert any("--server=http://localhost:8501: expected host:port, no scheme or path" in e for e in s.errors())
    assert not client.ServingClientSettings(server="localhost:8501", model_name="m", texts=["x"]).errors()
    for reply in ({"outputs": {}}, {}):
        with pytest.raises(InputError, match="the server's reply has no outputs"):
            client.rows_from_rest(reply, 2)
