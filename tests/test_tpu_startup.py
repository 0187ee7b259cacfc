"""A TPU run starts or fails in bounded time, with one line saying which step failed: nothing here has a TPU, so
the failures are the ones a user meets first (a name outside Google Cloud, an address where nothing listens, a
server that never answers, --tpu=local on a machine without chips). Everything that needs no TPU is checked
before connecting: flags before TensorFlow loads, the model config and the pretraining data before the TPU."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from background import background
from classifier_helpers import REPO
from cli_helpers import parsed
from xlnet_tf.cli import flags as cli
from xlnet_tf.tasks.task_settings import ClassifierSettings
from xlnet_tf.training.settings import PretrainSettings

TINY = os.path.join(REPO, "configs", "tiny.json")
SPIECE = os.path.join(REPO, "data", "spiece.model")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tpu_flags_on_every_training_entry_point_and_checked_before_tensorflow():
    for settings_cls in (PretrainSettings, ClassifierSettings):
        values, _ = parsed(settings_cls, "--use_tpu", "--tpu=my-tpu", "--tpu_zone=us-central1-b",
                           "--gcp_project=p", "--tpu_timeout=30", "--use_bfloat16")
        s = cli.settings_from_flags(settings_cls, values)
        assert (s.strategy, s.tpu, s.tpu_zone, s.gcp_project, s.tpu_timeout, s.dtype) == (
            "tpu", "my-tpu", "us-central1-b", "p", 30, "mixed_bfloat16")
    base = dict(model_dir="m", model_config_path=TINY, data_dir="d", seq_len=16, reuse_len=8, num_predict=4)
    errors = " ".join(PretrainSettings(**base, strategy="tpu", tpu="x", dtype="mixed_float16",
                                       tpu_timeout=0).errors())
    assert "--dtype=mixed_float16 with --strategy=tpu" in errors and "--tpu_timeout=0 must be positive" in errors
    assert "needs --tpu" in " ".join(PretrainSettings(**base, strategy="tpu").errors())
    errors = " ".join(PretrainSettings(**base, tpu="x", tpu_zone="z").errors())
    assert "--tpu, --tpu_zone given, but --strategy=one_device" in errors  # not silently ignored


_STARTUPS = """
import json, os, socket, sys, time
from xlnet_tf.cli.flags import import_tensorflow
import_tensorflow()  # as the tools' processes do
from xlnet_tf.errors import TPUStartupError
from xlnet_tf.training.distribute import create_strategy
closed, silent = sys.argv[1], socket.socket()
silent.bind(("127.0.0.1", 0)); silent.listen()  # accepts connections, never answers
cases = {"local": ("local", 30), "name": ("my-tpu-that-does-not-exist", 30),
         "closed": ("grpc://127.0.0.1:" + closed, 30), "silent": ("grpc://127.0.0.1:%d" % silent.getsockname()[1], 4)}
results = {}
for name in sys.argv[2:]:
    tpu, timeout = cases[name]
    start = time.monotonic()
    try:
        create_strategy("tpu", tpu, tpu_timeout=timeout)
        results[name] = ["connected", 0]
    except TPUStartupError as e:
        results[name] = [str(e), time.monotonic() - start]
print(json.dumps(results), flush=True)
os._exit(0)  # the thread still blocked on the silent server is abandoned, as the tools do
"""


@pytest.mark.slow
@background
def test_each_startup_failure_is_one_bounded_error_saying_what_to_check():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    results = {}
    # A process makes one attempt that reaches TensorFlow's connection (the tools' runs do): an attempt still
    # blocked holds the context, and the next one would wait on it. Lookup and probe failures connect nothing.
    # The two processes run side by side (each waits seconds for TensorFlow's import).
    started = [subprocess.Popen([sys.executable, "-c", _STARTUPS, str(_free_port()), *cases], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for cases in (["local"], ["name", "closed", "silent"])]
    for proc in started:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.update(json.loads(out.strip().splitlines()[-1]))
    message, _ = results["local"]
    assert message.startswith("--tpu=local: initialising the TPU failed") and "no TPU chips" in message
    message, _ = results["name"]
    assert message.startswith("--tpu=my-tpu-that-does-not-exist: cannot look up this TPU")
    assert "--tpu=grpc://HOST:8470" in message
    message, seconds = results["closed"]
    assert "nothing listens at 127.0.0.1:" in message and seconds < 5
    message, seconds = results["silent"]
    assert "did not initialise within 4 s (--tpu_timeout)" in message and 3.5 < seconds < 15
    assert all("\n" not in m for m, _ in results.values())


@pytest.mark.slow
@background
def test_entry_points_check_inputs_before_the_tpu_and_fail_in_one_line(tmp_path):
    """run_pretrain.py checks its data directory before connecting; run_classifier.py with good inputs and an
    unreachable TPU ends in one line, exit 1, no traceback, within seconds of TensorFlow's start."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    common = [sys.executable, "run_pretrain.py", f"--model_dir={tmp_path / 'm'}", f"--model_config_path={TINY}",
              "--seq_len=16", "--reuse_len=8", "--num_predict=4", "--train_batch_size=8", "--train_steps=2",
              "--use_tpu", f"--tpu=grpc://127.0.0.1:{_free_port()}"]
    start = time.monotonic()
    # Both tools at once (each waits seconds for TensorFlow's import).
    pretrain, classifier = [subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True) for argv in (
        common + [f"--data_dir={tmp_path / 'empty'}"],
        [sys.executable, "run_classifier.py", "--config_file=configs/finetune_sentiment_tiny.yaml",
         f"--model_dir={tmp_path / 'f'}", "--init_checkpoint=", "--export_dir=", "--use_tpu",
         f"--tpu=grpc://127.0.0.1:{_free_port()}"])]
    _, err = pretrain.communicate(timeout=240)
    assert pretrain.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert "holds no pretraining data" in err and "--tpu" not in err.split("error:")[-1]
    assert time.monotonic() - start < 120
    _, err = classifier.communicate(timeout=240)
    assert classifier.returncode == 1 and "Traceback" not in err, err[-3000:]
    error = [line for line in err.splitlines() if ": error: " in line]
    assert len(error) == 1 and "--tpu=grpc://127.0.0.1:" in error[0] and "nothing listens" in error[0], error
