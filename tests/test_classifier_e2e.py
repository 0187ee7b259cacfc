"""Every classification/regression task end to end on the official-layout fixtures with a micro model: train
steps, checkpoint, eval metrics and summaries, dev predictions, then GLUE test-set submission files."""

import csv
import json
import math
import os

import pytest

from classifier_helpers import FIXTURE_TASKS, FIXTURES, make_flags
from xlnet_tf.tasks import classifier_data
from xlnet_tf.finetuning.runner import run
from xlnet_tf.training.settings import SettingsError

EXPECTED_METRICS = {"cola": {"mcc", "accuracy"}, "mrpc": {"f1", "accuracy"}, "qqp": {"f1", "accuracy"},
                    "sts-b": {"pearson", "spearman", "corr", "mse"}}


def _read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t"))


@pytest.mark.parametrize("name", sorted(FIXTURE_TASKS))
def test_task_end_to_end(tmp_path, name):
    folder, _, n_dev, n_test = FIXTURE_TASKS[name]
    task = classifier_data.get_task(name)
    data_dir = os.path.join(FIXTURES, "glue", folder)
    flags = make_flags(tmp_path, task_name=name, data_dir=data_dir, do_train=True, do_eval=True, do_predict=True)
    result = run(flags)
    assert result["train"]["step"] == 2 and math.isfinite(result["train"]["loss"])
    report = result["eval"]
    metrics = report["metrics"]
    assert EXPECTED_METRICS.get(name, {"accuracy"}) <= set(metrics) and all(math.isfinite(v) for v in metrics.values())
    assert report["data"]["num_examples"] == n_dev and report["step"] == 2
    with open(os.path.join(flags.model_dir, "eval_results.dev.json")) as f:
        assert json.load(f)["metrics"] == metrics
    assert os.listdir(os.path.join(flags.model_dir, "eval_dev"))  # TensorBoard summaries
    rows = _read_tsv(os.path.join(flags.model_dir, "predict", f"{task.submission}.tsv"))
    assert rows[0] == ["index", "prediction"] and len(rows) == n_dev + 1
    labels = task.label_list()
    for _, value in rows[1:]:
        assert (0 <= float(value) or True) if task.regression else value in labels
    if n_test:  # GLUE submission: predictions for the test split, ids from its index column, restored weights
        flags = make_flags(tmp_path, task_name=name, data_dir=data_dir, do_predict=True, eval_split="test",
                           predict_dir=str(tmp_path / "submission"))
        run(flags)
        rows = _read_tsv(str(tmp_path / "submission" / f"{task.submission}.tsv"))
        assert [r[0] for r in rows] == ["index"] + [str(i) for i in range(n_test)]
        with open(str(tmp_path / "submission" / f"{task.name}.test.logits.json")) as f:
            logits = json.load(f)
        assert len(logits) == n_test and len(logits[0]["logits"]) == (1 if task.regression else len(labels))


@pytest.mark.parametrize("name,strategy,dtype", [("sst-2", "mirrored", "float32"),
                                                 ("sts-b", "one_device", "mixed_bfloat16")])
def test_mirrored_eval_padding_and_mixed_precision(tmp_path, name, strategy, dtype):
    """An eval set (6) that is not a multiple of the batch (4): dummies pad it and are dropped (two replicas);
    mixed precision."""
    folder = FIXTURE_TASKS[name][0]
    flags = make_flags(tmp_path, task_name=name, data_dir=os.path.join(FIXTURES, "glue", folder), do_train=True,
                       do_eval=True, strategy=strategy, dtype=dtype)
    result = run(flags)
    assert result["eval"]["data"]["num_examples"] == 6 and math.isfinite(result["eval"]["metrics"]["loss"])


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
