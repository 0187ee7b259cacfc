"""A task is one module: a task family defined in this file alone (sentence-length buckets: the label is the bucket
of a sentence's word count) runs through fine-tuning, a raw-text export, batch prediction and a job file, with
nothing of it anywhere in xlnet_tf. Subprocesses load it with ``--task_module=<this file>``, as a user's module.

Also: no code outside the task family modules compares with a task kind or task name."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from xlnet_tf import tasks
from xlnet_tf.errors import InputError
from xlnet_tf.finetuning import records
from xlnet_tf.tasks.base import BatchPrediction, RecordsTask, Row, Serving, TaskFamily, weighted_loss

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
TINY = os.path.join(REPO, "configs", "tiny.json")
SPIECE = os.path.join(REPO, "data", "spiece.model")
SEQ = 16
BUCKETS = ("short", "medium", "long")


def bucket(text: str) -> str:
    words = len(text.split())
    return BUCKETS[0 if words <= 3 else 1 if words <= 7 else 2]


# --- the family: everything the toy task needs, in this module ----------------------------------------------------

class LengthBucketsServing(Serving):
    """Exports: a "text" input; the bucket and its probabilities out."""

    def text_inputs(self, info) -> dict:
        return {"text": [None]}

    def outputs_from_ids(self, model, features, info) -> dict:
        import tensorflow as tf

        logits = model(features, training=False)["logits"]
        best = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"bucket": tf.gather(tf.constant(list(info.labels)), best),
                "probabilities": tf.nn.softmax(logits, axis=-1)}

    def serves_inputs(self, names: set) -> bool:
        return names == {"text"}


def read_sentences(path: str):
    """The family's own input format ("sentences"): one sentence a line, its id the line number."""
    with open(path, "rb") as f:
        end = 0
        for k, line in enumerate(f, 1):
            end += len(line)
            yield Row(k, end, line.decode("utf-8").rstrip("\n"), id=f"s{k}")


class LengthBucketsBatch(BatchPrediction):
    """Batch prediction: one row per line, its bucket and confidence."""

    def input_formats(self) -> dict:
        return {"sentences": read_sentences}

    def outputs(self, outputs, meta) -> dict:
        return {"probabilities": outputs["probabilities"].numpy()}

    def row(self, outputs, i, meta) -> dict:
        probs = outputs["probabilities"][i]
        return {"bucket": meta["labels"][int(np.argmax(probs))], "confidence": round(float(np.max(probs)), 6)}


class LengthBuckets(TaskFamily):
    """``--task_name=sentence_length``: TSV files ``<data_dir>/{train,dev}.tsv`` with a header ``id, text, label``."""

    name = "length_buckets"
    serving_class = LengthBucketsServing
    batch_class = LengthBucketsBatch

    def task_names(self) -> tuple:
        return ("sentence_length",)

    def settings_errors(self, s) -> list:
        return [] if s.eval_split != "test" else ["--eval_split=test: sentence_length has no test split"]

    def task(self, settings) -> "LengthBucketsTask":
        return LengthBucketsTask(self, settings)


class LengthBucketsTask(RecordsTask):
    name = "sentence_length"

    def prepare(self, split: str) -> tuple:
        s = self.settings
        source = os.path.join(s.data_dir, f"{split}.tsv")
        path = os.path.join(s.output_dir or os.path.join(s.model_dir, "features"), f"{self.name}.{split}.tf_record")
        expected = {"split": split, "max_seq_length": s.max_seq_length, "inputs": records.file_identity(source)}

        def encode():
            with open(source, encoding="utf-8") as f:
                rows = [line.rstrip("\n").split("\t") for line in f][1:]

            def features():
                for i, (_, text, label) in enumerate(rows):
                    tokens = self.tokenizer.encode_ids(text)
                    ids, segs, mask = records.pack_sequence(tokens[:s.max_seq_length - 2], None, s.max_seq_length)
                    yield {"input_ids": ids, "segment_ids": segs, "padding_mask": np.asarray(mask, np.float32),
                           "label": BUCKETS.index(label), "is_real_example": 1, "example_index": i}, \
                        len(tokens) > s.max_seq_length - 2
            return dict(source=source, num_examples=len(rows), guids=[r[0] for r in rows]), features()

        return records.cache_features(path, expected, s.overwrite_data, encode)

    @property
    def feature_spec(self) -> dict:
        import tensorflow as tf

        L = self.settings.max_seq_length
        return {"input_ids": ([L], tf.int64), "segment_ids": ([L], tf.int64), "padding_mask": ([L], tf.float32),
                "label": ([], tf.int64), "is_real_example": ([], tf.int64), "example_index": ([], tf.int64)}

    @property
    def dummy_features(self) -> dict:
        ids, segs, mask = records.dummy_sequence(self.settings.max_seq_length)
        return {"input_ids": np.asarray(ids, np.int32), "segment_ids": np.asarray(segs, np.int32),
                "padding_mask": np.asarray(mask, np.float32), "label": np.int32(0), "is_real_example": np.int32(0),
                "example_index": np.int32(-1)}

    def build_model(self):
        from xlnet_tf.tasks.classification.classification_head import XLNetClassifier

        s = self.settings
        return XLNetClassifier(self.model_config, num_labels=len(BUCKETS), task_scope=self.name,
                               summary_type=s.summary_type, use_summ_proj=s.use_summ_proj, dtype=s.dtype)

    def loss(self, features, outputs) -> tuple:
        import tensorflow as tf

        return weighted_loss(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["label"], tf.int32), logits=outputs["logits"]), features)

    def metrics(self, data, outputs) -> dict:
        predicted = np.argmax(outputs["logits"], axis=-1)
        return {"accuracy": float(np.mean(predicted == outputs["label"])), "num_examples": int(len(predicted))}

    def write_prediction_files(self, outputs, guids, split) -> list:
        from xlnet_tf.io_utils import write_text_atomic

        lines = [f"{g}\t{BUCKETS[k]}" for g, k in zip(guids, np.argmax(outputs["logits"], axis=-1))]
        return [write_text_atomic(os.path.join(self.predict_dir, f"{self.name}.{split}.tsv"),
                                  "id\tbucket\n" + "\n".join(lines) + "\n")]

    def serving_info(self, step: int):
        from xlnet_tf.finetuning.serving import ServingInfo

        s = self.settings
        return ServingInfo(kind=LengthBuckets.name, task=self.name, max_seq_length=s.max_seq_length,
                           lower_case=s.uncased, labels=list(BUCKETS), global_step=step)


tasks.register(LengthBuckets())


# --- the test ----------------------------------------------------------------------------------------------------

WORDS = "the cat sat on a warm mat while rain fell over quiet hills and birds sang".split()


def write_data(data_dir, rng) -> list:
    """train.tsv (24 rows) and dev.tsv (9 rows) of 1-15 word sentences labelled with their bucket; the dev texts."""
    os.makedirs(data_dir, exist_ok=True)
    dev = []
    for split, n in (("train", 24), ("dev", 9)):
        texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 16))) for _ in range(n)]
        with open(os.path.join(data_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("id\ttext\tlabel\n" + "".join(f"{split}-{i}\t{t}\t{bucket(t)}\n" for i, t in enumerate(texts)))
        dev = texts
    return dev


def flags(tmp_path, **overrides) -> dict:
    return dict(dict(task_name="sentence_length", data_dir=str(tmp_path / "data"), model_config_path=TINY,
                     spiece_model_file=SPIECE, max_seq_length=SEQ, train_batch_size=8, eval_batch_size=8,
                     predict_batch_size=8, train_steps=3, iterations=3, learning_rate=1e-3, dropout=0.0,
                     dropatt=0.0), **overrides)


def _start(args):
    """``python -m <args>``, started (each pays TensorFlow's import: independent ones run side by side)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_family_defined_in_a_test_file_runs_everywhere(tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the export's SentencePiece kernels)
    import yaml

    from xlnet_tf import runner
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    dev = write_data(tmp_path / "data", np.random.default_rng(0))

    # Fine-tuning: train, eval, predict and a raw-text export, in this process.
    settings = ClassifierSettings.from_values(flags(
        tmp_path, model_dir=str(tmp_path / "model"), do_train=True, do_eval=True, do_predict=True,
        export_dir=str(tmp_path / "serving")))
    assert settings.family() is tasks.get("length_buckets")
    result = runner.run(settings)
    assert result["train"]["step"] == 3 and result["train"]["data"]["num_examples"] == 24
    assert result["eval"]["metrics"]["num_examples"] == 9 and result["eval"]["main_metric"] == "accuracy"
    with open(tmp_path / "model" / "predict" / "sentence_length.dev.tsv", encoding="utf-8") as f:
        predicted = [line.split("\t")[1] for line in f.read().splitlines()[1:]]
    assert len(predicted) == 9 and set(predicted) <= set(BUCKETS)

    # The export: raw strings in, the family's outputs; what --do_predict predicted.
    export = result["export"]
    assert export == str(tmp_path / "serving" / "3")
    with open(os.path.join(export, "assets.extra", "metadata.json")) as f:
        meta = json.load(f)
    assert (meta["kind"], meta["task"], meta["labels"]) == ("length_buckets", "sentence_length", list(BUCKETS))
    loaded = tf.saved_model.load(export)
    served = loaded.signatures["serving_default"](text=tf.constant(dev))
    assert [b.decode() for b in served["bucket"].numpy()] == predicted
    np.testing.assert_allclose(served["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)
    assert set(loaded.signatures["serve_ids"].structured_input_signature[1]) == {"input_ids", "segment_ids",
                                                                                  "padding_mask"}
    # It declares no Keras text model (TaskFamily.text_model): its runs are for exports only.
    import xlnet_tf

    with pytest.raises(InputError, match="the length_buckets family, which has no Keras text model"):
        xlnet_tf.load_text_model(str(tmp_path / "model"))

    # Batch prediction of the export in a fresh process, which loads the family from this file; beside it, a job
    # file: run_classifier.py runs in a subprocess, which loads the family from the job's task_module.
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(dict(output_dir=str(tmp_path / "jobs"), runs=[{"name": "lengths"}], defaults=flags(
        tmp_path, task_module=HERE, do_train=True, do_eval=True, train_steps=2, iterations=2))))
    # In the family's own input format, which the command line knows only once it has loaded --task_module.
    (tmp_path / "rows.txt").write_text("".join(f"{t}\n" for t in dev), encoding="utf-8")
    predicting = _start(["xlnet_tf.cli.predict", f"--saved_model={tmp_path / 'serving'}",
                         f"--input_glob={tmp_path}/rows.txt", f"--output_dir={tmp_path / 'batch'}",
                         "--input_format=sentences", f"--task_module={HERE}"])
    running_job = _start(["xlnet_tf.cli.jobs", "finetune", str(job)])
    _, err = predicting.communicate(timeout=300)
    assert predicting.returncode == 0, err[-3000:]
    with open(tmp_path / "batch" / "rows.txt.predictions.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert [r["id"] for r in rows] == [f"s{i}" for i in range(1, 10)] and [r["bucket"] for r in rows] == predicted
    np.testing.assert_allclose([r["confidence"] for r in rows], served["probabilities"].numpy().max(-1), atol=2e-6)

    out, _ = running_job.communicate(timeout=300)
    assert running_job.returncode == 0, out[-3000:] + (tmp_path / "jobs" / "lengths" / "job.log").read_text()[-3000:]
    (row,) = json.loads((tmp_path / "jobs" / "results.json").read_text())["runs"]
    assert (row["status"], row["task"], row["metric"], row["best_step"]) == ("done", "sentence_length", "accuracy", 2)

    # The job's run records its family and module: `python -m xlnet_tf.cli.export` rebuilds it from the record.
    from xlnet_tf.cli.export import ExportSettings, export as export_run

    record = json.loads((tmp_path / "jobs" / "lengths" / "finetune_settings.json").read_text())
    assert record["family"] == "length_buckets" and record["settings"]["task_module"] == HERE
    again = export_run(ExportSettings(model_dir=str(tmp_path / "jobs" / "lengths"),
                                      export_dir=str(tmp_path / "job_serving")).validate())
    assert tf.saved_model.load(again).signatures["serving_default"](text=tf.constant(dev[:2]))["bucket"].shape == [2]


# --- no task-kind branching outside the family modules --------------------------------------------------------------

PACKAGE = pathlib.Path(REPO) / "xlnet_tf"
# The family modules and packages and their helpers (everything in tasks/ but the registry and the base classes).
FAMILY_MODULES = ({p for p in (PACKAGE / "tasks").rglob("*.py")}
                  - {PACKAGE / "tasks" / n for n in ("__init__.py", "base.py")})


def _kind_strings() -> set:
    """The built-in kinds, family names and task names (a family of this file included)."""
    return {name for family in tasks.families() for name in
            (family.name, *family.serving.kinds(), *family.task_names(), *family.aliases())}


def _literals(node) -> list:
    """String constants of ``node`` and of the tuple/list/set/dict literal it is."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _literals(e)]
    if isinstance(node, ast.Dict):
        return [v for k in node.keys if k is not None for v in _literals(k)]
    return []


def kind_branches(path: pathlib.Path, names: set, root: pathlib.Path = PACKAGE.parent) -> list:
    """``file:line`` of every comparison (``==``, ``!=``, ``in``, ``not in``) with a task kind or task name, and of
    every dict literal keyed by them (a dispatch table), in ``path`` (named relative to ``root``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            operands = [node]
        else:
            continue
        hits = sorted({v.lower() for o in operands for v in _literals(o)} & names)
        if hits:
            found.append((node.lineno, f"{path.relative_to(root)}:{node.lineno}: {', '.join(hits)}"))
    return [hit for _, hit in sorted(found)]


def test_no_task_kind_comparisons_outside_the_family_modules(tmp_path):
    names = _kind_strings()
    assert {"classification", "regression", "multiple_choice", "squad", "race", "sts-b"} <= names
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in FAMILY_MODULES
             for hit in kind_branches(path, names)]
    assert not found, "task kinds branched on outside xlnet_tf/tasks/ family modules:\n" + "\n".join(found)
    # The check finds what it looks for.
    sample = tmp_path / "sample.py"
    sample.write_text('if info.kind == "squad":\n    pass\nSIGNATURES = {"regression": 1}\nx = k in ("race",)\n')
    assert kind_branches(sample, names, tmp_path) == ["sample.py:1: squad", "sample.py:3: regression",
                                                      "sample.py:4: race"]


def test_a_family_missing_a_hook_is_refused_when_registered():
    class IncompleteServing(Serving):  # no outputs_from_ids, text_inputs
        pass

    class Incomplete(TaskFamily):
        name = "incomplete"
        serving_class = IncompleteServing

        def task(self, settings):
            return None

    class NoServing(TaskFamily):
        name = "no_serving"

        def task(self, settings):
            return None

    class NoTask(TaskFamily):
        name = "no_task"
        serving_class = LengthBucketsServing

    for family, why in ((Incomplete, "Incomplete.serving_class (IncompleteServing) does not implement "
                                     "outputs_from_ids, text_inputs"),
                        (NoServing(), "NoServing has no serving_class (a Serving subclass)"),
                        (NoTask, "NoTask does not implement task")):
        try:
            tasks.register(family)
        except ValueError as e:
            assert why in str(e)
        else:
            raise AssertionError(f"an incomplete family was registered: {why}")
    assert not {"incomplete", "no_serving", "no_task"} & {f.name for f in tasks.families()}

    class HalfTask(RecordsTask):  # no prepare, feature_spec, ...
        pass

    try:
        HalfTask(LengthBuckets(), None)
    except TypeError as e:
        assert "prepare" in str(e) and "write_prediction_files" in str(e)
    else:
        raise AssertionError("a task without its hooks was built")


def test_a_task_module_whose_family_is_refused_is_one_line_naming_it(tmp_path):
    """A --task_module registering a family missing a hook, or under a built-in's name: an InputError naming the
    flag and the file (cli.predict and cli.export printed the registry's ValueError with a traceback)."""
    head = "from xlnet_tf import tasks\nfrom xlnet_tf.tasks.base import TaskFamily\n"
    for name, body, why in (
            ("no_hook.py", "class NoTask(TaskFamily):\n    name = 'no_task_here'\ntasks.register(NoTask)\n",
             "NoTask does not implement task"),
            ("clash.py", "from xlnet_tf.tasks.classification import ClassificationFamily\n"
             "class Mine(ClassificationFamily):\n    pass\ntasks.register(Mine)\n",
             "the task family name 'classification' is taken by")):
        module = tmp_path / name
        module.write_text(head + body)
        with pytest.raises(InputError, match=f"--task_module={module}: tasks.register: {why}"):
            tasks.load_module(str(module))
        assert "no_task_here" not in tasks.FAMILIES
    with pytest.raises(InputError, match=r"--task_module=.*pair_score: a directory; give a .py file, or a package's "
                                         r"dotted name"):
        tasks.load_module(os.path.join(os.path.dirname(__file__), "fixtures", "pair_score"))
