"""Keras-style inputs of the text models (``tasks.text_models.TextTaskModel``) as tf.data pipelines: arrays (Python
lists, numpy arrays, tensors, in tuples and dicts) batched as Keras batches them (``array_dataset``,
``split_arrays``: ``validation_split``), Python generators and ``keras.utils.PyDataset``s as datasets
(``streamed_dataset``), what a dataset element's ``x`` is, reading a dataset once (``read_once``) and class labels
checked before a loss truncates them (``checked_class_labels``)."""

from __future__ import annotations

import collections.abc
import concurrent.futures
import contextlib
import itertools
import warnings
from typing import Optional

import keras
import numpy as np
import tensorflow as tf


# Keras' batch size for arrays; the strings of a batch are preprocessed together.
DEFAULT_BATCH_SIZE = 32


def as_tensors(value):
    """Python lists, numpy arrays and tensors (inside tuples and dicts) as tensors, so that tf.data slices them as
    Keras slices arrays: a list is one array (of strings, numbers, or lists of strings for multiple-choice
    options), a tuple or dict a structure of arrays."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: as_tensors(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(as_tensors(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        value = value.tolist()  # strings (str or bytes) in an object array
    return tf.convert_to_tensor(value)


def as_strings(value) -> tf.Tensor:
    return tf.convert_to_tensor(value.tolist() if isinstance(value, np.ndarray) and value.dtype.kind == "O" else value,
                                tf.string)


def num_rows(data) -> int:
    return int(tf.nest.flatten(data)[0].shape[0])


def array_parts(x, y=None, sample_weight=None) -> tuple:
    """``(x, y, sample_weight)`` as tensors (see ``as_tensors``; None stays None), each with the rows of ``x``, at
    least one."""
    parts = {"x": as_tensors(x), "y": as_tensors(y), "sample_weight": as_tensors(sample_weight)}
    # Arrays have rows, as Keras' do: a bare string is not taken as a batch of one (predict("text") would return
    # a batch where the caller may expect one result), it is refused with what to pass.
    for name, part in parts.items():
        if part is not None and any(t.shape.rank == 0 for t in tf.nest.flatten(part)):
            example = "a list of strings, e.g. [text] for one" if any(
                t.dtype == tf.string for t in tf.nest.flatten(part)) else "a list or array with one row per example"
            raise ValueError(f"{name}: a single value, not a batch: pass {example}")
    rows = {name: [int(t.shape[0]) for t in tf.nest.flatten(part)] for name, part in parts.items() if part is not None}
    if not rows.get("x") or rows["x"][0] == 0:
        raise ValueError("x: no examples (an empty batch)")
    for name, counts in rows.items():
        if any(count != rows["x"][0] for count in counts):
            raise ValueError(f"{name}: {', '.join(map(str, counts))} rows for the {rows['x'][0]} examples of x")
    return parts["x"], parts["y"], parts["sample_weight"]


def array_dataset(x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
    """Arrays (see ``as_tensors``) as a tf.data pipeline of batches, the way Keras batches arrays: ``batch_size``
    rows (default 32) of ``x`` / ``(x, y)`` / ``(x, y, sample_weight)``, reshuffled every epoch if ``shuffle``."""
    parts = array_parts(x, y, sample_weight)
    dataset = tf.data.Dataset.from_tensor_slices(keras.utils.pack_x_y_sample_weight(*parts))
    if shuffle:
        dataset = dataset.shuffle(num_rows(parts[0]), reshuffle_each_iteration=True)
    return dataset.batch(batch_size or DEFAULT_BATCH_SIZE)


def streamed_dataset(x, as_arrays=lambda batch: batch):
    """A Python generator or iterator of batches, or a ``keras.utils.PyDataset``, as a ``tf.data.Dataset`` of the
    same batches (Keras' loops take them), each made arrays by ``as_arrays`` (lists are arrays, as ``fit``'s); any
    other ``x`` as it is. A generator is read once, as Keras reads one (an epoch after it ends has no data); a
    PyDataset every epoch, in order, its batches read ahead (up to ``max_queue_size``) by ``workers`` threads
    (threads also where it asks for processes: the batches stay in this process). The first batch fixes the
    structure and dtypes of all."""
    if not is_streamed(x):
        return x
    if isinstance(x, keras.utils.PyDataset):
        def batches():
            x.on_epoch_begin()
            indices = itertools.count() if x.num_batches is None else range(x.num_batches)  # None: endless
            if x.workers > 1:
                yield from _read_ahead(x, indices)
            else:
                for i in indices:
                    yield x[i]
            x.on_epoch_end()
    else:
        def batches():
            return x
    source = iter(batches())
    try:
        first = as_tensors(as_arrays(next(source)))
    except StopIteration:
        raise ValueError(f"x: the {source_kind(x)} yields no batches") from None

    def as_numpy(tensors):
        return tf.nest.map_structure(lambda t: t.numpy(), tensors)

    def generate():
        nonlocal first, source
        if first is None:  # a later epoch (a PyDataset's; a generator's has ended)
            source = iter(batches())
        else:
            yield as_numpy(first)
            first = None
        for batch in source:
            yield as_numpy(as_tensors(as_arrays(batch)))

    spec = tf.nest.map_structure(lambda t: tf.TensorSpec([None] * t.shape.rank, t.dtype), first)
    return tf.data.Dataset.from_generator(generate, output_signature=spec)


def _read_ahead(x: keras.utils.PyDataset, indices):
    """``x[i]`` for ``i`` in ``indices``, in order, read by ``x.workers`` threads up to ``x.max_queue_size`` ahead
    (a consumer that stops early waits for those already started)."""
    with concurrent.futures.ThreadPoolExecutor(x.workers, thread_name_prefix="py_dataset") as pool:
        pending = collections.deque()
        for i in indices:
            pending.append(pool.submit(x.__getitem__, i))
            if len(pending) >= max(x.max_queue_size, x.workers):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def is_streamed(x) -> bool:
    """Whether ``x`` is a Python generator or iterator, or a ``keras.utils.PyDataset`` (``streamed_dataset``)."""
    return isinstance(x, (keras.utils.PyDataset, collections.abc.Iterator))


def yields_batches(x) -> bool:
    """Whether ``x`` yields its batches itself (a tf.data.Dataset, a generator, a PyDataset), not arrays to batch."""
    return isinstance(x, tf.data.Dataset) or is_streamed(x)


def source_kind(x) -> str:
    """What ``x`` is, in an error message: a dataset, PyDataset or generator (any iterator)."""
    if isinstance(x, tf.data.Dataset):
        return "tf.data.Dataset"
    return "PyDataset" if isinstance(x, keras.utils.PyDataset) else "generator"


def split_arrays(x, y, sample_weight, validation_split: float):
    """Keras' ``validation_split`` on arrays: the last ``validation_split`` of the rows (before any shuffling) are
    the validation data. Returns ``((x, y, sample_weight), (x, y, sample_weight))``."""
    data = tuple(as_tensors(part) for part in (x, y, sample_weight))
    cut = int(np.floor(num_rows(data) * (1.0 - validation_split)))

    def rows(part, take):
        return None if part is None else tf.nest.map_structure(take, part)

    return (tuple(rows(part, lambda t: t[:cut]) for part in data),
            tuple(rows(part, lambda t: t[cut:]) for part in data))


def element_x(spec):
    """The ``x`` of a dataset element (or of its ``element_spec``), by Keras' rule: a tuple is ``(x,)``,
    ``(x, y)`` or ``(x, y, sample_weight)``, anything else is ``x``."""
    return keras.utils.unpack_x_y_sample_weight(spec)[0] if isinstance(spec, tuple) else spec


def is_encoded(x) -> bool:
    """Whether model inputs are token ids already (the preprocessor's dict), not raw strings."""
    return isinstance(x, dict) and "input_ids" in x


@contextlib.contextmanager
def end_of_data_expected(steps):
    """Without a step count Keras reads a dataset of unknown length (SQuAD's windows, a CsvDataset) to its end and
    then warns that the input 'ran out of data; interrupting training': noise where no count was asked for."""
    with warnings.catch_warnings():
        if steps is None:
            warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        yield


def read_once(dataset: tf.data.Dataset, steps) -> tuple:
    """``(dataset, steps)`` for a loop that reads its data once (evaluate, predict). When an epoch of known length
    ends, Keras makes the next epoch's iterator at once, and each iterator instantiates the pipeline's functions
    anew (the preprocessor's graph: most of a predict call on a few strings), for an epoch that never comes. Given
    the length as ``steps``, of a dataset that does not know it, Keras makes one iterator and reads the same
    batches."""
    batches = int(dataset.cardinality())
    if steps is not None or batches <= 0:
        return dataset, steps
    return dataset.filter(lambda *_: True), batches


def read_each_epoch(dataset: tf.data.Dataset, steps, steps_per_execution: int) -> tuple:
    """``(dataset, steps_per_epoch)`` for fit's training data. When an epoch of known length ends, Keras makes the
    next epoch's iterator at once, after the last epoch too, instantiating the pipeline's functions for an epoch that
    never comes (see ``read_once``). Given the length as ``steps_per_epoch``, of the dataset repeated, Keras keeps one
    iterator for every epoch, which reads the same batches (a shuffled source reshuffles on each repetition as on
    each new iterator). Not where the last execution of an epoch is short (``steps_per_execution`` does not divide
    the length): it stops at the data's end, which a repeated dataset does not have."""
    batches = int(dataset.cardinality())
    if steps is not None or batches <= 0 or batches % steps_per_execution:
        return dataset, steps
    return dataset.repeat(), batches


def checked_class_labels(y, num_classes: Optional[int] = None, what: str = "class labels"):
    """``y`` as a classification loss may take it: Keras would truncate 1.7 to class 1 and train on it, so labels
    that are not whole numbers in [0, num_classes) are refused (arrays: a ValueError now; in a pipeline: an error
    when the batch is read). ``num_classes`` None: known only to the loss (multiple choice: the options)."""
    y = tf.convert_to_tensor(y)
    message = f"y: {what} must be whole numbers " + ("from 0" if num_classes is None else f"in [0, {num_classes})")
    if not (y.dtype.is_integer or y.dtype.is_floating or y.dtype.is_bool):
        raise ValueError(f"{message}, the class's index, got {y.dtype.name} labels: map names to indices first")
    value = tf.cast(y, tf.float64)
    valid = (value == tf.round(value)) & (value >= 0)
    if num_classes is not None:
        valid &= value < num_classes
    valid = tf.reduce_all(valid)
    if tf.executing_eagerly():  # arrays, checked before the pipeline is built
        if not bool(valid):
            raise ValueError(f"{message}, got {y.numpy().tolist()[:8]}")
        return y
    with tf.control_dependencies([tf.debugging.Assert(valid, [message, y], summarize=8)]):
        return tf.identity(y)
