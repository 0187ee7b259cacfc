"""Shared by the export tests: a SavedModel's checks run in a fresh process with TensorFlow and tensorflow-text's
kernels only (``tests/serving_client.py``), as TF Serving loads it; string tensors in and out of its JSON."""

import base64
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


def serve(request: dict, timeout: int = 300) -> dict:
    """``tests/serving_client.py`` in a fresh process: the reply (see its docstring)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([PYTHON, os.path.join(REPO, "tests", "serving_client.py")], input=json.dumps(request),
                          capture_output=True, text=True, timeout=timeout, env=env, cwd="/")
    assert done.returncode == 0, f"the serving client crashed ({done.returncode}):\n{done.stderr[-3000:]}"
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply["modules"] == [] or request.get("python_text"), reply["modules"]
    assert not [m for m in reply["modules"] if m.startswith("xlnet_tf")]
    return reply


def strings(values) -> dict:
    encode = (lambda v: [encode(x) for x in v] if isinstance(v, list)
              else base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode())
    return {"dtype": "string", "value": encode(list(values))}


def decoded(output) -> list:
    return [base64.b64decode(v).decode() for v in output["value"]]
