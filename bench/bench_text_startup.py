"""Start-up cost of the in-graph raw-text preprocessing: what a user waits for before the first batch, not per batch.

    python bench/bench_text_startup.py [--repeats=3] [--calls=10]    # ~1.5 min on 2 cores; prints one JSON object

For the classifier's sentence pairs and SQuAD's windows (``XLNetPreprocessor`` of ``data/spiece.model``, the
layouts ``fit``/``evaluate``/``predict`` and the raw-text exports run): the ops of the traced graph, the time to
trace it, the time to start a ``tf.data`` iterator over it (each Keras ``fit``/``evaluate``/``predict`` call starts
one, and each validation: TensorFlow instantiates the graph's function then), and a SavedModel holding it: written,
then loaded in a fresh process importing only tensorflow and tensorflow_text (TF Serving's view). Medians of
``--repeats``. Then what one call of ``XLNetTextClassifier`` (configs/tiny.json, random weights, seq 64) costs on
8 sentences (and ``predict`` on 64; ``fit`` in batches of 4, one epoch, then two, each validated on the 8),
compute included: medians of ``--calls`` after 3 warm-up calls. The report quoting it: bench/reports/serving.md
("Start-up of the raw-text graphs").
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reporting import cpu_name  # noqa: E402

SQUAD = os.path.join(ROOT, "tests", "fixtures", "squad", "train-v2.0.json")
LOAD = """
import sys, time
import tensorflow as tf, tensorflow_text  # noqa: F401
start = time.perf_counter()
loaded = tf.saved_model.load(sys.argv[1])
print(time.perf_counter() - start)
"""


def texts() -> tuple:
    with open(SQUAD) as f:
        data = json.load(f)["data"]
    pairs = [(q["question"], p["context"]) for a in data for p in a["paragraphs"] for q in p["qas"]]
    return [q for q, _ in pairs], [c for _, c in pairs]


def measure(name: str, preprocessor, function, inputs: tuple, repeats: int, tmp: str) -> dict:
    import tensorflow as tf

    spec = [tf.TensorSpec([None], tf.string)] * len(inputs)
    times = {"trace_s": [], "iterator_s": [], "save_s": [], "load_s": []}
    for repeat in range(repeats):
        fn = tf.function(function, input_signature=spec, autograph=False)
        start = time.perf_counter()
        graph = fn.get_concrete_function().graph
        times["trace_s"].append(time.perf_counter() - start)
        ops = len(graph.get_operations())
        dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(8).map(fn)
        start = time.perf_counter()
        iterator = iter(dataset)
        times["iterator_s"].append(time.perf_counter() - start)
        next(iterator)
        module = tf.Module()
        module.preprocessor, module.serve = preprocessor, fn  # tracked: its SentencePiece resources
        path = os.path.join(tmp, f"{name}-{repeat}")
        start = time.perf_counter()
        tf.saved_model.save(module, path)
        times["save_s"].append(time.perf_counter() - start)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([sys.executable, "-c", LOAD, path], capture_output=True, text=True, env=env, check=True)
        times["load_s"].append(float(done.stdout.strip().splitlines()[-1]))
    return dict(ops=ops, saved_model_pb_kib=round(os.path.getsize(os.path.join(path, "saved_model.pb")) / 1024),
                **{k: round(statistics.median(v), 2) for k, v in times.items()})


def keras_calls(calls: int, tmp: str) -> dict:
    """Milliseconds per call of the Keras text classifier's loops on raw strings (medians)."""
    import keras
    import numpy as np
    import xlnet_tf
    from xlnet_tf.checkpoint import write_tf1_checkpoint

    release = os.path.join(tmp, "release")
    os.makedirs(release)
    with open(os.path.join(ROOT, "configs", "tiny.json")) as f:
        config = json.load(f)
    with open(os.path.join(release, "xlnet_config.json"), "w") as f:
        json.dump(config, f)
    shutil.copyfile(os.path.join(ROOT, "data", "spiece.model"), os.path.join(release, "spiece.model"))
    keras.utils.set_random_seed(0)
    network = xlnet_tf.XLNetModel(xlnet_tf.XLNetConfig.from_dict(config))
    network({"input_ids": np.zeros((1, 4), np.int32), "segment_ids": np.zeros((1, 4), np.int32)})
    write_tf1_checkpoint({n: v.numpy() for n, v in network.tf1_variables().items()},
                         os.path.join(release, "xlnet_model.ckpt"))
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(release, num_labels=2, seq_length=64)
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    sentences, labels = ["a fine film", "dull and long"] * 4, np.array([1, 0] * 4)
    loops = {"predict": lambda: model.predict(sentences, verbose=0),
             "predict_on_batch": lambda: model.predict_on_batch(sentences),
             "train_on_batch": lambda: model.train_on_batch(sentences, labels),
             "evaluate": lambda: model.evaluate(sentences, labels, verbose=0),
             "predict_64_rows": lambda: model.predict(sentences * 8, verbose=0),
             "fit": lambda: model.fit(sentences, labels, batch_size=4, verbose=0),
             "fit_2_epochs_validated": lambda: model.fit(sentences, labels, batch_size=4, epochs=2, verbose=0,
                                                         validation_data=(sentences, labels))}
    result = {}
    for name, call in loops.items():
        times = []
        for _ in range(3 + calls):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        result[name] = round(1000 * statistics.median(times[3:]), 1)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    from xlnet_tf.preprocessing import XLNetPreprocessor
    from xlnet_tf.tasks.squad.squad_graph import squad_windows

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    questions, contexts = texts()
    pair = XLNetPreprocessor.from_file(os.path.join(ROOT, "data", "spiece.model"), seq_length=128)
    squad = XLNetPreprocessor.from_file(os.path.join(ROOT, "data", "spiece.model"), seq_length=128,
                                        max_query_length=32, doc_stride=64)
    with tempfile.TemporaryDirectory() as tmp:
        report = dict(cpu=cpu_name(), date=time.strftime("%Y-%m-%d %H:%M"), commit=commit,
                      pairs=measure("pairs", pair, lambda a, b: pair(a, b), (questions, contexts), args.repeats, tmp),
                      squad=measure("squad", squad, lambda q, c: squad_windows(squad, q, c), (questions, contexts),
                                    args.repeats, tmp),
                      text_classifier_calls_ms=keras_calls(args.calls, tmp))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
