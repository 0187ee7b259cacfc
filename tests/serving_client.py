"""A TF Serving stand-in for the export tests: loads an exported SavedModel in a fresh process that has TensorFlow
and tensorflow-text's kernels only, and calls its signatures.

Run as ``python tests/serving_client.py < request.json``; prints one JSON line. ``xlnet_tf``, ``keras``,
``tf_keras``, tensorflow-text's Python package and ``jax`` (TF Lite's, imported only to offer a conversion: ~1 s)
are made unimportable before TensorFlow loads (TF Serving has none of them); tensorflow-text's op kernels are loaded
as TF Serving links them (``tf.load_op_library``). With ``"python_text": true`` the client imports
``tensorflow_text`` instead (what a Python client does; it pulls in Keras through ``tf.keras``).

Request: ``{"export": dir, "calls": [{"signature": name, "inputs": {name: {"dtype": d, "value": nested list}}}],
"fuzz": {"signature": name, "count": n, "seed": s}, "grpc": [base64 PredictRequest], "rest": [REST body]}`` (all
optional); strings travel base64-encoded so invalid UTF-8 can be sent. Reply: ``{"calls": [{"outputs": {name:
{"dtype", "shape", "value"}}} | {"error", "message"}], "fuzz": {...counts...}, "grpc": [base64 PredictResponse],
"rest": [REST reply], "modules": [blocked modules that got imported]}``.

``grpc`` and ``rest`` are what TF Serving does with a client's request (``xlnet_tf.cli.serving_client``): a
``PredictRequest``'s inputs decoded with ``tf.make_ndarray`` (the protos are ``tensorflow-serving-api``'s, TF
Serving's own wire format), the named signature called, the outputs sent back as a ``PredictResponse``
(``tf.make_tensor_proto``); a REST body's columnar ``inputs`` made tensors of the signature's dtypes, the outputs
answered as ``{"outputs": {name: nested list}}`` with strings as UTF-8 text (TF Serving's ``json_tensor``).
"""

import base64
import glob
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import sys

BLOCKED = ("xlnet_tf", "keras", "tf_keras", "tensorflow_text", "jax")


class _Unavailable(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``names`` fail to import (as on a machine without them); TensorFlow copes with a missing Keras."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        raise ImportError(f"{spec.name} is not available to a TF Serving client")

    def exec_module(self, module):
        pass


def _load_tensorflow(python_text: bool):
    if python_text:
        sys.meta_path.insert(0, _Unavailable(("xlnet_tf",)))
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the ops)
        return tf
    text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
    sys.meta_path.insert(0, _Unavailable(BLOCKED))
    import tensorflow as tf
    for library in sorted(glob.glob(os.path.join(text_dir, "python", "ops", "_*.so"))):
        tf.load_op_library(library)
    return tf


def _tensor(tf, spec):
    if spec["dtype"] == "string":
        def decode(v):
            return [decode(x) for x in v] if isinstance(v, list) else base64.b64decode(v)
        value = decode(spec["value"])
        shape = spec.get("shape")
        return tf.constant(value, tf.string, shape=shape) if shape is not None else tf.constant(value, tf.string)
    return tf.constant(spec["value"], getattr(tf, spec["dtype"]))


def _jsonable(tf, tensor):
    import numpy as np

    value = np.asarray(tensor.numpy())
    if tensor.dtype == tf.string:
        flat = [base64.b64encode(v).decode("ascii") for v in value.reshape(-1)]
        out = np.array(flat, dtype=object).reshape(value.shape).tolist()
    else:
        out = value.tolist()
    return {"dtype": tensor.dtype.name, "shape": list(value.shape), "value": out}


def _call(tf, signature, inputs):
    try:
        outputs = signature(**{k: _tensor(tf, v) for k, v in inputs.items()})
    except tf.errors.InvalidArgumentError as e:
        return {"error": "InvalidArgumentError", "message": e.message}
    return {"outputs": {k: _jsonable(tf, v) for k, v in outputs.items()}}


# -- fuzz -------------------------------------------------------------------------------------------------------
_WORDS = ["the", "film", "was", "good", "bad", "naïve", "café", "日本語", "🙂", "2,000", "_", "``quoted''", "Ünïcödé",
          "\u200b", "\u0301", "a\u0301", "ﬁ", "…", "—", "\t", "\n", "x" * 40, "The quick brown fox.", "?", "!"]


def _text(rng: random.Random, max_seq_length: int, long_ok: bool = True) -> bytes:
    kinds = ["empty", "space", "invalid", "normal", "normal", "normal", "control", "one"]
    kind = rng.choice(kinds + (["long"] if long_ok else []))
    if kind == "empty":
        return b""
    if kind == "space":
        return rng.choice([" ", "   ", "\t\n", "\u3000 \u00a0", "\r\n\r\n"]).encode()
    if kind == "invalid":
        return rng.choice([b"\xff\xfe", b"ok \xc3\x28 then", b"\xed\xa0\x80 surrogate", b"\xf0\x28\x8c\x28",
                           b"trunc \xe2\x82"]) + " ".join(rng.choices(_WORDS, k=3)).encode()
    if kind == "long":  # ~100x max_seq_length tokens
        return " ".join(rng.choices(_WORDS, k=100 * max_seq_length)).encode()
    if kind == "control":
        return "".join(chr(rng.randrange(0, 32)) for _ in range(rng.randrange(1, 20))).encode()
    if kind == "one":
        return rng.choice(_WORDS).encode()
    return " ".join(rng.choices(_WORDS, k=rng.randrange(1, 3 * max_seq_length))).encode()


def _fuzz(tf, loaded, signature: str, count: int, seed: int) -> dict:
    import numpy as np

    name = signature
    signature = loaded.signatures[name]
    meta = loaded.signatures["metadata"]()
    max_seq_length = int(meta["max_seq_length"].numpy())
    specs = signature.structured_input_signature[1]
    rng = random.Random(seed)
    counts = {"requests": 0, "ok": 0, "invalid_argument": 0, "expected_errors": 0, "unexpected_errors": [],
              "missing_errors": 0, "non_finite": 0, "wrong_batch": 0, "max_batch": 0}
    for _ in range(count):
        batch = rng.choice([0, 1, 1, 2, 3, 4, 8])
        mismatch = len(specs) > 1 and rng.random() < 0.05
        choices = rng.choice([1, 2, 4, 5])
        inputs = {}
        for i, (key, spec) in enumerate(sorted(specs.items())):
            b = batch + 1 if mismatch and i == 0 else batch
            shape = [b] + ([choices] if spec.shape.rank == 2 else [])
            # at most one text ~100x too long per input (each costs a tokenizer pass over ~5,000 words)
            values = [_text(rng, max_seq_length, long_ok=j == 0) for j in range(int(np.prod(shape)))]
            inputs[key] = tf.constant(values, tf.string, shape=shape)
        counts["requests"] += 1
        counts["max_batch"] = max(counts["max_batch"], batch)
        try:
            outputs = signature(**inputs)
        except tf.errors.InvalidArgumentError as e:
            counts["invalid_argument"] += 1
            if mismatch and "same batch size" in e.message:
                counts["expected_errors"] += 1
            else:
                counts["unexpected_errors"].append(e.message[:500])
            continue
        if mismatch:
            counts["missing_errors"] += 1
        counts["ok"] += 1
        for key, value in outputs.items():
            if value.shape.rank and value.shape[0] != batch:
                counts["wrong_batch"] += 1
            if value.dtype.is_floating and not np.all(np.isfinite(value.numpy())):
                counts["non_finite"] += 1
    return counts


def _grpc(tf, loaded, encoded: str) -> str:
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest.FromString(base64.b64decode(encoded))
    signature = loaded.signatures[request.model_spec.signature_name or "serving_default"]
    outputs = signature(**{k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()})
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    for name, value in outputs.items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
    return base64.b64encode(response.SerializeToString()).decode("ascii")


def _rest(tf, loaded, body: dict) -> dict:
    signature = loaded.signatures[body.get("signature_name", "serving_default")]
    specs = signature.structured_input_signature[1]
    outputs = signature(**{k: tf.constant(v, specs[k].dtype) for k, v in body["inputs"].items()})

    def text(v):
        return [text(x) for x in v] if isinstance(v, list) else v.decode("utf-8") if isinstance(v, bytes) else v
    return {"outputs": {name: text(value.numpy().tolist()) for name, value in outputs.items()}}


def main():
    request = json.load(sys.stdin)
    tf = _load_tensorflow(request.get("python_text", False))
    loaded = tf.saved_model.load(request["export"])
    reply = {"calls": [_call(tf, loaded.signatures[c["signature"]], c["inputs"]) for c in request.get("calls", [])]}
    if "fuzz" in request:
        reply["fuzz"] = _fuzz(tf, loaded, **request["fuzz"])
    reply["grpc"] = [_grpc(tf, loaded, r) for r in request.get("grpc", [])]
    reply["rest"] = [_rest(tf, loaded, r) for r in request.get("rest", [])]
    reply["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED and sys.modules[m] is not None)
    sys.stdout.write("\n" + json.dumps(reply) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip TensorFlow's teardown


if __name__ == "__main__":
    main()
