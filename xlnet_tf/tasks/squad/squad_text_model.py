"""The SQuAD family's Keras model on raw text: ``XLNetTextSquad`` (``xlnet_tf.XLNetTextSquad``), built on the text
models' base (``xlnet_tf.tasks.text_models``), and ``window_labels`` (its training labels, in the graph)."""

from __future__ import annotations

from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from xlnet_tf.checkpoint import load_task_weights
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.squad.squad_answers import (answerable_inputs, answers_from_windows, squad_window_losses,
                                                valid_utf8)
from xlnet_tf.tasks.squad.squad_data import INFERENCE_KEYS
from xlnet_tf.tasks.squad.squad_graph import squad_windows
from xlnet_tf.tasks.squad.squad_head import XLNetSquad
from xlnet_tf.tasks.text_data import (DEFAULT_BATCH_SIZE, as_strings, element_x, end_of_data_expected, is_encoded,
                                      streamed_dataset, yields_batches)
from xlnet_tf.tasks.text_models import TextTaskModel, build_parts, checkpoint_source

LABEL_KEYS = ("start_positions", "end_positions", "is_impossible")
MISPLACED = ("an answer that is not where its labels put it (answer_start and the answer's text or end, in "
             "characters of its context; run_squad.py skips these)")
ANSWER_KEYS = ("example_index", "token_start_char", "token_end_char", "token_is_max_context")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextSquad(TextTaskModel):
    """SQuAD (1.1 and 2.0) on raw strings: ``squad_graph.squad_windows`` + ``XLNetSquad``.

    ``predict((questions, contexts))`` -- tf.string [B] each, as a tuple (or a dict with keys ``question`` and
    ``context``) -- gives ``run_squad.py --do_predict``'s answer per question, chosen by
    ``squad_answers.best_answers``' rules (what the SavedModel of ``export`` serves), each [B]: ``text`` (bytes),
    ``start_char``/``end_char`` (int32, ``context[start_char:end_char] == text`` in characters, -1 without an
    answer span), ``null_odds`` (float32; above a threshold tuned on dev data the question counts as
    unanswerable, SQuAD 2.0). Each question's context is cut into W >= B windows of ``seq_length`` tokens
    (``doc_stride`` apart) in the tf.data pipeline; the network scores them in steps of ``window_batch_size``
    windows (``call``: the windows' ``input_ids``, ``segment_ids``, ``padding_mask``, ``p_mask``, ``cls_index``
    -> the head's outputs); the answer is then the best one over a question's windows, outside the network's
    step. ``predict`` on windows (a dict with ``input_ids``) gives the head's outputs per window.

    ``fit``/``evaluate`` take ``((questions, contexts), (answer_starts, answers, is_impossible))``: the answer's
    first character in the context int [B], the answer text tf.string [B] (or its end character, exclusive, int
    [B]) and is_impossible bool/int/float [B] (SQuAD 2.0; 0 for SQuAD 1.1); or windows already encoded: a dict
    with ``input_ids``, ``segment_ids``, ``padding_mask``, ``p_mask``, ``cls_index`` [W, ...] and the labels
    ``start_positions``, ``end_positions``, ``is_impossible`` [W] (in it, or as ``y`` in a dict). Each window
    gets the labels of ``squad_data``'s training features (``window_labels``); the windows of the questions'
    batches are regrouped into steps of ``window_batch_size`` windows (``run_squad.py``'s batch sizes count
    windows too), the last one filled up with windows of weight 0, and the loss is ``squad_loss``'s mean over a
    step's windows (weighted by a question's ``sample_weight`` if given), as ``run_squad.py`` trains; no ``loss``
    is passed to ``compile``. Under a multi-replica ``tf.distribute`` strategy every replica gets the same number
    of windows (``window_batch_size`` rounded up to a multiple of the replicas) and the step computes what one
    device computes. Unlike ``run_squad.py`` nothing is skipped: an answer that no window holds whole trains
    every window as "no answer"; an answer that is not where its labels put it (``misplaced_answers``: outside
    the context, or not its text there) is refused, naming the row (arrays) or the question (a dataset).
    ``batch_size`` (arrays) counts the questions preprocessed together.
    """

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, max_answer_length: int = 64,
                 window_batch_size: int = DEFAULT_BATCH_SIZE, **kwargs):
        super().__init__(preprocessor, network, **kwargs)
        if not isinstance(max_answer_length, int) or max_answer_length < 1:
            raise ValueError(f"max_answer_length={max_answer_length!r}: must be a positive int")
        if not isinstance(window_batch_size, int) or window_batch_size < 1:
            raise ValueError(f"window_batch_size={window_batch_size!r}: must be a positive int")
        self.max_answer_length, self.window_batch_size = max_answer_length, window_batch_size
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 512, *, max_query_length: int = 64, doc_stride: int = 128,
                        max_answer_length: int = 64, start_n_top: int = 5, end_n_top: int = 5,
                        window_batch_size: int = DEFAULT_BATCH_SIZE, config=None, spiece_model=None,
                        lower_case: Optional[bool] = None, dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None,
                        new_head: bool = False) -> "XLNetTextSquad":
        """As ``XLNetTextClassifier.from_checkpoint``; the window and beam settings are ``run_squad.py``'s flags
        (a fine-tuned checkpoint: the SQuAD head of ``run_squad.py``, of the original's TF1 layout or of HF's
        ``XLNetForQuestionAnswering``)."""
        source = checkpoint_source(path)
        preprocessor, config = build_parts(source, config, spiece_model, seq_length, lower_case, dropout, dropatt,
                                            max_query_length=max_query_length, doc_stride=doc_stride)
        network = XLNetSquad(config, start_n_top=start_n_top, end_n_top=end_n_top, dtype=dtype)
        load_task_weights(network, source, new_head)
        return cls(preprocessor, network, max_answer_length=max_answer_length, window_batch_size=window_batch_size,
                   name=name)

    @classmethod
    def from_run(cls, network, info, preprocessor) -> "XLNetTextSquad":
        return cls(preprocessor, network, max_answer_length=info.extras["max_answer_length"])

    @staticmethod
    def _texts(inputs) -> tuple:
        """(questions, contexts) [B] each from a tuple/list or a dict of the two."""
        if isinstance(inputs, dict):
            if not {"question", "context"} <= set(inputs):
                raise ValueError(f"inputs: a dict of 'question' and 'context', got keys {sorted(inputs)}")
            return inputs["question"], inputs["context"]
        if not (isinstance(inputs, (tuple, list)) and len(inputs) == 2):
            raise ValueError(f"inputs: expected (questions, contexts), got {type(inputs).__name__}")
        return tuple(inputs)

    def _arrays(self, x, y=None) -> tuple:
        if isinstance(x, list) and len(x) == 2 and not isinstance(x[0], (str, bytes)):
            x = tuple(x)
        if isinstance(y, list) and len(y) == 3 and not isinstance(y[0], (str, bytes, int, float)):
            y = tuple(y)
        return x, y

    def call(self, inputs, training=None):
        return self.network(self._token_ids(inputs), training=training)

    # -- the windows ------------------------------------------------------------------------------------------
    def preprocess(self, x) -> dict:
        """``(questions, contexts)`` [B] -> their windows (``squad_windows``), as ``best_answers`` makes
        them: invalid UTF-8 replaced, no window for a question ``run_squad.py`` skips."""
        question, context = self._texts(x)
        question, context, skipped = answerable_inputs(as_strings(question), as_strings(context))
        return squad_windows(self.preprocessor, question, tf.where(skipped, "", context))

    def training_windows(self, inputs, labels) -> dict:
        """The windows of ``squad_windows`` for ``inputs`` (questions, contexts [B]) with the labels of
        ``labels`` = (answer_starts int [B], answers: text tf.string [B] or end characters (exclusive) int [B],
        is_impossible [B]) per window (``window_labels``): what the train step feeds ``XLNetSquad``. An answer
        that is not where its labels put it (``misplaced_answers``) fails the step, naming its question."""
        question, context = self._texts(inputs)
        answer_start, answer_end, answer, is_impossible = self._answer_labels(labels)
        wrong = misplaced_answers(valid_utf8(as_strings(context)), answer_start, answer_end, answer, is_impossible)
        row = tf.argmax(tf.cast(wrong, tf.int32))
        check = tf.debugging.Assert(~tf.reduce_any(wrong), [
            f"y: {MISPLACED}; question:", tf.gather(as_strings(question), row), "answer_start:",
            tf.gather(answer_start, row), "end:", tf.gather(answer_end, row), "answer:",
            tf.gather(answer, row) if answer is not None else "(given by its end)"])
        windows = squad_windows(self.preprocessor, question, context)
        with tf.control_dependencies([check]):
            windows.update(window_labels(windows, answer_start, answer_end, is_impossible))
        return windows

    @staticmethod
    def _answer_labels(labels) -> tuple:
        """fit's ``y`` -> ``(answer_start, answer_end, answer, is_impossible)`` [B] each: int32, int32 (exclusive;
        squad_data's end: start + len(text) in characters), the text (valid UTF-8) or None, bool."""
        if isinstance(labels, dict):
            labels = tuple(labels[k] for k in ("answer_start", "answer", "is_impossible"))
        if not (isinstance(labels, (tuple, list)) and len(labels) == 3):
            raise ValueError("labels: expected (answer_starts, answers, is_impossible), got "
                             f"{type(labels).__name__}")
        answer_start, answer, is_impossible = labels
        answer_start = tf.cast(answer_start, tf.int32)
        answer = tf.convert_to_tensor(answer)
        if answer.dtype == tf.string:
            answer = valid_utf8(answer)
            return (answer_start, answer_start + tf.strings.length(answer, unit="UTF8_CHAR"), answer,
                    tf.cast(is_impossible, tf.bool))
        return answer_start, tf.cast(answer, tf.int32), None, tf.cast(is_impossible, tf.bool)

    def _check_answers(self, x, y):
        """Arrays' labels, refused before the pipeline is built, naming the row (``training_windows`` checks a
        dataset's as it reads them)."""
        question, context = self._texts(x)
        answer_start, answer_end, answer, is_impossible = self._answer_labels(y)
        context = valid_utf8(as_strings(context))
        wrong = misplaced_answers(context, answer_start, answer_end, answer, is_impossible)
        if bool(tf.reduce_any(wrong)):
            rows = np.flatnonzero(wrong.numpy())
            i = int(rows[0])
            given = f"answer {answer[i].numpy().decode()!r}" if answer is not None else f"end {int(answer_end[i])}"
            raise ValueError(f"y: {MISPLACED}: row {i} of {len(wrong)} ({len(rows)} such rows), question "
                             f"{as_strings(question)[i].numpy().decode(errors='replace')!r}: answer_start "
                             f"{int(answer_start[i])}, {given}, its context has "
                             f"{int(tf.strings.length(context[i], unit='UTF8_CHAR'))} "
                             "characters")

    @tf.function(autograph=False, reduce_retracing=True)  # traced once (see _preprocessed)
    def _labelled_windows(self, x, y, sample_weight) -> dict:
        """One batch of ``fit``/``evaluate``'s data -> its windows: the network inputs, labels and a weight each."""
        if is_encoded(x):
            windows = dict(x)
            if y is not None:
                windows.update(y if isinstance(y, dict) else dict(zip(LABEL_KEYS, y)))
            missing = [k for k in INFERENCE_KEYS + LABEL_KEYS if k not in windows]
            if missing:
                raise ValueError(f"inputs: encoded SQuAD windows lack {', '.join(missing)}")
            weight = tf.ones(tf.shape(windows["input_ids"])[:1]) if sample_weight is None else sample_weight
        else:
            windows = self.training_windows(x, y)
            weight = tf.ones(tf.shape(windows["example_index"])) if sample_weight is None else tf.gather(
                tf.reshape(sample_weight, [-1]), windows["example_index"])
        features = {k: windows[k] for k in INFERENCE_KEYS + LABEL_KEYS}
        return dict(features, weight=tf.cast(weight, tf.float32))

    def _steps(self, windows: tf.data.Dataset, labelled: bool) -> tf.data.Dataset:
        """Windows regrouped into steps of ``window_batch_size`` (rounded up to a multiple of the replicas, so that
        each replica gets the same shapes and the gradients' all-reduce agrees), the last step filled up with
        all-zero windows: weight 0 in training, ``example_index`` -1 in prediction. In training an element is
        ``(inputs, labels, weights)`` with the weights summing to 1 over the step (across the replicas): each
        replica's loss is its part of the step's mean, and the summed gradients are one device's."""
        replicas = self.distribute_strategy.num_replicas_in_sync
        size = -(-self.window_batch_size // replicas) * replicas

        def fill(name, values):
            missing = size - tf.shape(values)[0]
            padding = tf.fill(tf.concat([[missing], tf.shape(values)[1:]], 0),
                              tf.constant(-1 if name == "example_index" else 0, values.dtype))
            values = tf.concat([values, padding], axis=0)
            values.set_shape([size] + values.shape[1:].as_list())
            return values

        def step(batch):
            batch = {k: fill(k, v) for k, v in batch.items()}
            if not labelled:
                return batch
            weight = batch.pop("weight")
            labels = {k: batch.pop(k) for k in LABEL_KEYS}
            return batch, labels, tf.math.divide_no_nan(weight, tf.reduce_sum(weight))

        steps = windows.unbatch().batch(size)
        if not labelled:
            steps = _at_least_one(steps)
        return steps.map(step, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
        """``fit``/``evaluate``'s data as steps of labelled windows (``_steps``)."""
        if y is not None and not yields_batches(x) and not is_encoded(x):
            self._check_answers(*self._arrays(x, y))
        dataset = self._source(x, y, sample_weight, batch_size, shuffle)
        is_tuple = isinstance(dataset.element_spec, tuple)

        def windows(*element):
            return self._labelled_windows(*keras.utils.unpack_x_y_sample_weight(
                element if is_tuple else element[0]))

        return self._steps(dataset.map(windows, num_parallel_calls=tf.data.AUTOTUNE), labelled=True)

    # -- training: the teacher-forced head and squad_loss, weighted per window ---------------------------------
    @property
    def metrics(self):
        return [self.loss_tracker]

    def _loss(self, x, y, sample_weight, training: bool) -> tuple:
        """``(loss, weight)`` of this replica's windows: the sum of their losses times their weights (its part of
        the step's mean), and the sum of their weights (of the step's 1)."""
        features = dict(x, **y)
        losses = squad_window_losses(features, self.network(features, training=training))
        if sample_weight is None:  # windows not from _steps (train_on_batch): their mean
            sample_weight = tf.fill(tf.shape(losses), 1.0 / tf.cast(tf.size(losses), losses.dtype))
        weight = tf.cast(sample_weight, losses.dtype)
        return tf.reduce_sum(losses * weight), tf.reduce_sum(weight)

    def train_step(self, data):
        # Keras' train step calls the model on x and a compiled loss on its output; SQuAD's loss needs the
        # teacher-forced head (the labelled start, per window) instead, so the step is written out here. The
        # weights already divide by the whole step's windows: the replicas' gradients are summed, not averaged.
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            loss, weight = self._loss(x, y, sample_weight, training=True)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        self._track(loss, weight)
        return self.get_metrics_result()

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        self._track(*self._loss(x, y, sample_weight, training=False))
        return self.get_metrics_result()

    def _track(self, loss, weight):
        # The loss metric sums totals and counts over the replicas: each adds its windows' mean with their share
        # of the step's weight, so the metric is the mean of the steps' losses with any number of replicas. (The
        # count must depend on the data: Keras runs the step function once more at the end of a dataset of
        # unknown length, where only ops independent of the failing get_next execute.)
        self.loss_tracker.update_state(tf.math.divide_no_nan(loss, weight), sample_weight=weight)

    # -- prediction: the network per window in Keras' loop, the answers from its outputs ---------------------
    def predict_step(self, data):
        x = keras.utils.unpack_x_y_sample_weight(data)[0]
        outputs = dict(self(x, training=False))
        # The windows' positions and characters pass through, for the answers after the loop.
        outputs.update({k: x[k] for k in ANSWER_KEYS if k in x})
        return outputs

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        x = streamed_dataset(x, self._streamed_batch)
        # Keras' own predict below (not TextTaskModel's, which preprocesses): its data are windows already.
        if is_encoded(element_x(x.element_spec) if isinstance(x, tf.data.Dataset) else x):
            return keras.Model.predict(self, x, batch_size=batch_size, verbose=verbose, steps=steps,
                                       callbacks=callbacks)
        question, context = self._question_texts(x)
        if int(tf.size(question)) == 0:
            raise ValueError("x: no questions (an empty batch)")
        rows = tf.data.Dataset.from_tensor_slices((tf.range(tf.size(question)), question, context))

        encoded = rows.batch(batch_size or DEFAULT_BATCH_SIZE).map(self._answer_windows,
                                                                   num_parallel_calls=tf.data.AUTOTUNE)
        with end_of_data_expected(steps):
            outputs = keras.Model.predict(self, self._steps(encoded, labelled=False), verbose=verbose, steps=steps,
                                          callbacks=callbacks)
        real = outputs["example_index"] >= 0  # not a window filling up the last step
        outputs = {k: v[real] for k, v in outputs.items()}
        _, context, skipped = answerable_inputs(question, context)
        answers = answers_from_windows(outputs, outputs, context, skipped, self.network.start_n_top,
                                       self.network.end_n_top, self.max_answer_length)
        return {k: v.numpy() for k, v in answers.items()}

    @tf.function(autograph=False, reduce_retracing=True)  # traced once (see _preprocessed)
    def _answer_windows(self, index, question, context) -> dict:
        """``predict``'s windows of the questions [B] at rows ``index`` [B] of all its inputs."""
        windows = self.preprocess((question, context))
        windows["example_index"] = tf.gather(index, windows["example_index"])  # the row in all of x
        windows["token_is_max_context"] = tf.cast(windows["token_is_max_context"], tf.int32)
        return {k: windows[k] for k in INFERENCE_KEYS + ANSWER_KEYS}

    def _question_texts(self, x) -> tuple:
        """``predict``'s questions and contexts, all of them: tf.string [N] each (a dataset of batches of
        ``(questions, contexts)``, ``((questions, contexts),)`` or with labels, is read once)."""
        if not isinstance(x, tf.data.Dataset):
            question, context = self._texts(self._arrays(x)[0])
            return as_strings(question), as_strings(context)
        spec = x.element_spec
        # (questions, contexts) as the whole element: Keras' rule would read (x, y), but one string tensor cannot
        # be SQuAD's x, so the pair can only be the two texts.
        pair = isinstance(spec, tuple) and len(spec) == 2 and all(
            isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in spec)
        parts = [self._texts(element if pair else element_x(element)) for element in x]
        if not parts:
            raise ValueError("x: the dataset is empty")
        return tuple(tf.concat([tf.reshape(as_strings(p[i]), [-1]) for p in parts], axis=0) for i in (0, 1))

    _export_task = "squad"

    def export(self, export_dir: str, task: Optional[str] = None, *, format: str = "tf_saved_model") -> str:
        """As ``XLNetTextClassifier.export``: the SQuAD layout (``serving_default`` takes ``question`` and
        ``context`` and answers as ``predict``; ``serve_ids`` gives the head's beam), as ``run_squad.py
        --export_dir`` writes it."""
        return super().export(export_dir, task=task, format=format)

    def _serving_kind(self) -> str:
        return "squad"

    def _serving_extras(self) -> dict:
        from xlnet_tf.tasks.squad import SquadSettings

        pre, network = self.preprocessor, self.network
        # n_best_size: run_squad.py's default, recorded as its export does (the served answer does not use it).
        return dict(max_query_length=pre.max_query_length, doc_stride=pre.doc_stride,
                    max_answer_length=self.max_answer_length, start_n_top=network.start_n_top,
                    end_n_top=network.end_n_top, n_best_size=SquadSettings.n_best_size)

    def get_config(self):
        return dict(super().get_config(), max_answer_length=self.max_answer_length,
                    window_batch_size=self.window_batch_size)


def _at_least_one(batches: tf.data.Dataset) -> tf.data.Dataset:
    """``batches``, or one batch of no rows where it has none: Keras' predict fails on a dataset without a batch
    (here: questions without a window, each an empty answer), and whether there is one is known only as the
    pipeline runs."""
    none = {k: tf.zeros([0] + spec.shape[1:].as_list(), spec.dtype) for k, spec in batches.element_spec.items()}

    def mark(batch):
        return False, batch

    def needed(i, marked):  # the empty batch only where it comes first
        return (i == 0) | ~marked[0]

    def unmark(i, marked):
        return marked[1]

    return batches.map(mark).concatenate(tf.data.Dataset.from_tensors((True, none))).enumerate().filter(
        needed).map(unmark)


def misplaced_answers(context, answer_start, answer_end, answer=None, is_impossible=None):
    """Which answers are not where their labels put them, bool [B]: outside the context's characters (``start <
    0``, ``end <= start`` or ``end`` past its last character) or, given the answer text [B], not the context's
    text there (what ``squad_data.read_squad_file`` skips as "answer not at its offset"). Impossible questions'
    labels are not read. ``context`` is UTF-8 with invalid bytes replaced (U+FFFD), as the answer text."""
    length = tf.strings.length(context, unit="UTF8_CHAR")
    wrong = (answer_start < 0) | (answer_end <= answer_start) | (answer_end > length)
    if answer is not None:
        there = tf.strings.substr(context, tf.clip_by_value(answer_start, 0, length),
                                  tf.strings.length(answer, unit="UTF8_CHAR"), unit="UTF8_CHAR")
        wrong |= tf.not_equal(there, answer)
    return wrong if is_impossible is None else wrong & ~is_impossible


def window_labels(windows: dict, answer_start: tf.Tensor, answer_end: tf.Tensor, is_impossible: tf.Tensor) -> dict:
    """The training labels of ``squad_windows``' windows, as ``squad_data``'s training features have
    them (squad_lib_sp's rules), from each token's characters (``token_start_char``/``token_end_char`` [W, S]).

    answer_start, answer_end: the answer's first character and its end (exclusive) in the context, int32 [B];
    is_impossible: bool [B]. The answer's first token is the first paragraph token ending at or after its first
    character (a token's characters begin with the whitespace before its word), its last token the last one
    starting at or before its last character. A window holding both gets their positions; any other window, and
    every window of an impossible question, points both at its ``cls_index`` and is impossible. Returns
    ``start_positions``, ``end_positions`` int32 [W] and ``is_impossible`` float32 [W].
    """
    example = windows["example_index"]  # [W]
    first_char, last_char = windows["token_start_char"], windows["token_end_char"]  # [W, S], -1: not paragraph
    batch = tf.shape(answer_start)[0]
    first = tf.gather(answer_start, example)[:, None]
    last = tf.gather(answer_end, example)[:, None] - 1
    ends_after = (last_char >= 0) & (last_char >= first)
    starts_before = (first_char >= 0) & (first_char <= last)
    # The two tokens over the whole context (a window sees only its part), named by their characters: the
    # answer's first token is the one ending first among those ending after its start, and so on.
    start_key = tf.math.unsorted_segment_min(
        tf.reduce_min(tf.where(ends_after, last_char, tf.int32.max), axis=1), example, batch)
    end_key = tf.math.unsorted_segment_max(
        tf.reduce_max(tf.where(starts_before, first_char, -1), axis=1), example, batch)
    start_here = ends_after & (last_char == tf.gather(start_key, example)[:, None])
    end_here = starts_before & (first_char == tf.gather(end_key, example)[:, None])
    seq_length = tf.shape(first_char)[1]
    start = tf.argmax(tf.cast(start_here, tf.int32), axis=1, output_type=tf.int32)  # the first such position
    end = seq_length - 1 - tf.argmax(tf.cast(tf.reverse(end_here, [1]), tf.int32), axis=1, output_type=tf.int32)
    inside = (tf.reduce_any(start_here, axis=1) & tf.reduce_any(end_here, axis=1)
              & ~tf.gather(is_impossible, example))
    cls_index = windows["cls_index"]
    return {"start_positions": tf.where(inside, start, cls_index), "end_positions": tf.where(inside, end, cls_index),
            "is_impossible": 1.0 - tf.cast(inside, tf.float32)}
