"""The shape of a task family, grouped by the caller of each hook: ``TaskFamily`` (what the registry and training
need), its ``serving`` (a ``Serving``: what an export needs) and its ``batch`` (a ``BatchPrediction``: what batch
prediction needs; None when its exports are not for batch prediction), and ``Task`` (one run's task).

* ``TaskFamily`` (settings, before TensorFlow loads, and training): ``task_names``/``aliases`` (the
  ``--task_name`` values it runs), ``settings_class`` and ``entry_point`` (run_classifier.py's
  ``ClassifierSettings`` unless it has its own), ``flag_defaults`` (entry-point defaults of its tasks, e.g.
  run_race.py's), ``settings_errors``; ``run_record_runner``, ``task_name_of`` and ``settings_for_export``
  (rebuilding a run from its record); ``task(settings)`` returns the run's ``Task`` (below); ``text_model`` (its
  Keras model on raw text, what ``xlnet_tf.load_text_model`` rebuilds a run as; optional);
  ``test_split_labelled`` (its test files may carry labels: ``--do_eval --eval_split=test``). Required: ``name``,
  ``task``, ``serving_class``.
* ``Serving`` (``xlnet_tf.finetuning.serving``; ``info`` is the export's ``ServingInfo``): ``kinds`` (the ``kind``
  its exports record), ``text_inputs`` (the raw-text ``serving_default`` inputs), ``ids_spec`` (``serve_ids``),
  ``outputs_from_ids``, ``outputs_from_text``, ``preprocessor_kwargs`` (``XLNetPreprocessor`` arguments),
  ``serves_inputs`` (recognising an export that records no kind). Required: ``text_inputs``, ``outputs_from_ids``.
* ``BatchPrediction`` (``xlnet_tf.batch.prediction``; ``meta`` is the export's ``metadata.json``): ``text_inputs``
  (where a row's one or two texts go), ``input_formats``/``input_format_of`` (file formats of its own, e.g. SQuAD
  files), ``encode_ids`` (rows for a token-id signature), ``outputs`` (a batch's predictions), ``row`` (the output
  line), ``identity`` (recorded in the summary: labels, regression). Required: ``outputs``, ``row``.

``Task`` hooks are what the generic runner (``xlnet_tf.runner``) calls for the stages train, eval,
predict and export; ``RecordsTask`` implements them for tasks whose examples are encoded once into TFRecords
(classification, RACE, a user's sequence task), leaving ``prepare``, ``feature_spec``, ``dummy_features``,
``build_model``, ``loss``, ``metrics`` and ``write_prediction_files`` to the family.

No TensorFlow at import: families are looked up while the settings are checked.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import os
from typing import Callable, Iterator, Optional

from absl import logging
from xlnet_tf.errors import InputError, MissingInputError


@dataclasses.dataclass
class Row:
    """One input line of batch prediction: a usable row (``text_a`` set) or a skipped one (``problem`` set). ``end``
    is the byte offset after the line (progress)."""
    line: int
    end: int
    text_a: str = ""
    text_b: str = ""
    id: str = ""
    problem: str = ""


# A batch-prediction input format of a family's own: reader(path) -> the file's rows (``BatchPrediction``).
Reader = Callable[[str], Iterator[Row]]


class Serving(abc.ABC):
    """What an export of ``family``'s tasks needs: its signatures' inputs and outputs (see the module docstring)."""

    def __init__(self, family: "TaskFamily"):
        self.family = family

    def kinds(self) -> tuple:
        """The ``kind`` values its exports record (``ServingInfo.kind``)."""
        return (self.family.name,)

    @abc.abstractmethod
    def text_inputs(self, info) -> dict:
        """The raw-text ``serving_default`` inputs for ``info`` (a ``ServingInfo``): name -> shape (tf.string)."""

    def ids_spec(self, info, length=None) -> dict:
        """The ``serve_ids`` inputs: name -> ``tf.TensorSpec``; by default the sequence layout [batch, seq] (seq:
        ``length``, None = any)."""
        import tensorflow as tf

        shape = [None, length]
        return dict(input_ids=tf.TensorSpec(shape, tf.int32, "input_ids"),
                    segment_ids=tf.TensorSpec(shape, tf.int32, "segment_ids"),
                    padding_mask=tf.TensorSpec(shape, tf.float32, "padding_mask"))

    @abc.abstractmethod
    def outputs_from_ids(self, model, features: dict, info) -> dict:
        """What the export returns for encoded ``features`` (the model in inference mode)."""

    def outputs_from_text(self, model, preprocessor, texts: dict, info) -> dict:
        """What ``serving_default`` returns for the raw ``texts`` (name -> tf.string tensor, ``text_inputs``
        order); by default ``outputs_from_ids`` of ``preprocessor(*texts)``."""
        return self.outputs_from_ids(model, preprocessor(*texts.values()), info)

    def preprocessor_kwargs(self, info) -> dict:
        """``XLNetPreprocessor`` arguments besides the SentencePiece model, ``seq_length`` and ``lower_case``."""
        return {}

    def serves_inputs(self, names: set) -> bool:
        """Whether a signature taking ``names`` is one of this family's (an export that records no kind)."""
        return False


class BatchPrediction(abc.ABC):
    """What batch prediction (``python -m xlnet_tf.cli.predict``) of ``family``'s exports needs (see the module
    docstring)."""

    def __init__(self, family: "TaskFamily"):
        self.family = family

    def text_inputs(self, meta: dict) -> tuple:
        """The raw-text signature inputs that a row's first and (if any) second text go to."""
        return tuple(self.family.serving.text_inputs(MetadataInfo(meta)))[:2]

    def input_formats(self) -> "dict[str, Reader]":
        """Input file formats of its own: name -> reader(path) -> iterator of ``Row`` (each with its id)."""
        return {}

    def input_format_of(self, path: str) -> Optional[str]:
        """The format of an input file, by its name, if it is one of ``input_formats`` (else None)."""
        return None

    def encode_ids(self, tokenizer, text_a: str, text_b: Optional[str], max_seq_length: int):
        """(input_ids, segment_ids, padding_mask, truncated) of a row for a token-id signature."""
        raise InputError(f"batch prediction of a {self.family.name} export needs its raw-text serving_default "
                         "(token ids are not built outside the graph for this task)")

    @abc.abstractmethod
    def outputs(self, outputs: dict, meta: dict) -> dict:
        """The predictions of one batch as numpy arrays, from a signature's (or ``outputs_from_ids``') outputs."""

    @abc.abstractmethod
    def row(self, outputs: dict, i: int, meta: dict) -> dict:
        """The fields of example ``i``'s output line (after ``line`` and ``id``)."""

    def identity(self, meta: dict, output_names) -> dict:
        """What a batch-prediction summary records of the model's outputs (a rerun must predict the same), after
        the model's identity and the fields: by default its labels, and (the summary's layout) no regression."""
        return dict(labels=meta.get("labels"), regression=False)


class TaskFamily(abc.ABC):
    """A kind of fine-tuning task; see the module docstring for the hooks. Subclasses set ``name`` and
    ``serving_class`` (a ``Serving`` subclass), implement ``task``, and set ``batch_class`` (a ``BatchPrediction``
    subclass) if ``python -m xlnet_tf.cli.predict`` handles their exports."""

    name: str = ""
    entry_point: str = "run_classifier.py"  # the script that fine-tunes the family's tasks
    run_record_runner: str = "classifier"  # "runner" of the run record (finetune_settings.json)
    serving_class: Optional[type] = None
    batch_class: Optional[type] = None
    # "module:Class" of its Keras model on raw text (a ``tasks.text_models.TextTaskModel`` subclass), imported by
    # ``text_model_class``: a name, since the family is imported while flags are checked and text models import
    # TensorFlow. None: ``xlnet_tf.load_text_model`` refuses its runs (they export).
    text_model: Optional[str] = None
    # Whether its test files may carry labels (CoNLL-2003's eng.testb, RACE's test/): --do_eval --eval_split=test
    # passes the settings' check, and the task refuses an unlabelled test file when it reads it. GLUE's have none.
    test_split_labelled: bool = False

    @functools.cached_property
    def serving(self) -> Serving:
        """What exports need (an instance of ``serving_class``)."""
        return self.serving_class(self)

    @functools.cached_property
    def batch(self) -> Optional[BatchPrediction]:
        """What batch prediction needs (an instance of ``batch_class``), None if its exports are not for it."""
        return self.batch_class(self) if self.batch_class is not None else None

    # -- settings ----------------------------------------------------------------------------------------------
    @property
    def settings_class(self):
        """The settings dataclass of ``entry_point``."""
        from xlnet_tf.tasks.task_settings import ClassifierSettings
        return ClassifierSettings

    def task_names(self) -> tuple:
        """The ``--task_name`` values (lower case) of this family."""
        return (self.name,)

    def aliases(self) -> dict:
        """Other ``--task_name`` spellings: alias -> task name."""
        return {}

    def canonical_task(self, task_name: str) -> Optional[str]:
        """``task_name`` as this family names it (lower case, aliases resolved), or None if it is not one of its."""
        key = task_name.lower()
        key = self.aliases().get(key, key)
        return key if key in self.task_names() else None

    def flag_defaults(self, task_name: str) -> dict:
        """Flag values of the entry point that differ for this task (applied to flags the user did not set)."""
        return {}

    def settings_errors(self, settings) -> list:
        """What is wrong with ``settings`` for this family, as messages naming the flags (no TensorFlow here)."""
        return []

    def metric_names(self, task_name: str) -> Optional[tuple]:
        """The metrics an evaluation of ``task_name`` reports (the names in its ``eval_results.<split>.json``),
        known before any run: a job file's ``metric:`` is checked against them. A name ending in "/" stands for
        every name it starts (per-class metrics, e.g. tagging's ``f1/<entity type>``). None: only the evaluation
        knows (nothing is checked)."""
        return None

    def task_name_of(self, values: dict) -> Optional[str]:
        """The task a run record's settings ``values`` fine-tuned."""
        return values.get("task_name")

    def settings_for_export(self, values: dict, task_name: str):
        """The settings to rebuild a run's model from (its record's ``values`` with the export's flags on top)."""
        return self.settings_class.from_values(dict(values, task_name=task_name))

    def text_model_class(self) -> Optional[type]:
        """The class ``text_model`` names (its module imported now), None if it names none."""
        from xlnet_tf.registry import load

        return load(self.text_model) if self.text_model else None

    # -- fine-tuning ---------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def task(self, settings) -> "Task":
        """The ``Task`` of a run with ``settings`` (validated)."""


def missing_hooks(family_class: type) -> list:
    """What ``family_class`` (a ``TaskFamily`` subclass) lacks, as messages: its abstract methods, a missing
    ``serving_class``, and those of its ``serving_class`` and ``batch_class``."""
    missing = []
    abstract = sorted(getattr(family_class, "__abstractmethods__", ()))
    if abstract:
        missing.append(f"{family_class.__name__} does not implement {', '.join(abstract)}")
    groups = (("serving_class", Serving, True), ("batch_class", BatchPrediction, False))
    for attribute, base, required in groups:
        hooks = getattr(family_class, attribute, None)
        if hooks is None:
            if required:
                missing.append(f"{family_class.__name__} has no {attribute} (a {base.__name__} subclass)")
        elif not (isinstance(hooks, type) and issubclass(hooks, base)):
            missing.append(f"{family_class.__name__}.{attribute} is not a {base.__name__} subclass")
        elif getattr(hooks, "__abstractmethods__", ()):
            missing.append(f"{family_class.__name__}.{attribute} ({hooks.__name__}) does not implement "
                           f"{', '.join(sorted(hooks.__abstractmethods__))}")
    return missing


# ServingInfo's fields before ``extras`` (metadata.json of format xlnet_tf.serving/1, a .keras file's run_info):
# each family's own, under the names its hooks read in ``extras`` (``squad`` held SQuAD's and tagging's).
_FIELDS_NOW_EXTRAS = ("max_qa_length", "segment_length", "mem_len")


def with_extras(values: dict) -> dict:
    """``values`` (metadata.json, or a ``ServingInfo`` as a dict) with the family fields of an older export moved
    into ``extras``, so that one loads and exports as it did."""
    values = dict(values)
    extras = dict(values.pop("squad", None) or {})
    extras.update((name, values.pop(name)) for name in _FIELDS_NOW_EXTRAS if name in values)
    values["extras"] = {**extras, **(values.get("extras") or {})}
    return values


class MetadataInfo:
    """A ``ServingInfo``-like view (attributes) of an export's metadata.json, which an older export may lack keys of
    (the defaults here) or hold its family's settings in fields of their own (``with_extras``): what batch
    prediction hands to the serving hooks."""

    def __init__(self, meta: dict):
        self.__dict__.update(dict(kind=None, task="", max_seq_length=None, lower_case=False, labels=None, pair=False,
                                  global_step=0), **with_extras(meta))


# -- a run's task ------------------------------------------------------------------------------------------------

def data_summary(meta: dict) -> dict:
    """Counts of a split's encoding, for logs and reports."""
    return {k: meta.get(k, 0) for k in ("num_examples", "num_skipped", "num_truncated")} | {
        "skipped_examples": meta.get("skipped", [])[:20]}


class Task(abc.ABC):
    """One fine-tuning run's task: the hooks the generic runner calls, bound to the run's settings.

    The runner's order: ``prepare_only`` (stop if it did all), ``training_data`` -> ``train`` with
    ``build_model``/``loss``; ``restore`` for inference; ``predicts_input_files`` (``--do_predict`` on input files
    of any size); ``eval_data`` -> ``infer`` -> ``write_predictions`` (if ``writes_predictions``) and ``metrics`` ->
    ``write_eval`` (if ``evaluates``); ``serving_info`` for the export.
    """

    name: str = ""
    main_metric: str = "accuracy"  # the metric that picks the best checkpoint (--eval_all_ckpt)
    sequences_per_example: int = 1  # the network's sequences in one example (RACE: one per option): tokens/s, MFU

    def __init__(self, family: TaskFamily, settings):
        self.family, self.settings = family, settings

    # -- what the task needs -------------------------------------------------------------------------------------
    @functools.cached_property
    def tokenizer(self):
        from xlnet_tf.tokenization import XLNetTokenizer
        return XLNetTokenizer(self.settings.spiece_model_file, lower=self.settings.uncased)

    @functools.cached_property
    def model_config(self):
        from xlnet_tf.training.setup import load_model_config
        s = self.settings
        return load_model_config(s, self.tokenizer.vocab_size, f"--spiece_model_file={s.spiece_model_file}")

    @property
    def predict_dir(self) -> str:
        return self.settings.predict_dir or os.path.join(self.settings.model_dir, "predict")

    # -- stages ----------------------------------------------------------------------------------------------------
    def prepare_only(self) -> bool:
        """Runs a data-preparation-only invocation (run_squad.py --do_prepro) and returns True, else False."""
        return False

    @abc.abstractmethod
    def training_data(self, num_replicas: int) -> tuple:
        """``(dataset_fn, summary)``: ``dataset_fn(input_context, start_step)`` gives shuffled, repeated
        per-replica batches (``train_batch_size // num_replicas``), from the batch that optimizer step
        ``start_step`` takes on: a resumed run must see the batches the uninterrupted run would have seen (see
        ``finetuning.records.shuffled_epochs``). ``summary`` goes into the run's result."""

    @abc.abstractmethod
    def build_model(self):
        """The task model (a fresh Keras model; called inside the strategy scope)."""

    @abc.abstractmethod
    def loss(self, features: dict, outputs: dict) -> tuple:
        """(sum of per-example losses, number of examples) of a per-replica batch (the loop divides by the global
        count). Traced as written, without autograph: a branch on a tensor's value is a ``tf.where`` or
        ``tf.cond``, not a Python ``if``."""

    def restore(self, model, checkpoint_path: Optional[str] = None) -> str:
        """Fine-tuned weights for eval/predict/export: ``checkpoint_path``, else the latest in ``--model_dir``, else
        ``--init_checkpoint`` if it is a fine-tuned checkpoint of this task (``checkpoint.load_fine_tuned``: the
        original's TF1 layout with this task's head, a native one, or a HuggingFace model with this task's head, its
        classes in this task's label order). Returns the checkpoint read."""
        import tensorflow as tf

        from xlnet_tf.checkpoint import load_fine_tuned, restore_for_inference
        from xlnet_tf.training.settings import SettingsError

        s = self.settings
        if checkpoint_path:
            self._check_run_of(checkpoint_path)
        release = tf.io.gfile.exists(os.path.join(s.model_dir, "xlnet_model.ckpt.index"))  # a release directory
        if checkpoint_path or tf.train.latest_checkpoint(s.model_dir) or release:
            return restore_for_inference(model, s.model_dir, checkpoint_path)
        if not s.init_checkpoint:
            raise MissingInputError(f"--model_dir={s.model_dir} holds no fine-tuned checkpoint and there is no "
                                    "--init_checkpoint: train first (--do_train) or point at a fine-tuned checkpoint")
        found = load_fine_tuned(model, s.init_checkpoint, getattr(self, "labels", None))
        if not found.read:
            raise SettingsError(f"--init_checkpoint={s.init_checkpoint}: not a fine-tuned checkpoint of this task: "
                                f"{found.why or 'it has no task head'}")
        return found.read

    def _check_run_of(self, checkpoint_path: str) -> None:
        """Refuses a checkpoint of another fine-tuning run (``--predict_ckpt`` in another run's directory) that
        was fine-tuned on another task, as its run record says: a head of the same shape would load, and this
        run's export or predictions would give that task's classes under this one's names."""
        from xlnet_tf import io_utils, tasks
        from xlnet_tf.finetuning.serving import read_run_record
        from xlnet_tf.training.settings import SettingsError

        folder = checkpoint_path if io_utils.isdir(checkpoint_path) else os.path.dirname(checkpoint_path)
        if not folder or io_utils.canonical(folder) == io_utils.canonical(self.settings.model_dir):
            return
        record = read_run_record(folder)
        if record is None:  # a checkpoint copied on its own, a release, a TF1 run: nothing says what it is
            return
        other = tasks.other_task_of_record(record, self.family, self.settings)
        if other:
            raise SettingsError(f"--predict_ckpt={checkpoint_path} is a checkpoint of the run in {folder}, "
                                f"fine-tuned on {other[0]} (its finetune_settings.json), but --model_dir="
                                f"{self.settings.model_dir} is a run of {other[1]}: use that run's own directory "
                                f"(--model_dir={folder})")

    def restored_model(self) -> tuple:
        """``(model, checkpoint)``: the task model restored for inference from ``--predict_ckpt`` (else as
        ``restore``)."""
        model = self.build_model()
        return model, self.restore(model, self.settings.predict_ckpt)

    def predicts_input_files(self) -> bool:
        """Whether ``--do_predict`` runs over input files of any size (``--predict_input_glob``, streamed by
        ``xlnet_tf.batch.prediction`` with the family's batch hooks) instead of the eval split."""
        return bool(getattr(self.settings, "predict_input_glob", None))

    @abc.abstractmethod
    def eval_data(self):
        """The examples ``--do_eval``/``--do_predict`` run on (an object ``infer`` and the writers understand)."""

    def check_eval_data(self) -> None:
        """Before training: fail now, not after it, if the eval data is unusable."""

    @abc.abstractmethod
    def infer(self, strategy, model, data):
        """The model's predictions on ``data`` (host values)."""

    def writes_predictions(self, predicting: bool) -> bool:
        """Whether the eval/predict stage writes prediction files (``predicting``: --do_predict on the eval data)."""
        return predicting

    def evaluates(self, data, evaluating: bool) -> bool:
        """Whether the eval/predict stage computes metrics (``evaluating``: --do_eval)."""
        return evaluating

    @abc.abstractmethod
    def metrics(self, data, outputs) -> dict:
        """The task's metrics of ``outputs`` against the labels of ``data``."""

    def write_eval_summaries(self, step: int, metrics: dict) -> None:
        """TensorBoard scalars of an evaluation, in ``<model_dir>/eval_<eval_name>``."""
        self.eval_summaries.write(f"eval_{self.eval_name}", step, metrics)

    @functools.cached_property
    def eval_name(self) -> str:
        """What names this evaluation's results in ``--model_dir``: ``eval_split``, prefixed with the task where
        the directory is a run of another task (MNLI mismatched evaluated by the matched run's model), whose own
        results it would otherwise replace."""
        from xlnet_tf import tasks
        from xlnet_tf.finetuning.serving import read_run_record

        try:
            record = read_run_record(self.settings.model_dir)
        except InputError as e:  # the results are written as they were before names depended on the record
            logging.warning("%s; the evaluation's results are named by its split", e)
            record = None
        if record is not None and tasks.other_task_of_record(record, self.family, self.settings):
            return f"{self.name}.{self.eval_split}"
        return self.eval_split

    @functools.cached_property
    def eval_summaries(self):
        """The run's TensorBoard writers of evaluations (one event file per directory for the run)."""
        from xlnet_tf.finetuning.trainer import EvalSummaries
        return EvalSummaries(self.settings.model_dir)

    @property
    def eval_split(self) -> str:
        return getattr(self.settings, "eval_split", "dev")

    def eval_report(self, metrics: dict, step: int, checkpoint: str, data, all_checkpoints: Optional[dict] = None
                    ) -> dict:
        """The evaluation report ``write_eval`` writes (every worker of a multi-worker run makes it, the chief
        writes it): task, split, step, checkpoint, metrics, main metric, data counts; with ``all_checkpoints``
        (--eval_all_ckpt) the best checkpoint by ``main_metric`` and every one's metrics."""
        report = dict(task=self.name, split=self.eval_split, step=step, checkpoint=checkpoint, metrics=metrics,
                      main_metric=self.main_metric, data=self.data_summary(data))
        if all_checkpoints:
            from xlnet_tf.training.setup import checkpoint_step

            best = max(all_checkpoints, key=lambda c: all_checkpoints[c][self.main_metric])
            report.update(best_checkpoint=best, best_step=checkpoint_step(best), best_metrics=all_checkpoints[best],
                          all_checkpoints=dict(all_checkpoints))
        return report

    def write_eval(self, metrics: dict, step: int, checkpoint: str, data, all_checkpoints: Optional[dict] = None
                   ) -> dict:
        """Writes the evaluation report (``eval_report``, as ``<model_dir>/eval_results.<eval_name>.json``) and
        TensorBoard summaries; returns the report."""
        from xlnet_tf.io_utils import write_json_atomic

        s, split = self.settings, self.eval_split
        report = self.eval_report(metrics, step, checkpoint, data, all_checkpoints)
        self.write_eval_summaries(step, metrics)
        write_json_atomic(os.path.join(s.model_dir, f"eval_results.{self.eval_name}.json"), report)
        logging.info("eval %s %s at step %d: %s | data %s", self.name, split, step,
                     {k: round(v, 4) for k, v in metrics.items()}, self.data_summary(data))
        if "best_checkpoint" in report:  # (--eval_all_ckpt) not necessarily the last, which is what is exported
            logging.info("eval %s %s: %s", self.name, split, best_line(report))
        return report

    @abc.abstractmethod
    def write_predictions(self, data, outputs, step: int, checkpoint: str) -> list:
        """Writes the prediction files of ``outputs`` into the predict directory; returns their paths."""

    def data_summary(self, data) -> dict:
        return {}

    @abc.abstractmethod
    def serving_info(self, step: int):
        """What an export of this task records for its clients (``xlnet_tf.finetuning.serving.ServingInfo``, built
        with ``family=self.family``: the family's hooks make the export's signatures)."""

    def export_info(self, step: int):
        """``serving_info(step)`` carrying this task's family, what the runner and ``cli.export`` hand the export
        writer (a family's ``ServingInfo`` built without ``family=`` gets it here)."""
        info = self.serving_info(step)
        return info if info.family is not None else dataclasses.replace(info, family=self.family)


def best_line(report: dict) -> str:
    """``best <main metric> <value> at <checkpoint> (step N)`` of an evaluation report with a best checkpoint
    (``Task.eval_report`` with --eval_all_ckpt), for the log and the run's last line."""
    metric = report["main_metric"]
    return (f"best {metric} {report['best_metrics'][metric]:.4g} at {report['best_checkpoint']} "
            f"(step {report['best_step']})")


@dataclasses.dataclass
class EncodedSplit:
    """A split encoded into the TFRecord cache (``finetuning.records.cache_features``): its path and meta."""
    split: str
    path: str
    meta: dict


class RecordsTask(Task):
    """A task whose examples are encoded once into a TFRecord cache of fixed-size features (the left-padded XLNet
    layout of ``finetuning.records``) with ``is_real_example`` and ``example_index`` columns: the train, eval and
    predict stages are done here. A family implements:

    * ``prepare(split) -> (path, meta)``: the cache of ``split`` (``records.cache_features``); ``meta`` has the
      counts (``num_examples``, ``num_skipped``, ``num_truncated``, ``skipped``) and the examples' ``guids``;
    * ``feature_spec`` (``{name: (shape, tf dtype)}``) and ``dummy_features`` (a padding example, numpy values);
    * ``build_model``, ``loss``, ``metrics(data, outputs)``, ``write_prediction_files(outputs, guids, split)``;
    * optionally ``keep`` (feature columns the metrics need besides ``label``) and ``main_metric``.
    """

    keep: tuple = ()

    @abc.abstractmethod
    def prepare(self, split: str) -> tuple:
        """``(path, meta)``: the TFRecord cache of ``split`` (see the class docstring)."""

    @property
    @abc.abstractmethod
    def feature_spec(self) -> dict:
        """``{name: (shape, tf dtype)}`` of the cached features."""

    @property
    @abc.abstractmethod
    def dummy_features(self) -> dict:
        """A padding example (numpy values of ``feature_spec``'s shapes)."""

    @abc.abstractmethod
    def write_prediction_files(self, outputs: dict, guids: list, split: str) -> list:
        """Writes the task's prediction files of ``outputs`` (rows ``guids`` of ``split``); returns their paths."""

    def encoded(self, split: str) -> EncodedSplit:
        return EncodedSplit(split, *self.prepare(split))

    def data_summary(self, data: EncodedSplit) -> dict:
        return data_summary(data.meta)

    def training_data(self, num_replicas: int) -> tuple:
        from xlnet_tf.finetuning import records

        s = self.settings
        data = self.encoded("train")
        logging.info("train data: %s", data_summary(data.meta))
        per_replica = s.train_batch_size // num_replicas

        def dataset_fn(ctx, start_step):
            return records.train_dataset(data.path, self.feature_spec, ctx, per_replica, s.shuffle_buffer, s.seed,
                                         data.meta["num_records"], start_step)
        return dataset_fn, {"data": data_summary(data.meta)}

    def check_eval_data(self) -> None:
        s = self.settings
        if s.do_eval or s.do_predict:  # e.g. a bad label in the eval data is an error now, not after training
            self.prepare(self.eval_split)

    def eval_data(self) -> EncodedSplit:
        return self.encoded(self.eval_split)

    def infer(self, strategy, model, data: EncodedSplit) -> dict:
        """Model outputs and the kept columns for the real examples of ``data``, in file order."""
        import numpy as np

        from xlnet_tf.finetuning import records
        from xlnet_tf.finetuning.trainer import predict

        s = self.settings
        batch = getattr(s, "eval_batch_size", s.predict_batch_size) if s.do_eval else s.predict_batch_size
        dataset = records.eval_dataset(data.path, self.feature_spec, self.dummy_features, data.meta["num_records"],
                                       batch)
        outputs = predict(strategy, model, dataset, keep=("label", "is_real_example", "example_index") + self.keep,
                          jit_compile=s.jit_compile)
        real = outputs["is_real_example"] == 1
        order = np.argsort(outputs["example_index"][real], kind="stable")
        return {k: v[real][order] for k, v in outputs.items()}

    def write_predictions(self, data: EncodedSplit, outputs: dict, step: int, checkpoint: str) -> list:
        """The family's prediction files, plus ``<task>.<split>.summary.json`` (step, checkpoint, files, counts)."""
        from xlnet_tf.io_utils import write_json_atomic

        guids = [data.meta["guids"][i] for i in outputs["example_index"]]
        written = self.write_prediction_files(outputs, guids, data.split)
        write_json_atomic(os.path.join(self.predict_dir, f"{self.name}.{data.split}.summary.json"),
                          dict(task=self.name, split=data.split, step=step, checkpoint=checkpoint, files=written,
                               data=data_summary(data.meta)))
        if data.meta.get("num_skipped"):
            logging.warning("%d %s rows were skipped and have no prediction (see %s)", data.meta["num_skipped"],
                            data.split, data.meta.get("skipped", [])[:3])
        logging.info("predictions: %s", written)
        return written


def weighted_loss(per_example, features: dict) -> tuple:
    """(sum, count) of per-example losses over the real examples (``is_real_example``; all if absent)."""
    import tensorflow as tf

    weights = tf.cast(features.get("is_real_example", tf.ones_like(per_example)), tf.float32)
    return tf.reduce_sum(per_example * weights), tf.reduce_sum(weights)


def write_logits(predict_dir: str, task: str, split: str, guids: list, logits, predictions: list) -> str:
    """``{task}.{split}.logits.json``: ``[{"index", "logits", "prediction"}]`` per example."""
    from xlnet_tf.io_utils import write_json_atomic

    return write_json_atomic(os.path.join(predict_dir, f"{task}.{split}.logits.json"),
                             [{"index": g, "logits": [float(x) for x in row], "prediction": p}
                              for g, row, p in zip(guids, logits, predictions)])
