"""Tagging on Brown: dev token accuracy of run_tagger.py runs against the most-frequent-tag-per-word baseline of the
same training file, and the raw-text export's throughput (sentences/s, words/s) on the dev sentences.

    python bench/bench_tagging.py --train_file=data/tagging/train.conll --dev_file=data/tagging/dev.conll \\
        --model_dirs=runs/tiny/tagging_random,runs/tiny/tagging_pretrained \\
        --saved_model=runs/tiny/tagging_random_export/600

Prints one JSON object (the report in bench/reports/tagging.md quotes it).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reporting import cpu_name  # noqa: E402  (bench/ is the script's directory)
from xlnet_tf.tasks.tagging import tagging_data  # noqa: E402


def serving_throughput(saved_model: str, sentences: list, batch_size: int) -> dict:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's SentencePiece op)

    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    texts = [" ".join(s.words) for s in sentences]
    serve(text=tf.constant(texts[:batch_size]))  # warm-up
    start = time.perf_counter()
    for i in range(0, len(texts), batch_size):
        serve(text=tf.constant(texts[i:i + batch_size]))
    seconds = time.perf_counter() - start
    words = sum(len(s.words) for s in sentences)
    return dict(batch_size=batch_size, sentences=len(texts), seconds=round(seconds, 2),
                sentences_per_s=round(len(texts) / seconds, 1), words_per_s=round(words / seconds, 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--dev_file", required=True)
    parser.add_argument("--model_dirs", default="", help="comma-separated run_tagger.py --model_dir values")
    parser.add_argument("--saved_model", default="", help="an export version directory to time")
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args()
    train, dev = tagging_data.read_sentences(args.train_file), tagging_data.read_sentences(args.dev_file)
    report = dict(cpu=cpu_name(), date=time.strftime("%Y-%m-%d %H:%M"), train_words=sum(len(s.words) for s in train),
                  dev_words=sum(len(s.words) for s in dev),
                  baseline=tagging_data.most_frequent_tag_baseline(train, dev), runs={})
    for model_dir in filter(None, args.model_dirs.split(",")):
        with open(os.path.join(model_dir, "eval_results.dev.json")) as f:
            result = json.load(f)
        report["runs"][model_dir] = dict(step=result["step"], **result["metrics"])
    if args.saved_model:
        report["serving"] = serving_throughput(args.saved_model, dev, args.batch_size)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
