"""Batch jobs: prediction over sharded inputs (``prediction``) and fine-tuning runs from a job file
(``job_runner``). The names below are what the command line (``xlnet_tf.cli.predict``) checks and shows before
TensorFlow loads; ``prediction`` imports them from here."""

SUMMARY_FILE = "predict_summary.json"
FORMATS = ("auto", "tsv", "jsonl", "squad")
SIGNATURES = ("auto", "serving_default", "serve_ids")
DEFAULT_MAX_SEQ_LENGTH = 128  # token-id signatures of exports that do not record their length
