"""The pretraining loop under tf.distribute: same result on one device and on two replicas, resume, NaN stop."""

import os
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf

from training_state import ROUND_OFF, stopped_at
from pretraining_helpers import (CONFIG, PREDICT, SEQ, absl_messages, assert_same_weights, make_dataset_fn,
                                 synthetic_examples)
from xlnet_tf.errors import InputError
from xlnet_tf import XLNetPretrainer
from xlnet_tf.checkpoint import load_pretrained
from xlnet_tf.training.distribute import create_strategy
from xlnet_tf.training.pretraining import run_pretraining
from xlnet_tf.training.settings import PretrainSettings, SettingsError


def train(tmp_path, name, strategy, per_replica_batch, steps=4, accum=1, **kwargs):
    keras.utils.set_random_seed(0)  # same initial weights in every run
    config = kwargs.pop("config", CONFIG)
    examples = kwargs.pop("examples", None) or synthetic_examples(64)
    settings = PretrainSettings(model_dir=str(tmp_path / name), train_steps=steps,
                                train_batch_size=per_replica_batch * strategy.num_replicas_in_sync,
                                seq_len=SEQ, num_predict=PREDICT, iterations=kwargs.pop("iterations", 2),
                                learning_rate=kwargs.pop("learning_rate", 3e-3), warmup_steps=1,
                                grad_accum_steps=accum, **kwargs)
    metrics = run_pretraining(strategy, config, settings,
                              make_dataset_fn(examples, per_replica_batch, accum))
    model = XLNetPretrainer(config)
    load_pretrained(model, str(tmp_path / name))
    return metrics, model


@pytest.mark.slow
def test_mirrored_two_replicas_matches_one_device(tmp_path, monkeypatch):
    """The same training on one device and on two replicas, memory carried between the steps of a host loop. Each
    host loop gets its state (the memory) on the replicas' devices, also when it is carried from the first
    step of a run's first loop (split to report that step): the loop's outputs were on the caller's device, and
    inputs on other devices made the runtime instantiate the whole loop again."""
    import xlnet_tf.training.setup as setup

    run_host_loops, devices = setup.run_host_loops, []

    def recording(host_loop, **kwargs):
        def wrapped(steps, state):
            devices.append([v.backing_device for s in tf.nest.flatten(state) for v in getattr(s, "values", [s])])
            return host_loop(steps, state)
        return run_host_loops(wrapped, **kwargs)

    one, model_one = train(tmp_path, "one", create_strategy("one_device"), per_replica_batch=4, weight_decay=0.01)
    two_strategy = create_strategy("mirrored")
    assert two_strategy.num_replicas_in_sync == 2
    monkeypatch.setattr(setup, "run_host_loops", recording)
    two, model_two = train(tmp_path, "two", two_strategy, per_replica_batch=2, weight_decay=0.01)
    assert one["step"] == two["step"] == 4
    np.testing.assert_allclose(one["loss"], two["loss"], rtol=1e-5)
    assert_same_weights(model_one, model_two, round_off=ROUND_OFF)
    # steps 1, 2 (carried from step 1), 3-4; each layer's memory on replica 0's device, then on replica 1's
    assert len(devices) == 3 and all(d == devices[0] for d in devices), devices
    assert [d.split("/")[-1] for d in devices[0]] == ["device:CPU:0", "device:CPU:1"] * CONFIG.n_layer, devices[0]


def uneven_targets(n):
    """``synthetic_examples(n)`` whose examples have 4, 2, 1, 0, 3, 3, 0, 0 real targets, repeated: the
    micro-batches of a step (and the replicas' shares of one) have different counts, and one has none."""
    examples = synthetic_examples(n)
    real = np.resize([4, 2, 1, 0, 3, 3, 0, 0], n)
    examples["target_mask"] = (np.arange(PREDICT)[None, :] < real[:, None]).astype(np.float32)
    return examples


# Without memory, two micro-batches of 2 are the same work as one batch of 4.
NO_MEMORY = CONFIG.replace(mem_len=0, reuse_len=None)


@pytest.fixture(scope="module")
def large_batch(tmp_path_factory):
    """The large batch both accumulation tests compare with: 2 steps of 4 examples on one device (one run: a run
    of the tiny model is seconds of tracing on 2 cores)."""
    return train(tmp_path_factory.mktemp("large_batch"), "big", create_strategy("one_device"), per_replica_batch=4,
                 steps=2, config=NO_MEMORY, examples=uneven_targets(64))


@pytest.mark.parametrize("strategy_name", ["one_device", "mirrored"])
@pytest.mark.slow
def test_gradient_accumulation_matches_the_large_batch(tmp_path, strategy_name, large_batch):
    """Micro-batches of 2 (1 per replica on two) accumulated are one batch of 4: each micro-batch's loss is divided
    by the whole step's target count, not by its own (a mean of means), so the loss, the gradient norm and the
    weights are the large batch's whatever the micro-batches' counts."""
    big, model_big = large_batch
    strategy = create_strategy(strategy_name)
    acc, model_acc = train(tmp_path, "acc", strategy, per_replica_batch=4 // 2 // strategy.num_replicas_in_sync,
                           steps=2, accum=2, config=NO_MEMORY, examples=uneven_targets(64))
    assert acc["step"] == big["step"] == 2
    np.testing.assert_allclose(acc["loss"], big["loss"], rtol=1e-5)
    np.testing.assert_allclose(acc["grad_norm"], big["grad_norm"], rtol=1e-5)
    assert_same_weights(model_big, model_acc, round_off=ROUND_OFF)
    # The rate reported at step 2 is the one step 2 took: the peak, after one warmup step (step 1's was 0; the
    # schedule's value after step 2, the floor, was reported before).
    assert big["learning_rate"] == pytest.approx(3e-3) and acc["learning_rate"] == pytest.approx(3e-3)


@pytest.mark.parametrize("strategy_name", ["one_device", "mirrored"])
@pytest.mark.slow
def test_resume_continues_exactly_with_dropout(tmp_path, strategy_name):
    """Stopped at a checkpoint and rerun, training ends with the weights of an uninterrupted run: the dropout
    layers' seed states are checkpointed with the weights, the optimizer and the step. (The stopped run: the
    uninterrupted run's model_dir as it was at its step-2 checkpoint.)"""
    strategy = create_strategy(strategy_name)
    config = CONFIG.replace(dropout=0.3, dropatt=0.3)
    batch = 4 // strategy.num_replicas_in_sync
    straight, model_straight = train(tmp_path, "straight", strategy, batch, steps=4, save_steps=2, config=config)
    stopped_at(tmp_path / "straight", 2, tmp_path / "resumed")
    with absl_messages() as logged:
        resumed, model_resumed = train(tmp_path, "resumed", strategy, batch, steps=4, save_steps=2, config=config)
    assert f"resumed from {tmp_path / 'resumed' / 'xlnet_model-2'} at step 2" in logged and resumed["step"] == 4
    assert_same_weights(model_straight, model_resumed, round_off=ROUND_OFF)


@pytest.mark.slow
def test_non_finite_loss_stops_without_saving(tmp_path):
    strategy = create_strategy("one_device")
    train(tmp_path, "nan", strategy, per_replica_batch=2, steps=2, save_steps=2)
    with pytest.raises(FloatingPointError, match="last good checkpoint is .*xlnet_model-2") as stopped:
        train(tmp_path, "nan", strategy, per_replica_batch=2, steps=4, save_steps=2, learning_rate=1e30, clip=0.0)
    assert isinstance(stopped.value, InputError)  # the tools' one line (it names the flag to change), no traceback
    assert tf.train.latest_checkpoint(str(tmp_path / "nan")).endswith("xlnet_model-2")


def poison_gradient_at(monkeypatch, step):
    """The plm loss of the ``step``-th step (one device, no accumulation) gets a term whose value is 0 and whose
    gradient is NaN (sqrt'(0) * 0): a finite loss with a non-finite gradient, as an overflow in the backward pass
    gives. The weights update with NaN unless loss scaling skips the step; the other steps are left as they are."""
    from xlnet_tf.objectives import get_objective

    objective = type(get_objective("plm"))
    loss, calls = objective.loss, tf.Variable(0)

    def poisoned(self, outputs, batch):
        terms = loss(self, outputs, batch)
        here = tf.cast(tf.equal(calls.assign_add(1), step), tf.float32)
        # 0 at that step, else 1; only the first part reads the logits, and with a factor 0
        u = tf.abs(tf.reduce_sum(tf.cast(outputs["lm_logits"], tf.float32))) * 0.0 * here + (1.0 - here)
        nan_gradient = tf.sqrt(u) - tf.stop_gradient(tf.sqrt(u))
        (name, (loss_sum, correct, count)), = terms.items()
        return {name: (loss_sum + nan_gradient, correct, count)}
    monkeypatch.setattr(objective, "loss", poisoned)


@pytest.mark.slow
def test_non_finite_gradient_stops_without_saving(tmp_path, monkeypatch):
    """float32: a NaN gradient with a finite loss, at the last step of a host loop (steps 3-4), makes every weight
    NaN; the run stops before the step-4 checkpoint, naming the gradient, and the step-2 one stays the last."""
    poison_gradient_at(monkeypatch, 4)
    with pytest.raises(FloatingPointError, match=r"gradient norm is nan \(the loss is finite\) in the steps up to 4; "
                                                 r"stopping without saving. The last good checkpoint is "
                                                 r".*xlnet_model-2") as stopped:
        train(tmp_path, "nan", create_strategy("one_device"), per_replica_batch=2, steps=4, save_steps=2)
    assert isinstance(stopped.value, InputError)
    assert tf.train.latest_checkpoint(str(tmp_path / "nan")).endswith("xlnet_model-2")


@pytest.mark.slow
def test_a_non_finite_gradient_norm_inside_a_host_loop_is_seen(tmp_path, monkeypatch):
    """Only a host loop's result reaches Python: a non-finite gradient norm at any of its steps (here step 3 of
    3-4, whose step-4 norm is finite) stops the run before its checkpoint. (In this model the NaN weights would
    also make step 4's loss NaN; the norm alone is made NaN here, the weights kept, to see the loop pass it on.)"""
    import xlnet_tf.training.pretraining as pretraining

    make = pretraining.make_replica_step

    def norm_nan_at_step_3(model, optimizer, *args):
        replica_step = make(model, optimizer, *args)

        def step(batches, mems):
            mems, loss, norm, metrics = replica_step(batches, mems)
            return mems, loss, tf.where(tf.equal(optimizer.iterations, 3), float("nan"), norm), metrics
        return step
    monkeypatch.setattr(pretraining, "make_replica_step", norm_nan_at_step_3)
    with pytest.raises(FloatingPointError, match=r"gradient norm is nan .* in the steps up to 4"):
        train(tmp_path, "nan", create_strategy("one_device"), per_replica_batch=2, steps=4, save_steps=2)
    assert tf.train.latest_checkpoint(str(tmp_path / "nan")).endswith("xlnet_model-2")


@pytest.mark.slow
def test_loss_scaling_skips_a_non_finite_step_and_reports_it(tmp_path, monkeypatch):
    """mixed_float16: a non-finite gradient is a skipped step, not an error. The schedule follows the steps
    applied (Keras' LossScaleOptimizer does not count a skipped one), so the rate logged is the one the last
    applied step took, and the skips are counted in the progress line and TensorBoard (``skipped_steps``)."""
    from pretraining_helpers import scalars
    from xlnet_tf.training.optimization import WarmupDecaySchedule

    poison_gradient_at(monkeypatch, 2)
    with absl_messages() as logged:
        metrics, model = train(tmp_path, "fp16", create_strategy("one_device"), per_replica_batch=2, steps=4,
                               dtype="mixed_float16")
    assert metrics["step"] == 4 and metrics["skipped_steps"] == 1
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    # 3 steps applied: the last took the schedule's rate at 2 (a global-step reading, at 3, would be 1.002e-3).
    schedule = WarmupDecaySchedule(3e-3, 1, 4, min_lr_ratio=PretrainSettings().min_lr_ratio)
    assert metrics["learning_rate"] == pytest.approx(float(schedule(2)))
    assert metrics["learning_rate"] == pytest.approx(2.001e-3)
    assert scalars(str(tmp_path / "fp16"))["skipped_steps"] == [(1, 0), (2, 1), (4, 1)]
    assert any(line.startswith("step 4/4 ") and "skipped_steps 1 " in line for line in logged), logged


@pytest.mark.slow
def test_resuming_with_another_kind_of_optimizer_state_names_the_dtype(tmp_path):
    """--dtype=mixed_float16's optimizer carries a loss scale: its checkpoints and those of the other dtypes do not
    restore into each other. Said as such, not as every checkpoint of the run being damaged."""
    strategy = create_strategy("one_device")
    train(tmp_path, "f32", strategy, per_replica_batch=2, steps=2, save_steps=2)
    with pytest.raises(SettingsError, match=r"xlnet_model-2 was trained with --dtype=float32 or mixed_bfloat16 "
                                            r"\(its optimizer state has no loss scale\), which --dtype=mixed_float16 "
                                            r"cannot resume"):
        train(tmp_path, "f32", strategy, per_replica_batch=2, steps=4, save_steps=2, dtype="mixed_float16")


@pytest.mark.slow
def test_sigterm_checkpoints_and_stops(tmp_path, monkeypatch):
    """Preemption: SIGTERM finishes the current host loop, writes a checkpoint there and returns. (It arrives
    after the first step: the first host loop reports after one step and goes on.)"""
    import xlnet_tf.training.setup as setup

    run_host_loops = setup.run_host_loops

    def sigterm_after_first_loop(host_loop, **kwargs):
        def wrapped(steps, state):
            result = host_loop(steps, state)
            if not wrapped.sent:
                wrapped.sent = True
                os.kill(os.getpid(), signal.SIGTERM)  # delivered to the handler run_host_loops installed
            return result
        wrapped.sent = False
        return run_host_loops(wrapped, **kwargs)

    monkeypatch.setattr(setup, "run_host_loops", sigterm_after_first_loop)
    before = signal.getsignal(signal.SIGTERM)
    metrics, _ = train(tmp_path, "preempted", create_strategy("one_device"), per_replica_batch=2, steps=8,
                       iterations=2, save_steps=8)
    assert metrics["preempted"] and metrics["stopped_by"] == "SIGTERM" and metrics["step"] == 2
    assert tf.train.latest_checkpoint(str(tmp_path / "preempted")).endswith("xlnet_model-2")
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is restored


def test_ctrl_c_is_a_stop_request_like_sigterm():
    """SIGINT (Ctrl-C) is what SIGTERM is to the host loops: a request to stop at the next host loop's end, with a
    checkpoint (the command line: test_finetune_resume), not a KeyboardInterrupt; the same Ctrl-C twice (a
    terminal's, and a launcher's forwarded copy) is one request. An ignored SIGINT stays ignored; the handlers are
    restored."""
    import time

    from xlnet_tf.training import loop

    def deliver(signum):
        os.kill(os.getpid(), signum)
        time.sleep(0.01)  # the handler runs in this (the main) thread at its next bytecode

    before = signal.getsignal(signal.SIGINT)
    assert before is signal.default_int_handler
    with loop._StopSignals() as stop:
        deliver(signal.SIGINT)
        deliver(signal.SIGINT)
        deliver(signal.SIGTERM)
        assert stop.received == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with loop._StopSignals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_first_report_comes_after_one_step(tmp_path, monkeypatch):
    """The starting loss is seen at once: the first host loop reports after its first step, then at its end."""
    from xlnet_tf.training import progress

    reported = []
    report = progress.ProgressReporter.report
    monkeypatch.setattr(progress.ProgressReporter, "report",
                        lambda self, step, scalars: reported.append(step) or report(self, step, scalars))
    train(tmp_path, "first", create_strategy("one_device"), per_replica_batch=2, steps=4, iterations=4,
          save_steps=4)
    assert reported == [1, 4]


@pytest.mark.slow
def test_damaged_latest_checkpoint_resumes_from_the_previous_one(tmp_path, monkeypatch):
    """A half-written newest checkpoint is skipped with a warning; training resumes from the one before and ends
    where an uninterrupted run does. If every checkpoint is damaged, the error names them."""
    import glob

    import xlnet_tf.training.setup as setup

    strategy = create_strategy("one_device")
    _, model_straight = train(tmp_path, "straight", strategy, per_replica_batch=2, steps=4, save_steps=2)
    train(tmp_path, "damaged", strategy, per_replica_batch=2, steps=4, save_steps=2)
    for path in glob.glob(str(tmp_path / "damaged" / "xlnet_model-4.data-*")):
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    warnings = []
    monkeypatch.setattr(setup.logging, "warning", lambda message, *args: warnings.append(message % args))
    resumed, model_resumed = train(tmp_path, "damaged", strategy, per_replica_batch=2, steps=4, save_steps=2)
    assert [w for w in warnings if w.startswith("cannot resume from") and "xlnet_model-4" in w], warnings
    assert resumed["step"] == 4
    assert_same_weights(model_straight, model_resumed, round_off=ROUND_OFF)

    for path in glob.glob(str(tmp_path / "damaged" / "xlnet_model-*.index")):
        with open(path, "wb") as f:
            f.write(b"garbage")
    with pytest.raises(InputError, match="no intact checkpoint to resume from"):  # one line from the tools
        train(tmp_path, "damaged", strategy, per_replica_batch=2, steps=6, save_steps=2)


def test_checkpoint_names_every_weight_by_its_layer(tmp_path):
    """tf.train.list_variables shows the network's weights by their layer names, not optimizer/... indices."""
    train(tmp_path, "names", create_strategy("one_device"), per_replica_batch=2, steps=2, save_steps=2)
    names = [name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(tmp_path / "names")))]
    assert "weights/transformer-layer_0-rel_attn-q_kernel/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert "weights/transformer-layer_1-ff-layer_2-kernel/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert not [name for name in names if name.startswith("optimizer/_trainable_variables/")]


def test_the_run_directory_loads_alone_and_refuses_another_model(tmp_path):
    """model_dir holds xlnet_config.json and spiece.model, as a release does: load_network reads it without
    config=. A rerun with a network whose weights fit but computes otherwise (another activation) or another
    SentencePiece model is refused, naming the file and the difference, before it trains."""
    from xlnet_tf import load_network
    from xlnet_tf.training.settings import SettingsError

    spiece = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "spiece.model")
    strategy = create_strategy("one_device")
    _, trained = train(tmp_path, "run", strategy, per_replica_batch=2, steps=2, save_steps=2,
                       spiece_model_file=spiece)
    loaded = load_network(str(tmp_path / "run"), pretrainer=True)
    assert loaded.config == CONFIG.replace(mem_len=0, reuse_len=None, dropout=0.1, dropatt=0.1)  # release keys
    assert_same_weights(loaded, trained, round_off=0)
    with open(spiece, "rb") as f:
        assert (tmp_path / "run" / "spiece.model").read_bytes() == f.read()
    # ... and exports as a release from its directory alone (it asked for --model_config_path)
    from xlnet_tf.cli import export as cli_export

    release = str(tmp_path / "release")
    cli_export.export(cli_export.ExportSettings(model_dir=str(tmp_path / "run"), export_dir=release,
                                                format="release"))
    assert sorted(os.listdir(release)) == ["spiece.model", "xlnet_config.json", "xlnet_model.ckpt.data-00000-of-00001",
                                           "xlnet_model.ckpt.index"]
    assert_same_weights(load_network(release, pretrainer=True), trained, round_off=0)
    # Fine-tuning with it as --model_dir by mistake is refused before anything is written into it
    from classifier_helpers import REPO, make_flags
    from xlnet_tf import runner

    with pytest.raises(SettingsError, match=r"run holds a pretraining run \(its checkpoints and xlnet_config.json\): "
                                            r"fine-tune from it with --init_checkpoint="):
        runner.run(make_flags(tmp_path, task_name="sst-2", data_dir=os.path.join(REPO, "data", "sentiment"),
                              model_dir=str(tmp_path / "run"), do_train=True))
    assert not (tmp_path / "run" / "finetune_settings.json").exists()
    with pytest.raises(SettingsError, match=r"run/xlnet_config.json differs from --model_config_path "
                                            r"\(ff_activation='gelu' there, 'relu' now\)"):
        train(tmp_path, "run", strategy, per_replica_batch=2, steps=4, save_steps=2, spiece_model_file=spiece,
              config=CONFIG.replace(ff_activation="relu"))
    other = tmp_path / "other.model"
    other.write_bytes(b"another vocabulary")
    with pytest.raises(SettingsError, match=r"run/spiece.model differs from --spiece_model_file \(another file\)"):
        train(tmp_path, "run", strategy, per_replica_batch=2, steps=4, save_steps=2, spiece_model_file=str(other))


def test_progress_lines_give_steady_rates_and_an_honest_mfu(tmp_path, monkeypatch):
    """The first line of a run gives the time of its tracing and compiling, not a rate; later lines give their
    loop's rate and an ETA from the steady-state step time; a measured CPU peak is raised to an achieved rate
    above it (MFU never above 100%); the CPU peak is split among one host's replicas, not all workers'."""
    from xlnet_tf.training import distribute, progress

    clock = iter([0.0, 30.0, 40.0, 50.0, 52.0])  # construction, then four reports
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    lines = []
    monkeypatch.setattr(progress.logging, "info", lambda message, *args: lines.append(message % args))
    monkeypatch.setattr(progress.logging, "warning", lambda message, *args: lines.append(message % args))
    reporter = progress.ProgressReporter(str(tmp_path), total_steps=100, tokens_per_step=1000, flops_per_step=1e9,
                                         peak_flops=1e9, peak_measured=True)
    first = reporter.report(1, {"loss": 7.0})
    assert "tokens_per_sec" not in first and "mfu" not in first
    assert "first 0m30s incl. tracing and compiling" in lines[-1] and "ETA" not in lines[-1]
    second = reporter.report(11, {"loss": 6.0})  # 10 steps in 10 s
    assert second["tokens_per_sec"] == 1000 and second["mfu"] == 1.0
    assert lines[-1].endswith("1000 tok/s | MFU 100.0% | ETA 1m29s")  # 89 steps at 1 s, not at (30 + 10) / 11 s
    third = reporter.report(31, {"loss": 5.0})  # 20 steps in 10 s: twice the measured peak
    assert third["mfu"] == 1.0 and "above the measured peak" in lines[-2]
    # The peak each MFU divides by is a series of its own: mfu * peak_flops is the achieved rate across the raise.
    assert (second["peak_flops"], third["peak_flops"]) == (1e9, 2e9)
    assert [r["mfu"] * r["peak_flops"] for r in (second, third)] == [1e9, 2e9]
    fourth = reporter.report(35, {"loss": 5.0})  # 4 steps in 2 s
    assert fourth["mfu"] == 1.0 and lines[-1].endswith("ETA 0m42s")  # 65 steps at (52 - 30) s / (35 - 1) steps

    class TwoHosts:  # two workers with one CPU replica each
        num_replicas_in_sync = 2
    monkeypatch.setattr(distribute, "num_hosts", lambda strategy: 2)
    monkeypatch.setattr(progress, "measure_matmul_peak", lambda dtype: 8e10)
    monkeypatch.setattr(progress.tf.config, "list_logical_devices", lambda kind: [])
    monkeypatch.setattr(progress.tf.config, "list_physical_devices", lambda kind: [])
    assert progress.device_peak_flops(TwoHosts(), "float32") == (8e10, "measured CPU matmul")


def test_a_checkpoint_save_is_not_counted_in_a_lines_rate(tmp_path, monkeypatch):
    """A line's tok/s and MFU are its host loop's, the same after a checkpoint's save as before it (a save timed
    into the next loop made every line after one a dip); the ETA is wall-clock time and keeps the saves in it."""
    from xlnet_tf.training import loop, progress

    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    lines = []
    monkeypatch.setattr(progress.logging, "info", lambda message, *args: lines.append(message % args))
    reporter = progress.ProgressReporter(str(tmp_path), total_steps=40, tokens_per_step=1000, flops_per_step=1e9,
                                         peak_flops=2e9)
    optimizer = keras.optimizers.SGD(0.1)

    def host_loop(steps, state):  # one second a step
        now[0] += int(steps)
        optimizer.iterations.assign_add(int(steps))
        return state, tf.constant(1.0), tf.constant(1.0), {}

    class Manager:  # a save takes 50 s
        latest_checkpoint = None

        def save(self, checkpoint_number):
            now[0] += 50.0
            return f"model-{checkpoint_number}"

    reported = []
    report = reporter.report

    def recorded(step, scalars):
        reported.append((step, report(step, scalars)))
        return reported[-1][1]
    monkeypatch.setattr(reporter, "report", recorded)
    loop.run_host_loops(host_loop, initial_state=lambda: None, start_step=0, train_steps=40, iterations=10,
                        save_steps=20, manager=Manager(), reporter=reporter, optimizer=optimizer)
    assert [step for step, _ in reported] == [1, 10, 20, 30, 40]
    # Steps 21-30 ran after the save at step 20: 10 steps in 10 s like the others, not in 60 s.
    assert [scalars["tokens_per_sec"] for _, scalars in reported[1:]] == [1000.0] * 4
    assert [scalars["mfu"] for _, scalars in reported[1:]] == [0.5] * 4
    step_30 = next(line for line in lines if line.startswith("step 30/40"))
    assert step_30.endswith("ETA 0m27s")  # 10 steps at (80 - 1) s / (30 - 1) steps: the save's 50 s included


@pytest.mark.slow
def test_a_resumed_runs_summaries_replace_what_the_killed_run_wrote_after_its_checkpoint(tmp_path):
    """Killed after its checkpoint at step 2 and rerun: TensorBoard (its Python loader, which the Rust one agrees
    with) shows every tag's steps once and in order, and steps 3-4 are the rerun's; the killed run's point at step
    2, the checkpoint's, stays. Without a restart marker it showed 1, 2, 4, 3, 4: the curve went back."""
    import time

    from tensorboard.backend.event_processing import plugin_event_accumulator as accumulator

    strategy = create_strategy("one_device")
    train(tmp_path, "straight", strategy, per_replica_batch=2, steps=4, save_steps=2)
    stopped_at(tmp_path / "straight", 2, tmp_path / "resumed")  # with the straight run's events up to step 4
    resumed_at = time.time()
    train(tmp_path, "resumed", strategy, per_replica_batch=2, steps=4, save_steps=2)
    events = accumulator.EventAccumulator(str(tmp_path / "resumed" / "train"), purge_orphaned_data=True,
                                          size_guidance={accumulator.TENSORS: 0})
    events.Reload()
    tags = events.Tags()[accumulator.TENSORS]
    assert {"loss", "learning_rate", "tokens_per_sec"} <= set(tags)
    for tag in tags:
        points = events.Tensors(tag)
        # A run's first line gives no rate: the straight run's at 2 (then 4), the rerun's at 4.
        rate = tag in ("tokens_per_sec", "steps_per_sec", "mfu", "peak_flops")
        assert [p.step for p in points] == ([2, 4] if rate else [1, 2, 3, 4]), tag
        assert all((p.wall_time >= resumed_at) == (p.step > 2) for p in points), tag


def test_the_training_step_is_traced_as_written(tmp_path, monkeypatch):
    """Autograph rewrites the code a tf.function calls unless told not to, and tracing the rewritten step takes
    longer (bench/reports/performance.md, "Time to the first step"); the step branches on Python values only, so
    the training loop traces it as written: the objective's loss, for one, runs its own code."""
    import inspect

    from xlnet_tf.objectives import get_objective

    files, objective = [], type(get_objective("plm"))
    loss = objective.loss

    def loss_noting_its_code(self, *args, **kwargs):
        files.append(inspect.currentframe().f_code.co_filename)  # autograph's rewrite lives in a file of its own
        return loss(self, *args, **kwargs)
    monkeypatch.setattr(objective, "loss", loss_noting_its_code)
    train(tmp_path, "run", create_strategy("one_device"), per_replica_batch=2, steps=2, iterations=2)
    assert files and set(files) == {__file__}, set(files)
