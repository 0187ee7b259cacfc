"""run_pretrain.py as users run it: flags, bad flags, real text, and a SIGKILLed run that resumes exactly."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from background import background
from training_state import assert_same_state, checkpoint_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "data", "corpus", "janeausten.txt")


def base_flags(tmp_path, corpus, name="model", steps=40, **overrides):
    flags = dict(model_config_path=os.path.join(REPO, "configs", "tiny.json"),
                 spiece_model_file=os.path.join(REPO, "data", "spiece.model"), input_glob=corpus,
                 data_dir=str(tmp_path / "data"), model_dir=str(tmp_path / name), train_batch_size=8, seq_len=32,
                 reuse_len=16, perm_size=16, mem_len=16, num_predict=6, train_steps=steps, iterations=10,
                 save_steps=10, learning_rate=2e-3, warmup_steps=5, dropout=0.1, dropatt=0.1)
    flags.update(overrides)
    return ["--config_file="] + [f"--{k}={v}" for k, v in flags.items()]


def run(args, killed_at=None, temp_dir=None, **popen):
    """run_pretrain.py ARGS, started; ``killed_at``: SIGKILLed as its host loop reaches that step (killed_at.py);
    ``temp_dir``: its $TMPDIR (created)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    if temp_dir is not None:
        temp_dir.mkdir()
        env["TMPDIR"] = str(temp_dir)
    killing = [] if killed_at is None else [os.path.join(REPO, "tests", "killed_at.py"), str(killed_at)]
    return subprocess.Popen([sys.executable, *killing, os.path.join(REPO, "run_pretrain.py"), *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def finish(proc, timeout=300):
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def losses(log):
    return [float(x) for x in re.findall(r"\| loss ([0-9.]+) \|", log)]


def write_corpus(tmp_path):
    """About 2,000 lines of real English text (Jane Austen from shared/, else the bundled Brown sample)."""
    source = SHARED_CORPUS if os.path.exists(SHARED_CORPUS) else os.path.join(REPO, "data", "corpus",
                                                                               "brown_sample.txt")
    path = tmp_path / "text.txt"
    with open(source, encoding="utf-8") as f:
        path.write_text("".join(f.readlines()[:2000]), encoding="utf-8")
    return str(path)


@pytest.mark.multiprocess
@background
def test_bad_flags_fail_before_any_work(tmp_path):
    corpus = write_corpus(tmp_path)
    # Both runs at once (independent; each waits seconds for TensorFlow's import).
    warmup = run(base_flags(tmp_path, corpus, warmup_steps=100, train_steps=40))
    config = run(base_flags(tmp_path, corpus, model_config_path="/nonexistent/xlnet_config.json"))
    code, out = finish(warmup)
    assert code != 0 and "--warmup_steps=100 must be below --train_steps=40" in out
    code, out = finish(config)
    assert code != 0 and "--model_config_path=/nonexistent/xlnet_config.json: file not found" in out
    assert not os.path.exists(tmp_path / "data")


@pytest.mark.multiprocess
@background
def test_without_config_file_the_demo_settings_are_not_used(tmp_path):
    """No --config_file: the flags' own defaults, so a real run missing its shape is refused (naming the flags)
    instead of silently training the tiny demo model, and nothing is written."""
    code, out = finish(run([f"--data_dir={tmp_path / 'data'}", f"--model_dir={tmp_path / 'model'}"]))
    assert code == 1
    assert ("missing required flag(s): --model_config_path, --train_batch_size, --seq_len, --reuse_len, "
            "--num_predict, --train_steps") in out
    assert "--helpfull" in out and "XLNet pretraining on TPU" not in out  # one pointer, not the whole help
    assert "brown_sample" not in out and "runs/tiny" not in out
    assert not os.listdir(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_missing_data_is_an_error_naming_the_flag(tmp_path):
    flags = [f for f in base_flags(tmp_path, "unused") if not f.startswith(("--data_dir=", "--input_glob="))]
    (tmp_path / "empty").mkdir()
    # Both runs at once (independent; each waits seconds for TensorFlow's import).
    missing, empty = run(flags), run(flags + [f"--data_dir={tmp_path / 'empty'}"])
    code, out = finish(missing)
    assert code == 1 and "missing required flag(s): --data_dir" in out
    code, out = finish(empty)
    assert code == 1 and f"--data_dir={tmp_path / 'empty'} holds no pretraining data" in out and "--input_glob" in out
    assert "writing pretraining data" not in out and not os.listdir(tmp_path / "empty")
    assert os.listdir(tmp_path) == ["empty"]  # nothing written (the model_dir neither)


@pytest.mark.multiprocess
@background
def test_config_file_key_that_is_no_flag_is_an_error(tmp_path):
    corpus = write_corpus(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text("seq_len: 32\nlearning_rte: 0.1\n")
    code, out = finish(run(base_flags(tmp_path, corpus)[1:] + [f"--config_file={config}"]))
    assert code == 1 and f"{config}: unknown flag 'learning_rte'" in out and "--helpfull" in out


def committed_step(model_dir):
    """The step of the latest checkpoint named in the CheckpointManager's state file (0: none yet)."""
    try:
        text = (model_dir / "checkpoint").read_text()
    except FileNotFoundError:
        return 0
    match = re.search(r'^model_checkpoint_path: ".*?xlnet_model-(\d+)"', text, re.M)
    return int(match.group(1)) if match else 0


@pytest.mark.slow
@background
def test_loss_falls_on_real_text_and_a_killed_run_resumes_exactly(tmp_path):
    corpus = write_corpus(tmp_path)
    # Uninterrupted reference run (also writes the data). The other runs start beside it once its first checkpoint
    # is committed (the data is complete by then): each run is mostly start-up, and it overlaps.
    straight = run(base_flags(tmp_path, corpus, name="straight", steps=60) + ["--deterministic"],
                   temp_dir=tmp_path / "tmp-straight")
    deadline = time.time() + 240
    while committed_step(tmp_path / "straight") < 10 and straight.poll() is None:
        assert time.time() < deadline, "no step-10 checkpoint of the straight run"
        time.sleep(0.05)
    # Data written for other shapes, or another span masking, is refused, naming the field.
    other = run(base_flags(tmp_path, corpus, name="other", seq_len=64, reuse_len=32, perm_size=32, mask_alpha=4))

    # Same run (dropout on: the checkpoints carry its seed states), SIGKILLed at step 30 before its checkpoint
    # there (those of steps 10 and 20 are committed), then restarted.
    code, log = finish(run(base_flags(tmp_path, corpus, name="killed", steps=60) + ["--deterministic"],
                           killed_at=30, temp_dir=tmp_path / "tmp-killed"))
    assert code == -signal.SIGKILL and committed_step(tmp_path / "killed") == 20, log[-3000:]
    code, log = finish(run(base_flags(tmp_path, corpus, name="killed", steps=60) + ["--deterministic"],
                           temp_dir=tmp_path / "tmp-resumed"))
    assert code == 0, log[-3000:]
    # A run that ends leaves nothing in $TMPDIR: autograph's files of the tf.data functions it converted are
    # removed (by an exit handler the process's quick exit skips), as they stay when a run is killed.
    assert not os.listdir(tmp_path / "tmp-resumed") and os.listdir(tmp_path / "tmp-killed")
    assert f"resumed from {tmp_path / 'killed' / 'xlnet_model-20'} at step 20" in log, log[-3000:]
    assert "writing pretraining data" not in log  # the data is there

    code, log = finish(other)
    assert code != 0 and "seq_len: data was written with 32, training uses 64" in log, log[-3000:]
    assert "mask_alpha: data was written with 6, training uses 4" in log and "mask_beta" not in log

    code, log = finish(straight)
    assert code == 0 and not os.listdir(tmp_path / "tmp-straight"), log[-3000:]
    assert "writing pretraining data from --input_glob" in log  # only because --input_glob was given
    seen = losses(log)
    assert len(seen) == 7 and "step 1/60 | loss" in log  # the first line after one step, then every 10
    # The LM bias starts at the data's log unigram frequencies (xlnet_tf/data/unigram.py): the first loss (one
    # batch: 6.5-7.1 seen) is about the unigram level, not ln(8000) = 9 as from a zero bias, and it falls from there.
    assert seen[0] < 7.5 and min(seen[-3:]) < seen[0] - 0.1, seen

    # Everything saved (weights, optimizer moments, dropout seeds, step), bit for bit with --deterministic (else to
    # float32 round-off: training_state.py); save_counter, the number of saves, is not read by training.
    straight, resumed = (checkpoint_state(tf.train.latest_checkpoint(str(tmp_path / name)),
                                          skip=lambda key: key.startswith("save_counter/"))
                         for name in ("straight", "killed"))
    assert sum(key.startswith("weights/") for key in straight) > 20 and any("optimizer" in k for k in straight)
    assert_same_state(straight, resumed, round_off=0.0)


def test_deterministic_refuses_a_tensorflow_loaded_with_onednn_and_ends_with_the_run():
    """--deterministic in a process whose TensorFlow runs oneDNN's matmuls (this one, on most x86 CPUs) would promise
    what it cannot keep: refused, saying what to set. (The command-line runs above set it before TensorFlow loads.)
    Where it is allowed, op determinism lasts as long as the run: the caller's process goes on without it."""
    from tensorflow.python.framework import config  # what Keras reads; the public API has no reader
    from tensorflow.python.util import _pywrap_util_port

    from xlnet_tf.training.settings import RunSettings, SettingsError
    from xlnet_tf.training.setup import run_scope

    settings = RunSettings(model_config_path=os.path.join(REPO, "configs", "tiny.json"), deterministic=True)
    if not _pywrap_util_port.IsMklEnabled():
        # TensorFlow turns oneDNN on only on CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX (not on an AVX2
        # EPYC, nor off x86): the run is allowed, with op determinism on until it ends, returning or raising
        with pytest.raises(RuntimeError, match="the run failed"):
            with run_scope(settings):
                assert config.is_op_determinism_enabled()
                raise RuntimeError("the run failed")
        assert not config.is_op_determinism_enabled()
        return
    with pytest.raises(SettingsError, match="--deterministic: .*oneDNN on .*set TF_ENABLE_ONEDNN_OPTS=0 before"):
        with run_scope(settings):
            pass
    assert not config.is_op_determinism_enabled()


def test_the_data_order_is_compared_with_the_checkpoint_the_run_resumes_from(tmp_path):
    """check_data_order reads the newest checkpoint it can read; a newer one whose data is damaged is skipped as
    the resume skips it, and keep_data_order compares the one restored (a newest one readable but not restorable
    was compared in its place: the resume took the older one's batches in another order)."""
    import types

    from xlnet_tf.training.settings import SettingsError
    from xlnet_tf.training.setup import check_data_order, keep_data_order

    for seed in (1, 2):  # step 1 trained with --seed=1, step 2 with --seed=2
        checkpoint = tf.train.Checkpoint(data_order=tf.Variable(json.dumps({"seed": seed})))
        tf.train.CheckpointManager(checkpoint, str(tmp_path), 5, checkpoint_name="xlnet_model").save(seed)
    older, newer = (str(tmp_path / f"xlnet_model-{n}") for n in (1, 2))
    check_data_order(str(tmp_path), {"seed": 2})
    with open(newer + ".data-00000-of-00001", "r+b") as f:
        f.truncate(1)  # the newest cannot be read: the run resumes from step 1
    with pytest.raises(SettingsError, match=f"{older} was trained with --seed=1; resuming with --seed=2"):
        check_data_order(str(tmp_path), {"seed": 2})
    run = types.SimpleNamespace(resumed=older, settings=types.SimpleNamespace(model_dir=str(tmp_path)),
                                manager=types.SimpleNamespace(checkpoint=types.SimpleNamespace()))
    with pytest.raises(SettingsError, match=f"{older} was trained with --seed=1; resuming with --seed=2"):
        keep_data_order(run, {"seed": 2})
    keep_data_order(run, {"seed": 1})
    assert json.loads(run.manager.checkpoint.data_order.numpy()) == {"seed": 1}
    # Adam's update is recorded with the order; a checkpoint recording none was trained with bias correction (the
    # base/large recipes turned it off since: resumed with them, such a run changed its update, unsaid).
    keep_data_order(run, {"seed": 1, "adam_bias_correction": True})
    with pytest.raises(SettingsError, match=f"{older} was trained with --adam_bias_correction=True; resuming with "
                                            "--adam_bias_correction=False would change the optimizer's update"):
        keep_data_order(run, {"seed": 1, "adam_bias_correction": False})
    from xlnet_tf.training.setup import _compare_order  # a checkpoint recording no order at all: the same

    with pytest.raises(SettingsError, match="was trained with --adam_bias_correction=True; resuming with "):
        _compare_order(str(tmp_path), older, None, {"seed": 1, "adam_bias_correction": False})


def test_a_run_directory_records_the_datas_tokenizer_and_resumes_in_its_data_order(tmp_path):
    """What a pretraining run's directory holds is what trained: the data's SentencePiece model (a release's
    spiece.model, which fine-tuning and from_checkpoint take by the directory), and a rerun resumes only where the
    data position counts the same batches."""
    import dataclasses
    import shutil

    from xlnet_tf.training.pretraining import pretrain
    from xlnet_tf.training.settings import PretrainSettings, SettingsError

    corpus = tmp_path / "text.txt"
    with open(os.path.join(REPO, "data", "corpus", "brown_sample.txt"), encoding="utf-8") as f:
        corpus.write_text("".join(f.readlines()[:300]), encoding="utf-8")
    spiece = os.path.join(REPO, "data", "spiece.model")
    first = PretrainSettings(model_config_path=os.path.join(REPO, "configs", "tiny.json"), spiece_model_file=spiece,
                             input_glob=str(corpus), data_dir=str(tmp_path / "data"), model_dir=str(tmp_path / "a"),
                             train_batch_size=4, seq_len=32, reuse_len=16, num_predict=5, train_steps=2,
                             iterations=2, warmup_steps=1, dropout=0.0, dropatt=0.0)
    assert pretrain(first)["step"] == 2

    # Another SentencePiece model than the data's (same size: it would train) is refused before any work.
    other = tmp_path / "other.model"
    other.write_bytes(open(spiece, "rb").read() + b"\0")
    with pytest.raises(SettingsError, match=re.escape(f"--spiece_model_file={other} is not the SentencePiece model "
                                                      f"the data in --data_dir={tmp_path / 'data'} was written with "
                                                      f"({spiece}")):
        pretrain(dataclasses.replace(first, spiece_model_file=str(other), model_dir=str(tmp_path / "b")))
    # Resuming with more micro-batches per step would skip the batches of the steps' difference (the position is
    # counted in micro-batches): refused, naming the flag.
    with pytest.raises(SettingsError, match=r"xlnet_model-2 was trained with --grad_accum_steps=1; resuming with "
                                            r"--grad_accum_steps=2 would change the training batches from step 2"):
        pretrain(dataclasses.replace(first, grad_accum_steps=2, train_steps=4))

    # Without --spiece_model_file, the run records the data's; a directory a failed run left without a checkpoint
    # (here: another model's xlnet_config.json) takes the corrected run's files.
    (tmp_path / "b").mkdir(exist_ok=True)  # (the refused run above took its lock there)
    shutil.copy(os.path.join(REPO, "configs", "small.json"), tmp_path / "b" / "xlnet_config.json")
    assert pretrain(dataclasses.replace(first, spiece_model_file=None, input_glob=None,
                                        model_dir=str(tmp_path / "b")))["step"] == 2
    assert (tmp_path / "b" / "spiece.model").read_bytes() == open(spiece, "rb").read()
    assert (tmp_path / "b" / "xlnet_config.json").read_text() == (tmp_path / "a" / "xlnet_config.json").read_text()
