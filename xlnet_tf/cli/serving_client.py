"""A client of a TF Serving model server for this stack's exports: raw text in, one JSON line of outputs per row.

    # gRPC (port 8500; needs `pip install xlnet_tf[serving]`: tensorflow-serving-api)
    python -m xlnet_tf.cli.serving_client --server=localhost:8500 --model_name=sentiment "A gripping film." "Dull."
    # REST (port 8501; the standard library only)
    python -m xlnet_tf.cli.serving_client --protocol=rest --server=localhost:8501 --model_name=sentiment "Dull."
    # pair tasks, SQuAD, RACE: one JSON object per line, keyed by the signature's inputs
    python -m xlnet_tf.cli.serving_client --server=localhost:8500 --model_name=squad --input_file=questions.jsonl
    #   {"question": "Who wrote it?", "context": "It was written by Ann in 1990."}

Each row's outputs are printed as one JSON line (``{"label": "1", "probabilities": [0.1, 0.9], "logits": [...]}``;
SQuAD: ``{"text": "Ann", "start_char": 18, ...}``), strings decoded as UTF-8. The requests are what the server
receives: gRPC ``PredictionService.Predict`` with a ``PredictRequest`` whose inputs are ``tf.string`` tensors
(``tf.make_tensor_proto``), REST ``POST /v1/models/<name>[/versions/<v>]:predict`` with the columnar
``{"signature_name": ..., "inputs": {name: [...]}}`` body. ``predict_request``/``rest_body`` build them and
``rows_from_response``/``rows_from_rest`` read the replies, for a Python client of its own.

A server that does not answer, an unknown model or signature, or a request the model refuses ends in one line
naming ``--server``/``--model_name`` and the server's message, exit 1. ``--timeout`` bounds the whole call, also
against a server that answers one byte at a time; a REST reply that is not a JSON object of outputs, or is larger
than ``--max_reply_mb``, is refused the same way.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional, Sequence

from xlnet_tf import io_utils
from xlnet_tf.cli import flags as cli
from xlnet_tf.errors import InputError
from xlnet_tf.training.settings import Settings, setting


@dataclasses.dataclass
class ServingClientSettings(Settings):
    server: Optional[str] = setting(None, "The model server, host:port (TF Serving: gRPC 8500, REST 8501).")
    model_name: Optional[str] = setting(None, "The model's name on the server (TF Serving's --model_name).")
    protocol: str = setting("grpc", "gRPC (tensorflow-serving-api) or REST (JSON over HTTP).",
                            choices=("grpc", "rest"))
    signature_name: str = setting("serving_default", "The signature to call.")
    model_version: Optional[int] = setting(None, "A version to ask for (default: the server's latest).")
    input_file: Optional[str] = setting(None, "JSONL: one object per row, keyed by the signature's inputs "
                                              "(sentence2, question/context, article/question/options).")
    field: str = setting("sentence", "The input the texts given as arguments go to.")
    timeout: float = setting(30.0, "Seconds the whole call may take (connecting, sending, the complete answer).")
    max_reply_mb: float = setting(256.0, "REST: the largest reply accepted, in MiB (a larger one is refused).")
    texts: tuple = setting((), "Raw texts, one row each.", positional="rest")

    def required(self) -> tuple:
        return ("server", "model_name")

    def input_files(self) -> tuple:
        return ("input_file",)

    def errors(self) -> list:
        errors = super().errors()
        if self.server and not _host_port(self.server):
            errors.append(f"--server={self.server}: expected host:port, no scheme or path (e.g. localhost:8500)")
        if bool(self.texts) == bool(self.input_file):
            errors.append("give texts as arguments or --input_file, one of the two")
        # Python reads argument bytes that are not UTF-8 as lone surrogates, which no request can carry.
        errors += [f"text {i} ({text!r}): not UTF-8 (arguments are read as UTF-8; --input_file takes a JSONL file)"
                   for i, text in enumerate(self.texts, 1) if io_utils.lone_surrogate(text)]
        if self.timeout <= 0:
            errors.append(f"--timeout={self.timeout}: must be positive")
        if self.max_reply_mb <= 0:
            errors.append(f"--max_reply_mb={self.max_reply_mb}: must be positive")
        return errors


def _host_port(server: str) -> bool:
    host, _, port = server.rpartition(":")
    return bool(host) and port.isdigit() and "/" not in server  # not a URL: no scheme, no path


# -- rows <-> requests and replies (no network) ---------------------------------------------------------------------

def columns(rows: Sequence[dict]) -> dict:
    """The signature's inputs from rows of ``{input: text}`` (RACE's ``options``: a list per row); every row must
    name the same inputs."""
    if not rows:
        raise InputError("no rows to send")
    names = sorted(rows[0])
    for i, row in enumerate(rows):
        if sorted(row) != names:
            raise InputError(f"row {i + 1} has inputs {sorted(row)}, row 1 has {names}: every row needs the same")
    out = {name: [row[name] for row in rows] for name in names}
    for name, values in out.items():
        if len({len(v) if isinstance(v, list) else -1 for v in values}) > 1:
            raise InputError(f"input {name!r}: every row needs the same number of texts (a tensor is rectangular)")
    return out


def predict_request(model_name: str, rows: Sequence[dict], signature_name: str = "serving_default",
                    model_version: Optional[int] = None):
    """The gRPC ``PredictRequest`` for ``rows``: each input a ``tf.string`` tensor [rows] (or [rows, choices])."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if model_version is not None:
        request.model_spec.version.value = model_version
    for name, values in columns(rows).items():
        encoded = np.array([[v.encode("utf-8") for v in x] if isinstance(x, list) else x.encode("utf-8")
                            for x in values], dtype=object)
        request.inputs[name].CopyFrom(tf.make_tensor_proto(encoded, dtype=tf.string))
    return request


def rest_body(rows: Sequence[dict], signature_name: str = "serving_default") -> dict:
    """The REST predict body for ``rows`` (the columnar "inputs" form: one list per input)."""
    return {"signature_name": signature_name, "inputs": columns(rows)}


def _row_values(value, n: int) -> list:
    """A batched output's rows as JSON values (bytes decoded as UTF-8, as TF Serving's REST API does)."""
    def plain(v):
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    values = plain(value.tolist() if hasattr(value, "tolist") else value)
    if not isinstance(values, list) or len(values) != n:
        raise InputError(f"the server's output has {len(values) if isinstance(values, list) else 'no'} rows, "
                         f"the request {n}")
    return values


def rows_from_outputs(outputs: dict, n: int) -> list:
    """``{output: batched values}`` as ``n`` rows of ``{output: value}``."""
    if not outputs:
        raise InputError("the server's reply has no outputs")
    by_name = {name: _row_values(value, n) for name, value in sorted(outputs.items())}
    return [{name: values[i] for name, values in by_name.items()} for i in range(n)]


def rows_from_response(response, n: int) -> list:
    """A gRPC ``PredictResponse``'s outputs as ``n`` rows (``tf.make_ndarray`` of each output)."""
    import tensorflow as tf

    return rows_from_outputs({name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}, n)


def rows_from_rest(reply: dict, n: int) -> list:
    """A REST predict reply (``{"outputs": {...}}`` for the columnar body) as ``n`` rows."""
    if not isinstance(reply, dict):
        raise InputError(f"the server's reply is a JSON {type(reply).__name__}, not an object of outputs: "
                         f"{json.dumps(reply)[:80]}")
    if "error" in reply:
        raise InputError(f"the server refused the request: {reply['error']}")
    outputs = reply.get("outputs")
    if isinstance(outputs, list):  # a signature with one output answers {"outputs": [...]}
        outputs = {"output": outputs}
    if not isinstance(outputs, dict):
        raise InputError(f"the server's reply has no outputs: {json.dumps(reply)[:200]}")
    return rows_from_outputs(outputs, n)


# -- the network ----------------------------------------------------------------------------------------------------

def predict_grpc(s: ServingClientSettings, rows: Sequence[dict]) -> list:
    try:
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc
    except ImportError as e:
        raise InputError(f"--protocol=grpc needs tensorflow-serving-api (pip install 'xlnet_tf[serving]'): {e}. "
                         "Or use --protocol=rest") from None
    request = predict_request(s.model_name, rows, s.signature_name, s.model_version)
    with grpc.insecure_channel(s.server, options=[("grpc.max_receive_message_length", 1 << 30)]) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=s.timeout)
        except grpc.RpcError as e:
            raise InputError(_grpc_message(s, e)) from None
    return rows_from_response(response, len(rows))


def _grpc_message(s: ServingClientSettings, error) -> str:
    import grpc

    code, details = error.code(), " ".join((error.details() or "").split())
    if code == grpc.StatusCode.UNAVAILABLE:
        return (f"--server={s.server}: no gRPC model server answers there ({details}): check host, port (8500) "
                "and that it runs")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"--server={s.server}: no answer within --timeout={s.timeout:g} s"
    if code == grpc.StatusCode.NOT_FOUND:
        return f"--model_name={s.model_name}: the server has no such model or version ({details})"
    return f"--server={s.server}: the server refused the request ({code.name}: {details})"


def predict_rest(s: ServingClientSettings, rows: Sequence[dict]) -> list:
    """POSTs the rows to TF Serving's REST API (``_post``: bounded in time and size) and reads its outputs."""
    version = f"/versions/{s.model_version}" if s.model_version is not None else ""
    url = f"http://{s.server}/v1/models/{s.model_name}{version}:predict"
    status, reason, data = _post(s, url, json.dumps(rest_body(rows, s.signature_name)).encode("utf-8"))
    try:
        reply = json.loads(data.decode("utf-8"))
    except ValueError as e:
        if status >= 400:
            reply = None
        else:
            raise InputError(f"--server={s.server}: {url} did not answer JSON ({e})") from None
    if status >= 400:
        message = reply.get("error", "") if isinstance(reply, dict) else ""
        flag = f"--model_name={s.model_name}" if status == 404 else f"--server={s.server}"
        raise InputError(f"{flag}: {url} answered HTTP {status} {reason}: {message}".rstrip(": "))
    if not isinstance(reply, dict):
        raise InputError(f"--server={s.server}: {url} answered {type(reply).__name__} "
                         f"{json.dumps(reply)[:80]}, not a JSON object of outputs (is it a TF Serving REST port?)")
    return rows_from_rest(reply, len(rows))


def _post(s: ServingClientSettings, url: str, body: bytes) -> tuple:
    """``(status, reason, reply bytes)`` of a JSON POST to ``url``. ``--timeout`` bounds the whole call
    (connecting, sending, the headers and the body: a server that drips its answer byte by byte is cut off at the
    deadline, not after each read), and a reply over ``--max_reply_mb`` is refused (by its Content-Length or as
    it arrives); no answer is an InputError naming --server."""
    import http.client
    import socket
    import threading
    import time

    limit = int(s.max_reply_mb * (1 << 20))
    host, _, port = s.server.rpartition(":")
    deadline = time.monotonic() + s.timeout
    late, opened = threading.Event(), []
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=s.timeout)

    def cut_off():  # wakes a read blocked on a socket that answers too slowly
        late.set()
        for sock in opened:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(s.timeout, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.connect()
        opened.append(connection.sock)  # the response keeps reading it after the connection lets it go
        if late.is_set() or deadline - time.monotonic() <= 0:
            raise socket.timeout()
        opened[0].settimeout(deadline - time.monotonic())
        connection.request("POST", url[len(f"http://{s.server}"):], body=body,
                           headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        declared = answer.getheader("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > limit:
            raise InputError(f"--server={s.server}: {url} announces a reply of {int(declared)} bytes, more than "
                             f"--max_reply_mb={s.max_reply_mb:g}: refused")
        chunks, size = [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            opened[0].settimeout(left)
            chunk = answer.read1(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InputError(f"--server={s.server}: {url} sent more than --max_reply_mb={s.max_reply_mb:g} "
                                 "MiB: refused")
        if late.is_set():
            raise socket.timeout()
        return answer.status, answer.reason, b"".join(chunks)
    except InputError:
        raise
    except (socket.timeout, TimeoutError):
        raise InputError(f"--server={s.server}: no complete answer from {url} within --timeout={s.timeout:g} s") \
            from None
    except (OSError, http.client.HTTPException) as e:
        if late.is_set():
            raise InputError(f"--server={s.server}: no complete answer from {url} within --timeout={s.timeout:g} "
                             "s") from None
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise InputError(f"--server={s.server}: no REST model server answers at {url} ({reason}): check host, "
                         "port (8501) and that it runs") from None
    finally:
        watchdog.cancel()
        connection.close()


def read_rows(path: str) -> list:
    """The JSONL ``--input_file``: one object of texts per line (blank lines skipped)."""
    rows = []
    for number, row in io_utils.read_jsonl(path):
        ok = isinstance(row, dict) and row and all(
            isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)) for v in row.values())
        if not ok:
            raise InputError(f"{path}:{number}: expected an object of texts (RACE's options: a list of texts)")
        bad = io_utils.surrogate_keys(row)
        if bad:
            raise InputError(f"{path}:{number}: {', '.join(map(repr, bad))} holds a lone surrogate (not valid "
                             "Unicode)")
        rows.append(row)
    if not rows:
        raise InputError(f"--input_file={path}: no rows")
    return rows


def main(s: ServingClientSettings) -> int:
    rows = read_rows(s.input_file) if s.input_file else [{s.field: text} for text in s.texts]
    columns(rows)  # rows that disagree are refused before anything is sent
    predicted = (predict_grpc if s.protocol == "grpc" else predict_rest)(s, rows)
    for row in predicted:
        print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    # the gRPC serving API's messages are TensorFlow's; REST needs none
    cli.run(ServingClientSettings, main, tensorflow=lambda s: s.protocol == "grpc")
