"""Keras task models on raw strings (``xlnet_tf.tasks.text_models``): loaded from a release directory, fine-tuned with
``fit`` on text from data/sentiment/ (the preprocessor in the tf.data pipeline, token ids in ``call``), predictions
on strings equal to the task model on ``encode_example`` features, checkpoints written the ways the entry points
write them loaded back, multiple choice, MirroredStrategy, XLA; SQuAD: training labels equal to squad_data's,
answers equal to the SavedModel export's, two replicas training as one device."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops
from tensorflow.python.eager.polymorphic_function import polymorphic_function

import xlnet_tf
from background import background
from xlnet_tf import kernels
from classifier_helpers import FIXTURES, MICRO_CONFIG, SPIECE, write_release
from xlnet_tf.checkpoint import write_tf1_checkpoint
from xlnet_tf.tasks.classification import classifier_data
from xlnet_tf.tasks.multiple_choice import race_data
from xlnet_tf.tokenization import XLNetTokenizer
from xlnet_tf.training.optimization import create_optimizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTIMENT = os.path.join(REPO, "data", "sentiment")
SEQ = 32


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A release directory as the original ships it: xlnet_config.json, xlnet_model.ckpt (TF1 names), spiece.model."""
    folder = tmp_path_factory.mktemp("release")
    keras.utils.set_random_seed(0)  # the same weights whichever tests ran before in the process
    return str(folder), write_release(folder)


@pytest.fixture(scope="module")
def tokenizer():
    return XLNetTokenizer(SPIECE)


def _sentiment(split, count):
    examples = classifier_data.read_examples(classifier_data.get_task("sst-2"), SENTIMENT, split).examples[:count]
    return examples, [e.text_a for e in examples], np.array([int(e.label) for e in examples])


def _encoded(tokenizer, examples, seq_length=SEQ):
    rows = [classifier_data.encode_example(tokenizer, e, seq_length)[:3] for e in examples]
    return {"input_ids": np.array([r[0] for r in rows], np.int32), "segment_ids": np.array([r[1] for r in rows],
                                                                                          np.int32),
            "padding_mask": np.array([r[2] for r in rows], np.float32)}


def _softmax(logits):
    return tf.nn.softmax(logits).numpy()


@contextlib.contextmanager
def _iterators_made():
    """The datasets this thread starts reading inside the block (a list that grows): iterators made of a dataset,
    not those tracing makes of a function's arguments."""
    made, init, thread = [], iterator_ops.OwnedIterator.__init__, threading.get_ident()

    def counted(self, dataset=None, *args, **kwargs):
        if dataset is not None and threading.get_ident() == thread:  # not the background tests' (background.py)
            made.append(dataset)
        init(self, dataset, *args, **kwargs)
    iterator_ops.OwnedIterator.__init__ = counted
    try:
        yield made
    finally:
        iterator_ops.OwnedIterator.__init__ = init


@contextlib.contextmanager
def _functions_creating_variables():
    """The tf.functions whose first call inside the block created variables (a list that grows): TensorFlow traces
    such a function a second time, without them (Keras' step functions: seconds each)."""
    found, call = [], polymorphic_function.Function._call

    def counted(self, *args, **kwargs):
        first = self._created_variables is None and self._variable_creation_config is None
        out = call(self, *args, **kwargs)
        if first and self._created_variables:
            found.append(self._name)
        return out
    polymorphic_function.Function._call = counted
    try:
        yield found
    finally:
        polymorphic_function.Function._call = call


def _reads_text(dataset) -> bool:
    """Whether the pipeline holds the preprocessor (its SentencePiece op)."""
    return b"Sentencepiece" in dataset._as_serialized_graph().numpy()


@pytest.mark.slow
def test_fine_tune_on_raw_strings_then_predict(release, tokenizer, tmp_path):
    folder, tensors = release
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=2, seq_length=SEQ, dropout=0.0,
                                                         dropatt=0.0)
    np.testing.assert_array_equal(model.network.xlnet.word_embedding.numpy(), tensors["model/transformer/word_embedding"
                                                                                      "/lookup_table"])
    model.compile(create_optimizer(model.network, 1e-3, train_steps=4, warmup_steps=1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    # The TSV as it is, read by tf.data: (sentence, label) rows.
    train = tf.data.experimental.CsvDataset(os.path.join(SENTIMENT, "train.tsv"), [tf.string, tf.int64], header=True,
                                            field_delim="\t", use_quote_delim=False).take(64).batch(16)
    before = model.network.logit.kernel.numpy().copy()
    with _functions_creating_variables() as creating:
        history = model.fit(train, epochs=1, verbose=0)
    assert creating == []  # the optimizer's and the metric's variables made before the train step is traced (once)
    assert np.isfinite(history.history["loss"][0]) and not np.allclose(model.network.logit.kernel.numpy(), before)
    # The query stream's mask_emb (no gradient in fine-tuning) is left out of training, without marking the
    # network's variable (the caller's object) untrainable.
    mask_emb = model.network.xlnet.mask_emb
    assert mask_emb.trainable and all(w is not mask_emb for w in model.trainable_weights)
    assert any(w is mask_emb for w in model.non_trainable_weights)
    assert all(v is not mask_emb for v in model.trainable_variables)
    np.testing.assert_array_equal(mask_emb.numpy(), tensors["model/transformer/mask_emb/mask_emb"])

    examples, texts, labels = _sentiment("dev", 12)
    with _iterators_made() as made:
        eager = model.predict(texts, batch_size=5, verbose=0)  # a Python list of strings
    assert len(made) == 1 and _reads_text(made[0])  # read once: each iterator instantiates the preprocessor anew
    with _iterators_made() as made:  # rows of one batch: encoded without a pipeline (batches of other sizes)
        np.testing.assert_allclose(model.predict(texts, verbose=0), eager, atol=1e-5)
    assert len(made) == 1 and not _reads_text(made[0])
    probabilities = _softmax(eager)
    expected = _softmax(model.network(_encoded(tokenizer, examples))["logits"])
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)

    # Exported for TF Serving from Python: a numbered version (the optimizer's steps), served from raw text by a process
    # with TensorFlow and tensorflow-text only, with the probabilities of predict (that process runs beside the
    # checks below; its answers are checked at the end).
    version = model.export(str(tmp_path / "serving"), labels=["negative", "positive"], task="sst-2")
    assert os.path.basename(version) == str(int(model.optimizer.iterations.numpy())) != "0"
    client = ("import json, sys, tensorflow as tf, tensorflow_text\n"
              "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
              "out = serve(sentence=tf.constant(json.loads(sys.argv[2])))\n"
              "print(json.dumps({'p': out['probabilities'].numpy().tolist(), "
              "'label': [l.decode() for l in out['label'].numpy()]}))")
    serving = subprocess.Popen([sys.executable, "-c", client, version, json.dumps(texts)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    with _iterators_made() as made:
        loss, accuracy = model.evaluate(texts, labels, batch_size=6, verbose=0)
    assert 0.0 <= accuracy <= 1.0 and np.isfinite(loss) and len(made) == 1 and _reads_text(made[0])
    with _iterators_made() as made:  # one batch, encoded without a pipeline: the same numbers
        np.testing.assert_allclose(model.evaluate(texts, labels, verbose=0), [loss, accuracy], rtol=1e-5)
    assert len(made) == 1 and not _reads_text(made[0])

    # Pairs: a tuple of two batches, laid out as encode_example lays out text_a/text_b.
    pairs = [classifier_data.read_examples(classifier_data.get_task("mrpc"), os.path.join(FIXTURES, "glue", "MRPC"),
                                           "dev").examples[i] for i in range(4)]
    encoded_pairs = _encoded(tokenizer, pairs)
    got = model.predict(([e.text_a for e in pairs], np.array([e.text_b for e in pairs])), verbose=0)
    np.testing.assert_allclose(_softmax(got), _softmax(model.network(encoded_pairs)["logits"]), atol=1e-5)
    # call takes token ids (the preprocessor's dict), as fit/evaluate/predict do when given them.
    np.testing.assert_allclose(model(model.preprocessor(tf.constant([e.text_a for e in pairs]),
                                                        tf.constant([e.text_b for e in pairs]))).numpy(), got,
                               atol=1e-6)
    np.testing.assert_allclose(model.predict(encoded_pairs, verbose=0), got, atol=1e-6)
    with pytest.raises(ValueError, match="inputs: XLNetTextClassifier takes token ids"):
        model(tf.constant(texts))

    # The fine-tuned model written as run_classifier.py writes it (native) and in the original's TF1 layout loads
    # back with its head; the .keras file too (compared with predict's logits above: the weights are unchanged).
    native = tf.train.Checkpoint(model=model.network).write(str(tmp_path / "native" / "ckpt-4"))
    again = xlnet_tf.XLNetTextClassifier.from_checkpoint(native, num_labels=2, seq_length=SEQ, spiece_model=SPIECE,
                                                         config=os.path.join(folder, "xlnet_config.json"))
    np.testing.assert_allclose(again.predict(texts, verbose=0), eager, atol=1e-6)
    tf1 = tmp_path / "tf1"
    shutil.copytree(folder, tf1, ignore=shutil.ignore_patterns("xlnet_model.ckpt*"))
    write_tf1_checkpoint({n: v.numpy() for n, v in model.network.tf1_variables().items()},
                         str(tf1 / "xlnet_model.ckpt"))
    again = xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tf1), num_labels=2, seq_length=SEQ)
    np.testing.assert_allclose(again.predict(texts, verbose=0), eager, atol=1e-6)
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "model.keras"))
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), eager, atol=1e-6)
    # The optimizer comes back too (create_optimizer's XLNetAdamW: schedule, decay exclusions, step, moments).
    assert type(loaded.optimizer) is type(model.optimizer)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) > 0
    gamma = next(v for v in loaded.trainable_variables if v.path.endswith("LayerNorm/gamma"))
    assert not loaded.optimizer._use_weight_decay(gamma)
    for mine, theirs in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))

    out, err = serving.communicate(timeout=300)  # the serving process, started beside the checks since the export
    assert serving.returncode == 0, err[-3000:]
    served = json.loads(out.strip().splitlines()[-1])
    np.testing.assert_allclose(served["p"], probabilities, atol=1e-5)
    assert served["label"] == [["negative", "positive"][i] for i in np.argmax(probabilities, axis=-1)]


@pytest.mark.slow
def test_fit_and_predict_under_mirrored_strategy(release, tokenizer):
    folder, _ = release
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=2, seq_length=SEQ, dropout=0.0,
                                                             dropatt=0.0)
        model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    examples, texts, labels = _sentiment("train", 16)
    history = model.fit(texts, labels, batch_size=8, epochs=1, verbose=0)  # 2 steps, 4 strings per replica
    assert np.isfinite(history.history["loss"][0])
    examples, texts, _ = _sentiment("dev", 6)
    np.testing.assert_allclose(_softmax(model.predict(texts, batch_size=4, verbose=0)),
                               _softmax(model.network(_encoded(tokenizer, examples))["logits"]), atol=1e-5)


@pytest.mark.slow
def test_text_classifier_trains_with_xla(release, tokenizer):
    """jit_compile=True: Keras compiles the steps (network, loss, optimizer) with XLA, the strings staying in the
    tf.data pipeline; validation data as raw strings; predictions equal to the network on encode_example's ids."""
    folder, _ = release
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=2, seq_length=SEQ, dropout=0.0,
                                                         dropatt=0.0)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    assert model.jit_compile  # Keras turns it off (with a warning) for a model with a layer that cannot compile
    _, texts, labels = _sentiment("train", 16)
    before = model.network.logit.kernel.numpy().copy()
    history = model.fit(texts, labels, batch_size=8, epochs=1, verbose=0, validation_split=0.25)
    assert np.isfinite(history.history["loss"][0]) and np.isfinite(history.history["val_loss"][0])
    assert not np.allclose(model.network.logit.kernel.numpy(), before)
    examples, texts, _ = _sentiment("dev", 6)
    np.testing.assert_allclose(_softmax(model.predict(texts, batch_size=4, verbose=0)),
                               _softmax(model.network(_encoded(tokenizer, examples))["logits"]), atol=1e-5)


def test_one_batch_steps_take_raw_strings(release, tokenizer, squad_trained):
    """Keras' train_on_batch / test_on_batch / predict_on_batch on raw strings: the batch encoded as fit's
    pipeline encodes it (without one) in one step, the numbers of the same step on the preprocessor's token ids
    (and of evaluate / predict)."""
    folder, _ = release
    examples, texts, labels = _sentiment("dev", 6)
    models = [xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=2, seq_length=SEQ, dropout=0.0,
                                                           dropatt=0.0) for _ in range(2)]
    for model in models:
        model.set_weights(models[0].get_weights())  # the same new head
        model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    raw, ids = models
    encoded = _encoded(tokenizer, examples)
    # preprocess reads a list of strings as predict does, a batch: a list of two was taken for one pair.
    np.testing.assert_array_equal(raw.preprocess(texts[:2])["segment_ids"], encoded["segment_ids"][:2])
    np.testing.assert_array_equal(raw.preprocess(texts)["input_ids"], encoded["input_ids"])

    def same(a, b):  # loss and accuracy, or weights
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

    with _iterators_made() as made, _functions_creating_variables() as creating:  # encoded without a pipeline
        loss_and_accuracy = raw.test_on_batch(texts, labels)
        predicted = raw.predict_on_batch(texts)
    assert made == [] and creating == []
    same(loss_and_accuracy, ids.test_on_batch(encoded, labels))
    same(loss_and_accuracy, raw.evaluate(texts, labels, verbose=0))
    # two batches, through the pipeline (other batch sizes: the same to round-off)
    np.testing.assert_allclose(predicted, raw.predict(texts, batch_size=4, verbose=0), atol=1e-5)
    with _functions_creating_variables() as creating:
        same(raw.train_on_batch(texts, labels), ids.train_on_batch(encoded, labels))
    assert creating == []
    same(raw.network.logit.kernel.numpy(), ids.network.logit.kernel.numpy())
    assert abs(raw.test_on_batch(texts, labels)[0] - loss_and_accuracy[0]) > 1e-3  # it trained

    squad, train = squad_trained["model"], squad_trained["train"]
    x, y = _squad_inputs(train[:2])
    same(squad.test_on_batch(x, y), squad.evaluate(x, y, verbose=0))
    np.testing.assert_array_equal(squad.predict_on_batch(x)["text"], squad.predict(x, verbose=0)["text"])
    x, y = _squad_inputs(train)  # more windows than one step of window_batch_size
    with pytest.raises(ValueError, match=f"these {len(train)} rows make [0-9]+ steps of windows"):
        squad.test_on_batch(x, y)


class _Batches(keras.utils.PyDataset):
    def __init__(self, texts, labels, size, workers=1):
        super().__init__(workers=workers)
        self.texts, self.labels, self.size, self.epochs = texts, labels, size, 0
        # With workers, the first two batches are read at once or not at all (read one after the other, the
        # first waits for the second in vain: BrokenBarrierError).
        self.together = threading.Barrier(2, timeout=60) if workers > 1 else None

    def __len__(self):
        return -(-len(self.texts) // self.size)

    def __getitem__(self, i):
        if self.together is not None and i < 2:
            self.together.wait()
        return self.texts[i * self.size:(i + 1) * self.size], self.labels[i * self.size:(i + 1) * self.size]

    def on_epoch_end(self):
        self.epochs += 1


def test_generators_and_py_datasets_of_raw_strings(release, squad_trained):
    """What Keras' loops take besides arrays and tf.data: a Python generator of batches (read once) and a
    keras.utils.PyDataset (read every epoch), the same steps as the same rows given as arrays."""
    folder, _ = release
    _, texts, labels = _sentiment("train", 12)
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=2, seq_length=SEQ, dropout=0.0,
                                                         dropatt=0.0)
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = model.get_weights()

    def batches(with_labels=True):
        for i in range(0, len(texts), 4):
            yield (texts[i:i + 4], labels[i:i + 4]) if with_labels else texts[i:i + 4]

    def same(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

    same(model.evaluate(batches(), verbose=0), model.evaluate(texts, labels, batch_size=4, verbose=0))
    same(model.predict(batches(with_labels=False), verbose=0), model.predict(texts, batch_size=4, verbose=0))
    trained, py_dataset = {}, _Batches(texts, labels, 4, workers=2)  # its batches read by two threads
    for name, data, epochs in [("generator", batches(), 1), ("PyDataset", py_dataset, 2),
                               ("arrays, 1 epoch", (texts, labels), 1), ("arrays, 2 epochs", (texts, labels), 2)]:
        model.set_weights(start)  # plain SGD: no optimizer state to reset
        x, y = data if isinstance(data, tuple) else (data, None)
        validation = {"PyDataset": batches(), "arrays, 2 epochs": (texts[:8], labels[:8])}.get(name)
        with _iterators_made() as made:
            model.fit(x, y, batch_size=4, shuffle=False, epochs=epochs, verbose=0, validation_data=validation)
        trained[name] = model.network.logit.kernel.numpy()
    # Arrays: one iterator for both epochs, one for each epoch's validation (each instantiates the preprocessor; an
    # epoch of known length used to make the next epoch's at its end, after the last epoch too).
    assert len(made) == 3 and all(_reads_text(d) for d in made), made
    same(trained["generator"], trained["arrays, 1 epoch"])
    same(trained["PyDataset"], trained["arrays, 2 epochs"])
    assert not np.allclose(trained["PyDataset"], trained["generator"])  # its second epoch read its batches again
    assert py_dataset.epochs == 2  # and it was told of each epoch's end, as Keras tells it

    with pytest.raises(ValueError, match="x: the generator yields no batches"):
        model.predict(iter([]), verbose=0)
    with pytest.raises(ValueError, match="x: a generator goes to fit/evaluate; train_on_batch"):
        model.train_on_batch(batches())
    with pytest.raises(ValueError, match="y, sample_weight: not taken with a generator x"):
        model.fit(batches(with_labels=False), labels, verbose=0)
    with pytest.raises(ValueError, match="validation_split: not supported with a dataset or generator x"):
        model.fit(batches(with_labels=False), labels, validation_split=0.5, verbose=0)
    with pytest.raises(ValueError, match="x: a generator of single examples; these models take batches"):
        model.predict(iter(texts), verbose=0)

    squad, train = squad_trained["model"], squad_trained["train"]
    x, _ = _squad_inputs(train[:3])
    np.testing.assert_array_equal(squad.predict((x for _ in range(1)), verbose=0)["text"],
                                  squad.predict(x, verbose=0)["text"])


@pytest.mark.slow
def test_multiple_choice_on_raw_strings(release, tokenizer):
    folder, _ = release
    model = xlnet_tf.XLNetTextMultipleChoice.from_checkpoint(folder, seq_length=48, max_qa_length=12, dropout=0.0,
                                                             dropatt=0.0)
    articles, questions, options, labels, examples = [], [], [], [], []
    for path in sorted(os.listdir(os.path.join(FIXTURES, "race", "dev", "middle"))):
        with open(os.path.join(FIXTURES, "race", "dev", "middle", path), encoding="utf-8") as f:
            data = json.load(f)
        for question, opts, answer in zip(data["questions"], data["options"], data["answers"]):
            articles.append(data["article"]), questions.append(question), options.append(opts)
            labels.append("ABCD".index(answer))
            examples.append(race_data.RaceExample("", data["article"], [race_data.qa_text(question, o) for o in opts],
                                                  labels[-1], 0))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensor_slices(((articles, questions, options), labels)).batch(2)
    assert np.isfinite(model.fit(data, epochs=1, verbose=0).history["loss"][0])
    logits = model.predict((articles, questions, options), verbose=0)
    encoded = [race_data.encode_example(tokenizer, e, 48, 12)[:3] for e in examples]
    features = {k: np.array([e[i] for e in encoded], dtype) for i, (k, dtype) in
                enumerate([("input_ids", np.int32), ("segment_ids", np.int32), ("padding_mask", np.float32)])}
    assert logits.shape == (len(examples), race_data.NUM_CHOICES)
    np.testing.assert_allclose(logits, model.network(features)["logits"].numpy(), atol=1e-5)
    # one batch (above: no pipeline) and several (through it) alike
    np.testing.assert_allclose(model.predict((articles, questions, options), batch_size=2, verbose=0), logits,
                               atol=1e-5)


def test_multiple_choice_refuses_labels_and_options_of_the_wrong_kind(release):
    """Keras would train on int(0.5) = 0; a 1-D options array failed as a shape "<unknown>" once traced with
    others', options lists of unequal lengths as a non-rectangular sequence, a dict without options as KeyError."""
    model = xlnet_tf.XLNetTextMultipleChoice.from_checkpoint(release[0], seq_length=SEQ)
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    articles, questions = ["Bob went home.", "Al sat."], ["Who?", "Where?"]
    options = [["Bob", "Al", "Cy"], ["mat", "sky", "sea"]]
    for labels in ([0.5, 1], [0, 3], [-1, 0]):
        with pytest.raises(ValueError, match=r"y: labels \(the index of the right option\) must be whole numbers in "
                                             r"\[0, 3\), got"):
            model.fit((articles, questions, options), np.array(labels), verbose=0)
    data = tf.data.Dataset.from_tensor_slices(((articles, questions, options), [0.5, 1.0])).batch(2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be whole numbers from 0"):
        model.fit(data, verbose=0)
    model.fit(data.map(lambda x, y: (x, tf.cast(y, tf.int32) + 1)), verbose=0)
    assert model.predict((articles, questions, options), verbose=0).shape == (2, 3)
    with pytest.raises(ValueError, match=r"options: expected \[batch, choices\] strings, got shape \(2,\)"):
        model.predict((articles, questions, np.array(["Bob", "mat"])), verbose=0)
    with pytest.raises(ValueError, match=r"options: a list of as many options per question, got lengths \[3, 2\]"):
        model.predict((articles, questions, [options[0], options[1][:2]]), verbose=0)
    with pytest.raises(ValueError, match="inputs: a dict of article, question, options lacks options"):
        model.predict({"article": articles, "question": questions}, verbose=0)


def test_errors_name_the_argument(release, tmp_path):
    folder, _ = release
    shutil.copytree(folder, tmp_path / "bare", ignore=shutil.ignore_patterns("*.json", "spiece.model"))
    with pytest.raises(ValueError, match="config"):
        xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tmp_path / "bare"), spiece_model=SPIECE)
    with pytest.raises(ValueError, match="spiece_model"):
        xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tmp_path / "bare"),
                                                     config=os.path.join(folder, "xlnet_config.json"))
    wrong = xlnet_tf.XLNetConfig.from_dict(dict(MICRO_CONFIG, n_token=32000))
    with pytest.raises(ValueError, match="spiece_model: 8000 pieces, but config has n_token=32000"):
        xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, config=wrong)
    with pytest.raises(ValueError, match=r"num_labels=3, regression=True: a regression has one output"):
        xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=3, regression=True)  # was: 1 label


# A text classifier of a release, compiled with the fine-tuning runs' AdamW, saved as a .keras file (argv[1]).
_SAVE_TEXT_MODEL = """
import os, sys
import keras
import xlnet_tf
from classifier_helpers import write_release
from xlnet_tf.training.optimization import create_optimizer
release = os.path.join(os.path.dirname(sys.argv[1]), "release")
write_release(release)
model = xlnet_tf.XLNetTextClassifier.from_checkpoint(release, num_labels=2, seq_length=8)
model.compile(create_optimizer(model.network, 1e-3, train_steps=4, warmup_steps=1),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.save(sys.argv[1])
"""

# What a user's program does: `import xlnet_tf` (which imports no TensorFlow), then Keras loads the file.
_LOAD_TEXT_MODEL = """
import sys, xlnet_tf
assert 'tensorflow' not in sys.modules
import keras
m = keras.saving.load_model(sys.argv[1])
print(type(m).__name__, type(m.optimizer).__name__)
"""


@background
def test_a_saved_text_model_loads_in_a_process_that_imported_only_keras_and_xlnet_tf(tmp_path):
    """keras.saving.load_model needs the classes of the file registered: xlnet_tf imports them lazily, and the load
    failed ("Could not locate class 'XLNetTextClassifier'", then 'XLNetAdamW'); it works after `import xlnet_tf`
    alone, which still imports no TensorFlow. (Saved by one process, loaded by another.)"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), REPO]))
    for code in (_SAVE_TEXT_MODEL, _LOAD_TEXT_MODEL):
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "model.keras")], capture_output=True,
                              text=True, cwd=REPO, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["XLNetTextClassifier", "XLNetAdamW"]


def test_export_arguments_that_would_write_a_wrong_export_are_refused(release, tmp_path):
    """Keras' export(path, format) given positionally named every class by a letter of 'tf_saved_model'; class
    names of another count, or for a regression, were written as they came. Nothing is written for any of them."""
    folder, _ = release
    classifier = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, num_labels=2, seq_length=SEQ)
    regression = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, regression=True, seq_length=SEQ)
    for model, args, kwargs, message in [
            (classifier, ("tf_saved_model",), {}, r"one name for each of the 2 classes, in order; got "
                                                  r"'tf_saved_model' \(Keras' export\(path, format\) is "
                                                  r"export\(path, format=...\) here\)"),
            (classifier, (["neg", "neutral", "pos"],), {}, "one name for each of the 2 classes"),
            (classifier, (), {"format": "litert"}, r"format='litert': a text model exports a TF SavedModel that "
                                                   r"takes raw text .* model.network.export\(path, format='litert'\)"),
            (regression, (["score"],), {}, "labels: a regression export has no class names to give")]:
        with pytest.raises(ValueError, match=message):
            model.export(str(tmp_path / "serving"), *args, **kwargs)
    assert not os.path.exists(tmp_path / "serving")
    version = classifier.export(str(tmp_path / "serving"), ("neg", "pos"), format="tf_saved_model")
    with open(os.path.join(version, "assets.extra", "labels.json")) as f:
        assert json.load(f)["labels"] == ["neg", "pos"]


# -- SQuAD ------------------------------------------------------------------------------------------------------
SQUAD = os.path.join(FIXTURES, "squad")
SQUAD_SETTINGS = dict(seq_length=64, max_query_length=16, doc_stride=24)  # several windows for most contexts


def _squad_model(folder, **kwargs):
    return xlnet_tf.XLNetTextSquad.from_checkpoint(folder, max_answer_length=12, start_n_top=3, end_n_top=3,
                                                   dropout=0.0, dropatt=0.0, **SQUAD_SETTINGS, **kwargs)


def _squad_inputs(examples):
    """((questions, contexts), (answer starts, answer texts, is_impossible)) of squad_data's examples."""
    return ((tf.constant([e.question_text for e in examples]), tf.constant([e.paragraph_text for e in examples])),
            (tf.constant([max(e.start_position, 0) for e in examples]),
             tf.constant([e.orig_answer_text for e in examples]), tf.constant([e.is_impossible for e in examples])))


@pytest.fixture(scope="module")
def squad_model(release):
    """An XLNetTextSquad of the release (its head seeded: a pretrained checkpoint has none), 8 windows a step."""
    keras.utils.set_random_seed(0)
    return _squad_model(release[0], window_batch_size=8)


@pytest.fixture(scope="module")
def squad_trained(squad_model):
    """``squad_model`` trained one epoch on one device on the raw SQuAD 2.0 training strings (5 questions a batch,
    SGD), with raw-string validation data, then evaluated: the model several tests check (each training of the
    tiny model traces the tf.data preprocessing and the train step again, seconds on 2 cores)."""
    from xlnet_tf.tasks.squad import squad_data

    train = squad_data.read_squad_file(os.path.join(SQUAD, "train-v2.0.json"), True).examples
    data = tf.data.Dataset.from_tensor_slices(_squad_inputs(train)).batch(5)
    model = squad_model
    initial = model.get_weights()
    model.compile(keras.optimizers.SGD(0.1))
    history = model.fit(data, epochs=1, verbose=0, validation_data=_squad_inputs(train[:3])).history
    return dict(model=model, initial=initial, history=history, loss=model.evaluate(data, verbose=0), train=train,
                data=data)


@pytest.mark.parametrize("name", ["train-v1.1.json", "train-v2.0.json"])
def test_squad_window_labels_equal_squad_data(squad_model, tokenizer, name):
    """The labels fit computes in the graph from raw strings are squad_data's training features' (squad_lib_sp's
    alignment), window by window, answers that no window holds whole and impossible questions included."""
    from xlnet_tf.tasks.squad import squad_data

    model = squad_model
    examples = squad_data.read_squad_file(os.path.join(SQUAD, name), True).examples
    features, skipped = squad_data.convert_examples_to_features(
        examples, tokenizer, SQUAD_SETTINGS["seq_length"], SQUAD_SETTINGS["doc_stride"],
        SQUAD_SETTINGS["max_query_length"], True)
    assert not skipped
    x, y = _squad_inputs(examples)
    windows = {k: v.numpy() for k, v in model.training_windows(x, y).items()}
    assert windows["example_index"].tolist() == [f.example_index for f in features]
    np.testing.assert_array_equal(windows["input_ids"], [f.input_ids for f in features])
    got = list(zip(windows["start_positions"].tolist(), windows["end_positions"].tolist(),
                   windows["is_impossible"].astype(bool).tolist()))
    assert got == [(f.start_position, f.end_position, f.is_impossible) for f in features]
    assert 0 < sum(not f.is_impossible for f in features) < len(features)  # both kinds of window are compared
    # The answer's end as a character offset gives the same labels as its text.
    ends = tf.constant([max(e.start_position, 0) + len(e.orig_answer_text) for e in examples])
    again = model.training_windows(x, (y[0], ends, y[2]))
    np.testing.assert_array_equal(again["start_positions"].numpy(), windows["start_positions"])
    np.testing.assert_array_equal(again["end_positions"].numpy(), windows["end_positions"])


@pytest.mark.slow
def test_squad_fit_predict_and_export_on_raw_strings(release, squad_trained, tmp_path):
    """fit on raw SQuAD 2.0 strings (``squad_trained``) moves the weights; predict's answers on the dev questions
    are the SavedModel export's (run_squad.py --do_predict's rules, test_export_squad.py), with offsets into the
    contexts."""
    import tensorflow_text  # noqa: F401 (the export's SentencePiece kernels, registered before loading it)

    from xlnet_tf.tasks.squad import squad_data

    model, history, train = squad_trained["model"], squad_trained["history"], squad_trained["train"]
    assert np.isfinite(history["loss"][0]) and history["val_loss"][0] > 0
    kernel = model.network.start_dense.kernel
    before = next(w for w, v in zip(squad_trained["initial"], model.weights) if v.path == kernel.path)
    assert not np.allclose(kernel.numpy(), before)
    labels = ([max(e.start_position, 0) for e in train[:4]], [e.orig_answer_text for e in train[:4]],
              [e.is_impossible for e in train[:4]])  # Python lists, inputs and labels
    loss = model.evaluate(([e.question_text for e in train[:4]], [e.paragraph_text for e in train[:4]]), labels,
                          verbose=0)
    assert np.isfinite(loss) and loss > 0

    dev = squad_data.read_squad_file(os.path.join(SQUAD, "dev-v2.0.json"), False).examples
    questions, contexts = [e.question_text for e in dev], [e.paragraph_text for e in dev]
    # Traced with the plain kernels, as the export is: the fast C++ kernels agree to float32 round-off, which can
    # flip the choice between near-tied answers of a model trained for two steps (seen once in CI).
    with kernels.use("plain"):
        answers = model.predict((questions, contexts), batch_size=len(dev), verbose=0)  # Python lists of strings
    texts = [t.decode() for t in answers["text"]]
    for context, text, start, end in zip(contexts, texts, answers["start_char"], answers["end_char"]):
        assert context[start:end] == text if text else (start, end) == (-1, -1)
    assert sum(bool(t) for t in texts) > len(texts) // 2

    version = model.export(str(tmp_path / "serving"))
    assert os.path.basename(version) == str(int(model.optimizer.iterations.numpy()))
    loaded = tf.saved_model.load(version)
    served = loaded.signatures["serving_default"](question=tf.constant(questions), context=tf.constant(contexts))
    assert [t.decode() for t in served["text"].numpy()] == texts
    np.testing.assert_array_equal(served["start_char"].numpy(), answers["start_char"])
    np.testing.assert_array_equal(served["end_char"].numpy(), answers["end_char"])
    np.testing.assert_allclose(served["null_odds"].numpy(), answers["null_odds"], atol=1e-5)
    metadata = {k: v.numpy() for k, v in loaded.signatures["metadata"]().items()}
    assert (metadata["kind"], metadata["max_seq_length"], metadata["doc_stride"], metadata["max_answer_length"],
            metadata["end_n_top"]) == (b"squad", 64, 24, 12, 3)
    with pytest.raises(ValueError, match="inputs"):
        model(tf.constant(questions))
    # A .keras file gives the same answers (and the window settings) back.
    model.save(str(tmp_path / "squad.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "squad.keras"))
    assert (loaded.window_batch_size, loaded.max_answer_length) == (model.window_batch_size, 12)
    with kernels.use("plain"):
        assert [t.decode() for t in loaded.predict((questions, contexts), verbose=0)["text"]] == texts

    # Written as run_squad.py writes its checkpoints, the fine-tuned model loads back with its head.
    native = tf.train.Checkpoint(model=model.network).write(str(tmp_path / "native" / "ckpt-2"))
    again = xlnet_tf.XLNetTextSquad.from_checkpoint(native, spiece_model=SPIECE, config=os.path.join(
        release[0], "xlnet_config.json"), start_n_top=3, end_n_top=3, **SQUAD_SETTINGS)
    for mine, theirs in zip(model.network.weights, again.network.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_squad_labels_not_on_their_answer_are_refused_and_questions_without_windows_answered(squad_trained):
    """An answer that is not at its answer_start in the context (run_squad.py skips such examples) trained a wrong
    span, or "no answer", silently; questions that give no window at all (an empty question or context) crashed
    Keras' predict."""
    model = squad_trained["model"]
    context = "Bob lives in Paris."
    for start, answer, shown in ((13, "Rome", "answer 'Rome'"), (40, "Paris", "answer_start 40"),
                                 (-2, 3, "answer_start -2, end 3"), (13, 13, "end 13")):
        first = "Bob" if isinstance(answer, str) else 3  # row 0 is right
        with pytest.raises(ValueError, match=f"y: an answer that is not where its labels put it .* row 1 of 2 "
                                             f"\\(1 such rows\\), question 'Where\\?': .*{shown}"):
            model.evaluate((["Who?", "Where?"], [context, context]),
                           (np.array([0, start]), np.array([first, answer]), np.array([0, 0])), verbose=0)
    data = tf.data.Dataset.from_tensor_slices(((["Where?"], [context]), ([13], ["Rome"], [0]))).batch(1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not where its labels put it.*\[Where\?\].*\[Rome\]"):
        model.evaluate(data, verbose=0)
    # Impossible questions' labels are not read; the answer's text and its end character agree.
    model.evaluate((["Who?", "Where?"], [context, context]), ([-1, 13], ["", "Paris"], [1, 0]), verbose=0)
    model.evaluate((["Where?"], [context]), ([13], [18], [0]), verbose=0)

    answers = model.predict((["", "Who?"], [context, " "]), verbose=0)
    assert answers["text"].tolist() == [b"", b""] and answers["start_char"].tolist() == [-1, -1]
    assert answers["end_char"].tolist() == [-1, -1] and (answers["null_odds"] > 0).all()


def _assert_same_updates(got, want, initial, rtol):
    """Each weight array trained to ``want`` (from ``initial``) up to ``rtol`` times the largest change of that
    array: float32 round-off in a different summation order, grown over the steps (a weighting error would be a
    difference of the order of the change itself)."""
    for got_w, want_w, start in zip(got, want, initial):
        change = np.max(np.abs(want_w - start))
        assert np.max(np.abs(got_w - want_w)) <= rtol * change + 1e-7, (got_w.shape, change)


@pytest.mark.slow
def test_squad_fit_under_two_replicas_equals_one_device(release, tokenizer, squad_trained):
    """Two replicas (a 2-CPU MirroredStrategy) train XLNetTextSquad as one device does (``squad_trained``), to
    float32 round-off: every replica gets the same number of windows per step (the last step filled up with windows
    of weight 0), and the weights divide by the whole step's windows. XLA (jit_compile=True) trains the same too;
    evaluate and predict agree."""
    from xlnet_tf.tasks.squad import squad_data

    train, data, initial = squad_trained["train"], squad_trained["data"], squad_trained["initial"]

    def trained(strategy=None, jit_compile=False, evaluate=True):
        with strategy.scope() if strategy else contextlib.nullcontext():
            model = _squad_model(release[0], window_batch_size=8)  # 4 windows per replica
            model.set_weights(initial)
            model.compile(keras.optimizers.SGD(0.1), jit_compile=jit_compile)
        history = model.fit(data, epochs=1, verbose=0).history["loss"]
        # (each evaluate makes a new tf.data iterator of the preprocessing pipeline: seconds on 2 cores)
        return model, history, model.evaluate(data, verbose=0) if evaluate else None

    one, one_history, one_loss = squad_trained["model"], squad_trained["history"]["loss"], squad_trained["loss"]
    # squad_data's windows: the in-graph ones equal them (test_squad_window_labels_equal_squad_data).
    windows = len(squad_data.convert_examples_to_features(
        train, tokenizer, SQUAD_SETTINGS["seq_length"], SQUAD_SETTINGS["doc_stride"],
        SQUAD_SETTINGS["max_query_length"], True)[0])
    assert windows % 8 and windows > 16  # several steps, the last one filled up
    moved = [not np.allclose(a, b) for a, b in zip(one.get_weights(), initial)]
    assert sum(moved) > len(moved) // 2
    # Reduced on one device, as create_strategy("mirrored") does on CPUs: the collective all-reduce's keys
    # collide between the MirroredStrategy instances of one process (the test before this one has another).
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    two, two_history, two_loss = trained(mirrored)
    assert two.distribute_strategy.num_replicas_in_sync == 2
    _assert_same_updates(two.get_weights(), one.get_weights(), initial, 1e-4)
    np.testing.assert_allclose(two_history, one_history, rtol=1e-5)
    # evaluated at the trained weights, which agree to 1e-4 of their change (above: what a weighting error fails),
    # so the loss to 1e-4 too (2.4e-5 apart was seen, from other initial weights: round-off grown over the steps)
    np.testing.assert_allclose(two_loss, one_loss, rtol=1e-4)
    xla, xla_history, _ = trained(jit_compile=True, evaluate=False)
    assert xla.jit_compile
    _assert_same_updates(xla.get_weights(), one.get_weights(), initial, 1e-3)  # XLA's fusions, not C++ kernels
    np.testing.assert_allclose(xla_history, one_history, rtol=1e-4)

    # Prediction: the same answers on two replicas, and on windows encoded beforehand the head's outputs.
    questions, contexts = [e.question_text for e in train], [e.paragraph_text for e in train]
    with kernels.use("plain"):
        answers = one.predict((questions, contexts), verbose=0)
        again = two.predict(tf.data.Dataset.from_tensor_slices((questions, contexts)).batch(4), verbose=0)
    assert again["text"].tolist() == answers["text"].tolist()
    np.testing.assert_array_equal(again["start_char"], answers["start_char"])
    np.testing.assert_allclose(again["null_odds"], answers["null_odds"], atol=1e-5)
    windows = one.preprocess((tf.constant(questions[:3]), tf.constant(contexts[:3])))
    inputs = {k: windows[k] for k in squad_data.INFERENCE_KEYS}
    outputs = one.predict(inputs, verbose=0)
    np.testing.assert_allclose(outputs["cls_logits"], one.network(inputs)["cls_logits"].numpy(), atol=1e-5)


def test_a_checkpoint_fine_tuned_for_another_task_is_refused_unless_a_new_head_is_asked(release, tmp_path):
    """A fine-tuned checkpoint whose head does not fit (other labels, regression, another task) is not loaded
    silently as a backbone under a random head: an error names its head; new_head=True starts a new head on its
    network. Empty inputs are an error, not a crash."""
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier

    folder, _ = release
    tuned = tmp_path / "sst2"
    shutil.copytree(folder, tuned, ignore=shutil.ignore_patterns("xlnet_model.ckpt*"))
    config = xlnet_tf.XLNetConfig.from_dict(MICRO_CONFIG)
    head = XLNetClassifier(config, num_labels=2, task_scope="sst-2")
    head({"input_ids": np.zeros((1, 4), np.int32), "segment_ids": np.zeros((1, 4), np.int32),
          "padding_mask": np.zeros((1, 4), np.float32)})
    write_tf1_checkpoint({name: v.numpy() for name, v in head.tf1_variables().items()},
                         str(tuned / "xlnet_model.ckpt"))
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tuned), num_labels=2, seq_length=SEQ,
                                                         task_scope="sst-2")
    np.testing.assert_array_equal(model.network.logit.kernel.numpy(), head.logit.kernel.numpy())  # loaded whole
    # Asked for, a new head though this one fits (2 classes of another task): it was the fine-tuned head
    fresh = xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tuned), num_labels=2, seq_length=SEQ,
                                                         task_scope="sst-2", new_head=True)
    assert not np.allclose(fresh.network.logit.kernel.numpy(), head.logit.kernel.numpy())
    np.testing.assert_array_equal(fresh.network.xlnet.word_embedding.numpy(), head.xlnet.word_embedding.numpy())
    for build in (lambda **kw: xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tuned), num_labels=3,
                                                                            task_scope="sst-2", **kw),
                  lambda **kw: xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tuned), regression=True,
                                                                            task_scope="sst-2", **kw),
                  lambda **kw: xlnet_tf.XLNetTextSquad.from_checkpoint(str(tuned), seq_length=SEQ, max_query_length=8,
                                                                       doc_stride=8, **kw)):
        with pytest.raises(ValueError, match="fine-tuned for another task: its head .*classification_sst-2.*"
                                             "new_head=True"):
            build()
        assert build(new_head=True).network.xlnet is not None
    # Another config (d_inner 64 for the checkpoint's 32): the network does not fit, which is said, not the head
    wider = xlnet_tf.XLNetConfig.from_dict(dict(MICRO_CONFIG, d_inner=64))
    with pytest.raises(ValueError, match=rf"{tuned}") as refused:
        xlnet_tf.XLNetTextClassifier.from_checkpoint(str(tuned), num_labels=2, seq_length=SEQ, task_scope="sst-2",
                                                     config=wider)
    assert "new_head" not in str(refused.value) and "(32," in str(refused.value), str(refused.value)
    with pytest.raises(ValueError, match="x: no examples"):
        model.predict([])
    with pytest.raises(ValueError, match="x: no examples"):
        model.predict(np.array([], dtype=object))


def test_every_reader_of_a_fine_tuned_checkpoint_gives_one_reason_for_a_head_that_does_not_fit(release, tmp_path,
                                                                                                caplog):
    """load_task_weights (text models), warm_start (--init_checkpoint for training) and Task.restore
    (--init_checkpoint for eval/predict/export) judge an HF head by the same rules and say the same reason: the
    text models judged it by a first failed assignment (a "missing variable", not "another kind"); an architecture of
    a family that is not loaded was an error without the way out (new_head=True), stopped training from its
    network, and a TF1 release named as --init_checkpoint for predictions was a list of missing head variables."""
    import logging

    from classifier_helpers import make_flags
    from xlnet_tf import hf
    from xlnet_tf.checkpoint import load_task_weights, warm_start
    from xlnet_tf.errors import InputError
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
    from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice
    from xlnet_tf.training.settings import SettingsError

    config = xlnet_tf.XLNetConfig.from_dict(MICRO_CONFIG)
    inputs = {"input_ids": np.zeros((1, 4), np.int32), "segment_ids": np.zeros((1, 4), np.int32),
              "padding_mask": np.ones((1, 4), np.float32)}

    def classifier(num_labels=2, **kwargs):
        model = XLNetClassifier(config, num_labels=num_labels, **kwargs)
        model(inputs)
        return model

    def saved(name, model, labels=None):
        return hf.save_model(model, str(tmp_path / name), SPIECE, labels=labels)

    three = saved("three", classifier(3), ["a", "b", "c"])
    regressor = saved("regressor", classifier(1, regression=True))
    multiple_choice = XLNetMultipleChoice(config)
    multiple_choice({k: v[:, None] for k, v in inputs.items()})
    for folder, model, why in (
            (three, classifier(2), "it has 3 labels, this task 2"),
            (regressor, classifier(2), "it is a regressor; this task's head is not"),
            (three, multiple_choice, "it is an XLNetForSequenceClassification; this task trains an "
                                     "XLNetMultipleChoice")):
        with pytest.raises(InputError, match=re.escape(f"fine-tuned for another task: its head "
                                                       f"(XLNetForSequenceClassification) does not fit this "
                                                       f"{type(model).__name__} ({why}); pass new_head=True")):
            load_task_weights(model, hf.HFCheckpoint(folder))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            warm_start(model, folder)
        assert f"its XLNetForSequenceClassification head is not loaded ({why})" in caplog.text, caplog.text

    # An architecture no loaded family reads is a head, not this task's: refused with the way out, trained from its
    # network with a warning, not a fine-tuned checkpoint of this task.
    unknown = tmp_path / "unknown"
    shutil.copytree(three, unknown)
    values = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps(dict(values, architectures=["XLNetForMyTask"])))
    with pytest.raises(InputError, match=r"fine-tuned for another task: its head \(XLNetForMyTask\) .*'XLNetForMyTask' "
                                         r"is not one this stack reads.*new_head=True"):
        load_task_weights(classifier(3), hf.HFCheckpoint(str(unknown)))
    fresh = classifier(3)
    assert load_task_weights(fresh, hf.HFCheckpoint(str(unknown)), new_head=True) == "pretrained"
    trained = classifier(3)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        warm_start(trained, str(unknown))
    assert "its XLNetForMyTask head is not loaded" in caplog.text, caplog.text
    np.testing.assert_array_equal(trained.xlnet.word_embedding.numpy(), fresh.xlnet.word_embedding.numpy())

    def restore(init_checkpoint):
        flags = make_flags(tmp_path, task_name="sst-2", data_dir=os.path.join(FIXTURES, "glue", "SST-2"),
                           do_train=False, do_predict=True, init_checkpoint=init_checkpoint,
                           model_dir=str(tmp_path / "run"))
        task = flags.family().task(flags)
        return task.restore(task.build_model())

    for init_checkpoint, why in ((three, "it has 3 labels, this task 2"), (release[0], "it has no task head"),
                                 (str(unknown), "is not one this stack reads")):
        with pytest.raises(SettingsError, match=re.escape(f"--init_checkpoint={init_checkpoint}: not a fine-tuned "
                                                          "checkpoint of this task: ") + ".*" + re.escape(why)):
            restore(init_checkpoint)


@pytest.mark.slow
def test_classifier_refuses_labels_that_are_not_its_classes(release):
    """Keras would train on int(1.7) = 1; the classifier knows its classes and refuses fractions and out-of-range
    labels, as arrays (at once) and in a tf.data pipeline (when the batch is read)."""
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(release[0], num_labels=2, seq_length=SEQ)
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    for labels in ([0.5, 1.0], [0, 2], [-1, 0]):
        with pytest.raises(ValueError, match=r"y: class labels must be whole numbers in \[0, 2\)"):
            model.fit(["good", "bad"], np.array(labels), epochs=1, verbose=0)
        data = tf.data.Dataset.from_tensor_slices((["good", "bad"], labels)).batch(2)
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"class labels must be whole numbers in \[0, 2\)"):
            model.fit(data, epochs=1, verbose=0)
    model.fit(["good", "bad"], np.array([1.0, 0.0]), epochs=1, verbose=0)  # whole floats are classes
    # Class names are not indices (TensorFlow's cast would say "Cast string to double is not supported").
    with pytest.raises(ValueError, match=r"in \[0, 2\), the class's index, got string labels"):
        model.fit(["good", "bad"], ["pos", "neg"], epochs=1, verbose=0)
    data = tf.data.Dataset.from_tensor_slices((["good", "bad"], ["pos", "neg"])).batch(2)
    with pytest.raises(ValueError, match="got string labels"):
        model.fit(data, epochs=1, verbose=0)


def test_data_of_the_wrong_shape_is_refused_naming_it(release):
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(release[0], num_labels=2, seq_length=SEQ)
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="y: 2 rows for the 3 examples of x"):
        model.fit(["good", "bad", "fine"], np.array([0, 1]), epochs=1, verbose=0)
    # a bare string is not a batch (it was an IndexError): arrays have rows, as Keras' do
    with pytest.raises(ValueError, match=r"x: a single value, not a batch: pass a list of strings, e.g. \[text\] "
                                         r"for one"):
        model.predict("one string", verbose=0)
    with pytest.raises(ValueError, match="y: a single value, not a batch: pass a list or array with one row per"):
        model.fit(["good"], 1, epochs=1, verbose=0)
    assert model.predict(["one string"], verbose=0).shape == (1, 2)
    with pytest.raises(ValueError, match="sample_weight: 1 rows for the 2 examples of x"):
        model.evaluate(["good", "bad"], np.array([0, 1]), sample_weight=np.array([1.0]), verbose=0)
    single = tf.data.Dataset.from_tensor_slices((["good", "bad"], [0, 1]))  # not batched
    with pytest.raises(ValueError, match=r"a tf.data.Dataset of single examples; .*dataset.batch\(n\)"):
        model.fit(single, epochs=1, verbose=0)
