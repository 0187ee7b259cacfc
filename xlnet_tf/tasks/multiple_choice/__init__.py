"""Multiple choice: RACE reading comprehension (``--task_name=race`` of run_classifier.py, run_race.py's defaults).

Data reading and encoding: ``race_data`` (the release layout, one ``article <sep> question-with-option <sep>
<cls>`` sequence per option, the feature cache). Head: ``multiple_choice_head.XLNetMultipleChoice`` (one logit per
option). Loss: softmax cross-entropy over the options. Metrics: accuracy overall and per level (middle, high).
Predictions: ``race.{split}.predictions.json`` ({question id: letter}; ids are unique, see ``race_data``) and
``race.{split}.logits.json``. The test split has answers: ``--do_eval --eval_split=test`` scores it
(``eval_results.test.json``, TensorBoard ``eval_test``). Serving:
``article`` [B], ``question`` [B], ``options`` [B, C] -> ``logits``, ``probabilities``, ``choice``; token ids
[B, C, S]. Batch prediction (rows of one or two texts) does not apply.
"""

from __future__ import annotations

import collections
import os

from xlnet_tf import hf
from xlnet_tf.tasks.multiple_choice import multiple_choice_hf_names, race_data
from xlnet_tf.tasks.base import RecordsTask, Serving, TaskFamily, weighted_loss, write_logits
from xlnet_tf.tokenization import PAIR_SPECIAL_TOKENS, max_qa_length_limit

KIND = "multiple_choice"
TASK = "race"
# run_race.py's defaults where they differ from run_classifier.py's.
RACE_DEFAULTS = dict(max_seq_length=512, train_steps=12000, learning_rate=2e-5, adam_epsilon=1e-6,
                     eval_batch_size=32)

hf.register_head(multiple_choice_hf_names.HEAD)


class MultipleChoiceServing(Serving):
    def text_inputs(self, info) -> dict:
        return {"article": [None], "question": [None], "options": [None, None]}

    def ids_spec(self, info) -> dict:
        import tensorflow as tf

        shape = [None, None, None]  # [batch, choices, seq]
        return dict(input_ids=tf.TensorSpec(shape, tf.int32, "input_ids"),
                    segment_ids=tf.TensorSpec(shape, tf.int32, "segment_ids"),
                    padding_mask=tf.TensorSpec(shape, tf.float32, "padding_mask"))

    def outputs_from_ids(self, model, features: dict, info) -> dict:
        import tensorflow as tf

        logits = model(features, training=False)["logits"]
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "choice": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    def outputs_from_text(self, model, preprocessor, texts: dict, info) -> dict:
        import tensorflow as tf

        from xlnet_tf.tasks.multiple_choice.multiple_choice_graph import encode_choices

        options = texts["options"]
        with tf.control_dependencies([tf.debugging.assert_positive(
                tf.shape(options)[1], message="options must hold at least one choice per question")]):
            options = tf.identity(options)
        features = encode_choices(preprocessor, texts["article"], texts["question"], options)
        return self.outputs_from_ids(model, features, info)

    def preprocessor_kwargs(self, info) -> dict:
        return {"max_qa_length": info.extras.get("max_qa_length", 128)}  # 128: older exports' default

    def serves_inputs(self, names: set) -> bool:
        return names == {"article", "question", "options"}


class MultipleChoiceFamily(TaskFamily):
    name = KIND
    # RACE's test/ has answers (the original run_race.py evaluated "dev or test"): --do_eval --eval_split=test
    # passes the settings' check; race_data refuses a file without "answers", naming it.
    test_split_labelled = True
    serving_class = MultipleChoiceServing
    text_model = "xlnet_tf.tasks.multiple_choice.multiple_choice_text_model:XLNetTextMultipleChoice"

    # -- settings ------------------------------------------------------------------------------------------------
    def task_names(self) -> tuple:
        return (TASK,)

    def flag_defaults(self, task_name: str) -> dict:
        return dict(RACE_DEFAULTS)

    def settings_errors(self, s) -> list:
        errors = []
        if not 1 <= s.max_qa_length <= max_qa_length_limit(s.max_seq_length):
            errors.append(f"--max_qa_length={s.max_qa_length} must be in [1, max_seq_length - {PAIR_SPECIAL_TOKENS} "
                          f"= {max_qa_length_limit(s.max_seq_length)}]")
        if s.long_document != "truncate":
            errors.append(f"--long_document={s.long_document}: {TASK} reads one sequence per option; long documents "
                          "are read by classification and regression tasks")
        if s.high_only and s.middle_only:
            errors.append("--high_only and --middle_only exclude each other")
        if s.predict_input_glob:
            errors.append("--predict_input_glob: batch prediction handles classification and regression tasks, "
                          f"not {TASK}")
        return errors

    def metric_names(self, task_name: str) -> tuple:
        levels = race_data.LEVELS  # finetuning.metrics.multiple_choice_metrics
        return (("accuracy",) + tuple(f"accuracy_{level}" for level in levels) + ("num_examples",)
                + tuple(f"num_{level}" for level in levels) + ("loss",))

    def task(self, settings) -> "RaceTask":
        return RaceTask(self, settings)


class RaceTask(RecordsTask):
    """RACE in a run_classifier.py run."""

    name = TASK
    keep = ("level",)
    sequences_per_example = race_data.NUM_CHOICES

    def __init__(self, family, settings):
        super().__init__(family, settings)
        self.labels = list(race_data.ANSWERS)
        s = settings
        self.levels = ("high",) if s.high_only else ("middle",) if s.middle_only else race_data.LEVELS

    def prepare(self, split: str) -> tuple:
        s = self.settings
        output_dir = s.output_dir or os.path.join(s.model_dir, "features")
        return race_data.prepare_features(s.data_dir, split, self.tokenizer, s.max_seq_length, s.max_qa_length,
                                          output_dir, self.levels, s.overwrite_data)

    @property
    def feature_spec(self) -> dict:
        return race_data.feature_spec(self.settings.max_seq_length)

    @property
    def dummy_features(self) -> dict:
        return race_data.dummy_features(self.settings.max_seq_length)

    def build_model(self):
        from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice

        s = self.settings
        return XLNetMultipleChoice(self.model_config, summary_type=s.summary_type, use_summ_proj=s.use_summ_proj,
                                   dtype=s.dtype)

    def loss(self, features: dict, outputs: dict) -> tuple:
        import tensorflow as tf

        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["label"], tf.int32), logits=outputs["logits"])
        return weighted_loss(per_example, features)

    def metrics(self, data, outputs: dict) -> dict:
        import numpy as np

        from xlnet_tf.finetuning import metrics

        logits, labels = outputs["logits"], outputs["label"]
        result = metrics.multiple_choice_metrics(logits, labels, outputs["level"], race_data.LEVELS)
        result["loss"] = metrics.mean_softmax_cross_entropy(logits, labels.astype(np.int64))
        return result

    def write_prediction_files(self, outputs: dict, guids: list, split: str) -> list:
        """``race.{split}.predictions.json`` ({id: letter}) and ``race.{split}.logits.json``."""
        import numpy as np

        from xlnet_tf.io_utils import write_json_atomic

        logits = outputs["logits"]
        predictions = [self.labels[i] for i in np.argmax(logits, axis=-1)]
        # {id: letter} keeps one row of an id: race_data refuses a shared one when it reads the files, and this
        # refuses any that reached here (features encoded by another reader) rather than drop predictions.
        repeated = sorted(g for g, n in collections.Counter(guids).items() if n > 1)
        if repeated:
            from xlnet_tf.errors import InputError

            raise InputError(f"{split}: {len(repeated)} question id(s) given to more than one question, e.g. "
                             f"{repeated[:3]}: re-encode the features (--overwrite_data) or give each file its own id")
        return [write_json_atomic(os.path.join(self.predict_dir, f"{self.name}.{split}.predictions.json"),
                                  dict(zip(guids, predictions))),
                write_logits(self.predict_dir, self.name, split, guids, logits, predictions)]

    def serving_info(self, step: int):
        from xlnet_tf.finetuning.serving import ServingInfo

        s = self.settings
        return ServingInfo(kind=KIND, task=self.name, max_seq_length=s.max_seq_length, lower_case=s.uncased,
                           labels=self.labels, pair=False, global_step=step,
                           extras=dict(max_qa_length=s.max_qa_length), family=self.family)
