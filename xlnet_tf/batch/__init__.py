"""Batch jobs: prediction over sharded inputs (``prediction`` on one machine, ``beam`` on an Apache Beam runner)
and fine-tuning runs from a job file (``job_runner``, ``cluster``). The names below are what the command line
(``xlnet_tf.cli.predict``) checks and shows before TensorFlow loads; ``prediction`` imports them from here."""

SUMMARY_FILE = "predict_summary.json"


def formats() -> tuple:
    """The input formats: the two generic ones and those of the task families registered now (e.g. SQuAD files;
    a ``--task_module``'s once it is loaded, which is why this is asked at check time, not fixed at import)."""
    from xlnet_tf import tasks  # TensorFlow-free: the registry and the families' modules import it lazily

    return ("auto", "tsv", "jsonl") + tuple(name for family in tasks.families() if family.batch is not None
                                            for name in family.batch.input_formats())


def input_format_error(input_format: str):
    """"--input_format=... must be one of ..." unless ``input_format`` is one of ``formats()``, else None."""
    if input_format not in formats():
        return f"--input_format={input_format!r} must be one of {', '.join(formats())}"
    return None


SIGNATURES = ("auto", "serving_default", "serve_ids")
DEFAULT_MAX_SEQ_LENGTH = 128  # token-id signatures of exports that do not record their length
# The longest TSV/JSONL row batch prediction reads (--max_line_bytes). A row held ~45 times its size in memory on
# its way to the model (a 55 MB row cost 2.5 GB), and the model reads only its first max_seq_length tokens (512
# tokens are a few kB of text): 1 MB is hundreds of times any row a model can read whole, and bounds a row's cost
# to ~50 MB, where a file without newlines (a wrongly globbed binary) would exhaust memory.
DEFAULT_MAX_LINE_BYTES = 1_000_000
# The Beam runners ``python -m xlnet_tf.cli.predict --runner`` names (xlnet_tf.batch.beam; docs/batch.md). Local:
# DirectRunner (Beam 2.77 tries Prism first, which downloads its binary, then falls back to FnApiRunner), FnApiRunner
# (the DirectRunner's batch engine, in memory or in worker processes, directly), BundleBasedDirectRunner (the one
# that retries a failed bundle).
BEAM_RUNNERS = ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "PrismRunner", "DataflowRunner",
                "FlinkRunner", "SparkRunner", "PortableRunner")
