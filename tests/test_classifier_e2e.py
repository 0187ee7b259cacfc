"""Every classification/regression task end to end on the official-layout fixtures with a micro model: train
steps, checkpoint, eval metrics and summaries, dev predictions, then GLUE test-set submission files."""

import csv
import json
import math
import os

import numpy as np
import pytest

from background import resource, run_function
from classifier_helpers import FIXTURE_TASKS, FIXTURES, make_flags
from xlnet_tf.config import XLNetConfig
from xlnet_tf.flops import finetune_flops_per_sequence
from xlnet_tf.tasks.classification import classifier_data
from xlnet_tf.training import progress, setup
from xlnet_tf.runner import run
from xlnet_tf.training.settings import SettingsError

EXPECTED_METRICS = {"cola": {"mcc", "accuracy"}, "mrpc": {"f1", "accuracy"}, "qqp": {"f1", "accuracy"},
                    "sts-b": {"pearson", "spearman", "corr", "mse"}}


def _read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t"))


def _run_every_task(root):
    """Each fixture task's runs, as test_task_end_to_end checks them, one task after another in this process (the
    one ``glue_runs`` starts): train 2 steps, evaluate and predict the dev set; then, for a GLUE task, the test
    split's submission from the trained model. Each task's returned results and the FLOPs per step its progress
    reporter was given go to ``root/<task>/run.json``."""
    reported = []

    def reporter(*args, **kwargs):
        reported.append(args[3])
        return progress.ProgressReporter(*args, **kwargs)

    setup.ProgressReporter = reporter
    for name, (folder, _, _, n_test) in sorted(FIXTURE_TASKS.items()):
        tmp_path, data_dir = root / name, os.path.join(FIXTURES, "glue", folder)
        reported.clear()
        result = run(make_flags(tmp_path, task_name=name, data_dir=data_dir, do_train=True, do_eval=True,
                                do_predict=True))
        record = dict(train={k: result["train"][k] for k in ("step", "loss")}, reported=list(reported),
                      eval=dict(metrics=result["eval"]["metrics"], step=result["eval"]["step"],
                                num_examples=result["eval"]["data"]["num_examples"]))
        if n_test:  # GLUE submission: predictions for the test split, ids from its index column, restored weights
            run(make_flags(tmp_path, task_name=name, data_dir=data_dir, do_predict=True, eval_split="test",
                           predict_dir=str(tmp_path / "submission")))
        with open(tmp_path / "run.json", "w") as f:
            json.dump(record, f)


@resource
def glue_runs(tmp_path):
    """``_run_every_task(tmp_path)`` in a process of its own, made on the background thread (tests/background.py):
    twelve tasks' runs are a minute of tracing and steps on 2 cores. Returns ``tmp_path``."""
    run_function(_run_every_task, tmp_path, timeout=900)
    return tmp_path


@pytest.fixture(scope="module")
def glue():
    return glue_runs.value()


@pytest.mark.parametrize("name", sorted(FIXTURE_TASKS))
def test_task_end_to_end(glue, name):
    folder, _, n_dev, n_test = FIXTURE_TASKS[name]
    task = classifier_data.get_task(name)
    tmp_path, data_dir = glue / name, os.path.join(FIXTURES, "glue", folder)
    model_dir = os.path.join(tmp_path, "model")
    with open(tmp_path / "run.json") as f:
        result = json.load(f)
    assert result["train"]["step"] == 2 and math.isfinite(result["train"]["loss"])
    # The FLOPs its progress and TensorBoard MFU divide by: the step's, with the position projection shared by the
    # replica's batch of 4, not once per sequence, and the last layer at the <cls> row only (tests/test_flops.py
    # holds that count to XLA's module).
    config = XLNetConfig.from_json(os.path.join(tmp_path, "micro_config.json"))
    assert result["reported"] == [4 * finetune_flops_per_sequence(config, 32, 4, output_rows=1)]
    report = result["eval"]
    metrics = report["metrics"]
    assert EXPECTED_METRICS.get(name, {"accuracy"}) <= set(metrics) and all(math.isfinite(v) for v in metrics.values())
    assert report["num_examples"] == n_dev and report["step"] == 2
    with open(os.path.join(model_dir, "eval_results.dev.json")) as f:
        assert json.load(f)["metrics"] == metrics
    assert os.listdir(os.path.join(model_dir, "eval_dev"))  # TensorBoard summaries
    rows = _read_tsv(os.path.join(model_dir, "predict", f"{task.submission}.dev.tsv"))
    assert rows[0] == ["index", "prediction"] and len(rows) == n_dev + 1
    # One row per dev example, in the file's order, under its id, holding the prediction from the logits file
    # written beside it; those logits, paired with the labels by id, give eval's metrics (which scored the same
    # checkpoint): a row for the wrong example, or a padding row, would not.
    dev = classifier_data.read_examples(task, data_dir, "dev").examples
    assert [index for index, _ in rows[1:]] == [ex.guid for ex in dev]
    with open(os.path.join(model_dir, "predict", f"{task.name}.dev.logits.json")) as f:
        dev_logits = json.load(f)
    assert [row["index"] for row in dev_logits] == [ex.guid for ex in dev]
    outputs = np.array([row["logits"] for row in dev_logits], np.float64)
    labels = task.label_list()
    if task.regression:
        scores, targets = np.array([float(value) for _, value in rows[1:]]), np.array([ex.label for ex in dev])
        assert np.isfinite(scores).all() and outputs.shape == (n_dev, 1)
        np.testing.assert_allclose(scores, outputs[:, 0], rtol=0, atol=5e-7)  # the file holds 6 decimals
        assert np.mean((outputs[:, 0] - targets) ** 2) == pytest.approx(metrics["mse"], rel=1e-6)
        assert np.std(outputs) > 0 and np.corrcoef(outputs[:, 0], targets)[0, 1] == pytest.approx(
            metrics["pearson"], rel=1e-4)
    else:
        assert [value for _, value in rows[1:]] == [labels[i] for i in np.argmax(outputs, axis=-1)]
        assert np.mean([value == ex.label for (_, value), ex in zip(rows[1:], dev)]) == pytest.approx(
            metrics["accuracy"])
        targets = [labels.index(ex.label) for ex in dev]
        log_probs = outputs - np.log(np.exp(outputs).sum(axis=-1, keepdims=True))
        assert -np.mean(log_probs[np.arange(n_dev), targets]) == pytest.approx(metrics["loss"], rel=1e-6)
    if n_test:  # GLUE submission: predictions for the test split, ids from its index column, restored weights
        rows = _read_tsv(str(tmp_path / "submission" / f"{task.submission}.tsv"))
        assert [r[0] for r in rows] == ["index"] + [str(i) for i in range(n_test)]
        with open(str(tmp_path / "submission" / f"{task.name}.test.logits.json")) as f:
            logits = json.load(f)
        assert len(logits) == n_test and len(logits[0]["logits"]) == (1 if task.regression else len(labels))
        for (index, value), row in zip(rows[1:], logits):  # the submission holds the model's outputs, by id
            assert row["index"] == index
            if task.regression:
                assert math.isfinite(float(value)) and float(value) == pytest.approx(row["logits"][0], abs=1e-6)
            else:
                assert value == labels[int(np.argmax(row["logits"]))]


def test_the_matched_runs_model_evaluates_mismatched_and_predicts_the_diagnostic_set(tmp_path):
    """MNLI's mismatched dev set is evaluated with the matched run's model (its --model_dir): its results and
    summaries go beside the run's own (they replaced eval_results.dev.json and shared eval_dev/). The same model
    predicts GLUE's diagnostic set (AX), which a GLUE submission needs (--task_name=ax was unknown)."""
    data_dir = os.path.join(FIXTURES, "glue", "MNLI")
    run(make_flags(tmp_path, task_name="mnli_matched", data_dir=data_dir, do_train=True, do_eval=True))
    model_dir = tmp_path / "model"
    matched = (model_dir / "eval_results.dev.json").read_text()
    result = run(make_flags(tmp_path, task_name="mnli_mismatched", data_dir=data_dir, do_eval=True))["eval"]
    assert (model_dir / "eval_results.dev.json").read_text() == matched
    with open(model_dir / "eval_results.mnli_mismatched.dev.json") as f:
        assert json.load(f)["metrics"] == result["metrics"] and result["task"] == "mnli_mismatched"
    assert os.listdir(model_dir / "eval_mnli_mismatched.dev") and os.listdir(model_dir / "eval_dev")
    # the run's own task evaluated again writes its own name, as before
    run(make_flags(tmp_path, task_name="mnli", data_dir=data_dir, do_eval=True))
    assert sorted(p.name for p in model_dir.glob("eval_results.*")) == ["eval_results.dev.json",
                                                                         "eval_results.mnli_mismatched.dev.json"]
    # GLUE's diagnostic set (AX.tsv of a submission): predicted by the MNLI run's model, MNLI's classes by id
    from xlnet_tf.tasks.classification import ClassificationFamily

    family = ClassificationFamily()
    assert family.flag_defaults("ax") == {"eval_split": "test"}  # (run_classifier.py's default for it)
    diagnostic = os.path.join(FIXTURES, "glue", "diagnostic")
    run(make_flags(tmp_path, task_name="diagnostic", data_dir=diagnostic, do_predict=True, eval_split="test",
                   predict_dir=str(tmp_path / "submission")))
    rows = _read_tsv(str(tmp_path / "submission" / "AX.tsv"))
    with open(tmp_path / "submission" / "ax.test.logits.json") as f:
        logits = json.load(f)
    labels = classifier_data.get_task("mnli").label_list()
    assert [r[0] for r in rows] == ["index", "0", "1", "2", "3", "4"] == ["index"] + [r["index"] for r in logits]
    assert [r[1] for r in rows[1:]] == [labels[int(np.argmax(r["logits"]))] for r in logits]
    # its export takes sentence pairs (it was marked single-sentence: batch prediction refused its pairs), and its
    # head is MNLI's (a release-format MNLI checkpoint holds classification_mnli_matched/)
    ax = family.task(make_flags(tmp_path, task_name="ax", data_dir=diagnostic, do_predict=True, eval_split="test"))
    assert ax.serving_info(2).pair and ax.build_model().task_scope == "mnli_matched"
    for overrides, message in [(dict(do_train=True), "has no training set"), (dict(eval_split="dev"), "test only")]:
        values = {**dict(task_name="ax", data_dir=diagnostic, do_predict=True, eval_split="test"), **overrides}
        with pytest.raises(SettingsError, match=message):
            make_flags(tmp_path, **values).validate()
    # a damaged run record: the evaluation is written all the same, named by its split as before (it failed at the
    # end, after the evaluation)
    (model_dir / "finetune_settings.json").write_text("{")
    run(make_flags(tmp_path, task_name="mnli_mismatched", data_dir=data_dir, do_eval=True))
    with open(model_dir / "eval_results.dev.json") as f:
        assert json.load(f)["task"] == "mnli_mismatched"


@pytest.mark.parametrize("name,strategy,dtype", [("sst-2", "mirrored", "float32"),
                                                 ("sts-b", "one_device", "mixed_bfloat16")])
def test_mirrored_eval_padding_and_mixed_precision(tmp_path, name, strategy, dtype):
    """An eval set (6) that is not a multiple of the batch (4) on two replicas: dummies pad it and are dropped, so
    the metrics are one device's; mixed precision evaluates to float32's within bfloat16's precision."""
    folder = FIXTURE_TASKS[name][0]
    flags = dict(task_name=name, data_dir=os.path.join(FIXTURES, "glue", folder), do_eval=True)
    result = run(make_flags(tmp_path, do_train=True, strategy=strategy, dtype=dtype, **flags))["eval"]
    reference = run(make_flags(tmp_path, **flags))["eval"]  # the same checkpoint: one device, float32
    assert result["data"]["num_examples"] == reference["data"]["num_examples"] == 6
    got, want = result["metrics"], reference["metrics"]
    assert set(got) == set(want)
    if dtype == "float32":  # the padded rows change nothing; two replicas sum in another order
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    else:  # bfloat16 keeps 8 bits of mantissa: about 0.4% per rounding; the loss moves by less than 2%
        assert got["mse"] == pytest.approx(want["mse"], rel=2e-2)
        assert got["loss"] == pytest.approx(want["loss"], rel=2e-2)


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_predict_traces_a_model_once_and_reads_its_current_weights(strategy):
    """``trainer.predict`` called again on one model (--eval_all_ckpt: each checkpoint restored into one model)
    runs the step traced by the first call: it traced the model again on every call (seconds at XLNet-Base size,
    and memory never freed). The outputs are those of the weights in the model at the call."""
    import tensorflow as tf

    from classifier_helpers import MICRO_CONFIG
    from xlnet_tf.finetuning.trainer import predict
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier

    traces = []

    class Counting(XLNetClassifier):  # its call runs in Python once per trace (and replica)
        def call(self, *args, **kwargs):
            traces.append(1)
            return super().call(*args, **kwargs)

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = (tf.distribute.OneDeviceStrategy(cpus[0]) if strategy == "one_device" else
                tf.distribute.MirroredStrategy(cpus[:2]))
    with strategy.scope():
        model, fresh = (cls(XLNetConfig(**MICRO_CONFIG), num_labels=2) for cls in (Counting, XLNetClassifier))
    rng = np.random.RandomState(0)
    features = dict(input_ids=rng.randint(10, 8000, (8, 16)).astype(np.int32),
                    segment_ids=np.zeros((8, 16), np.int32), padding_mask=np.zeros((8, 16), np.float32),
                    label=np.arange(8, dtype=np.int32))

    def outputs(net):
        return predict(strategy, net, tf.data.Dataset.from_tensor_slices(features).batch(4), keep=("label",))

    first = outputs(model)
    traced = len(traces)
    assert traced == strategy.num_replicas_in_sync
    assert all(np.array_equal(outputs(model)[k], first[k]) for k in first)
    outputs(fresh)  # (its weights built, to copy)
    model.set_weights(fresh.get_weights())  # as a checkpoint restored into the model
    again, want = outputs(model), outputs(fresh)
    assert len(traces) == traced
    assert not np.array_equal(again["logits"], first["logits"])
    assert all(np.array_equal(again[k], want[k]) for k in want)


def test_flag_errors_are_reported_before_work(tmp_path):
    flags = make_flags(tmp_path, task_name="glue", data_dir=str(tmp_path / "missing"), do_train=True,
                       warmup_steps=5, eval_split="test", do_eval=True)
    with pytest.raises(SettingsError) as e:
        run(flags)
    message = str(e.value)
    for part in ("--task_name='glue'", "--data_dir=", "--warmup_steps=5", "--eval_split=test has none"):
        assert part in message
    with pytest.raises(SettingsError, match="nothing to do"):
        run(make_flags(tmp_path, task_name="sst-2"))
    with pytest.raises(SettingsError, match="is a classification task"):
        run(make_flags(tmp_path, task_name="rte", is_regression=True, do_predict=True,
                       data_dir=os.path.join(FIXTURES, "glue", "RTE")))
    with pytest.raises(FileNotFoundError, match="no fine-tuned checkpoint"):
        run(make_flags(tmp_path, task_name="rte", do_eval=True, data_dir=os.path.join(FIXTURES, "glue", "RTE")))


def test_a_glue_submission_has_a_row_for_every_test_row(tmp_path):
    """A QQP test row with an empty question was skipped and QQP.tsv was a row short (exit 0): the GLUE server
    wants one prediction per test row, in order. A row that cannot be read stops the run before training."""
    import shutil

    data_dir = tmp_path / "QQP"
    shutil.copytree(os.path.join(FIXTURES, "glue", "QQP"), data_dir)
    with open(data_dir / "test.tsv", "a", encoding="utf-8") as f:
        f.write("5\tWhy is the sky blue?\t\n6\t\t\n7\tIs it?\tIs it not?\n")
    flags = make_flags(tmp_path, task_name="qqp", data_dir=str(data_dir), do_train=True, do_predict=True,
                       eval_split="test")
    run(flags)
    rows = _read_tsv(os.path.join(flags.model_dir, "predict", "QQP.tsv"))
    assert [r[0] for r in rows] == ["index"] + [str(i) for i in range(8)]
    assert {r[1] for r in rows[1:]} <= set(classifier_data.get_task("qqp").label_list())
    with open(data_dir / "test.tsv", "a", encoding="utf-8") as f:
        f.write("8\tone question only\n")
    flags = make_flags(tmp_path / "again", task_name="qqp", data_dir=str(data_dir), do_train=True, do_predict=True,
                       eval_split="test")
    with pytest.raises(ValueError, match=r"test\.tsv:10: 2 columns, the header has 3; a test row cannot be skipped"):
        run(flags)
    assert not os.path.exists(os.path.join(flags.model_dir, "checkpoint"))


def test_bad_eval_data_is_an_error_before_training(tmp_path):
    """A label outside the label set in dev.tsv stops the run before any training step or checkpoint."""
    import shutil

    data_dir = tmp_path / "RTE"
    shutil.copytree(os.path.join(FIXTURES, "glue", "RTE"), data_dir)
    with open(data_dir / "dev.tsv", "a", encoding="utf-8") as f:
        f.write("99\ta premise\ta hypothesis\tmaybe\n")
    flags = make_flags(tmp_path, task_name="rte", data_dir=str(data_dir), do_train=True, do_eval=True)
    with pytest.raises(ValueError, match=r"dev\.tsv:\d+: label 'maybe'"):
        run(flags)
    assert not os.path.exists(os.path.join(flags.model_dir, "checkpoint"))


def test_non_finite_gradient_stops_fine_tuning_without_saving(tmp_path, monkeypatch):
    """Fine-tuning shares the host loop's check: a NaN gradient with a finite loss (sqrt'(0) * 0, at step 2, the
    last) would make every weight NaN; the run stops naming the gradient, and no checkpoint is written."""
    import tensorflow as tf

    from xlnet_tf.tasks.classification import ClassificationTask

    loss, calls = ClassificationTask.loss, tf.Variable(0)

    def poisoned(self, features, outputs):
        loss_sum, count = loss(self, features, outputs)
        here = tf.cast(tf.equal(calls.assign_add(1), 2), tf.float32)
        u = tf.abs(tf.reduce_sum(outputs["logits"])) * 0.0 * here + (1.0 - here)  # 0 at step 2, else 1
        return loss_sum + tf.sqrt(u) - tf.stop_gradient(tf.sqrt(u)), count
    monkeypatch.setattr(ClassificationTask, "loss", poisoned)
    flags = make_flags(tmp_path, task_name="sst-2", data_dir=os.path.join(FIXTURES, "glue", "SST-2"), do_train=True)
    with pytest.raises(FloatingPointError, match=r"gradient norm is nan \(the loss is finite\) in the steps up to 2; "
                                                 r"stopping without saving. The last good checkpoint is \(none yet\)"):
        run(flags)
    assert tf.train.latest_checkpoint(flags.model_dir) is None
