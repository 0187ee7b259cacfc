"""Batch prediction with a SavedModel over large, sharded inputs: streamed, resumable (docs/batch.md).

    python -m xlnet_tf.cli.predict --saved_model=serving/sst2 --input_glob='big/part-*.tsv' --output_dir=out/sst2

Inputs, outputs, resuming, bad rows and which signature is used: ``xlnet_tf.batch.prediction`` (the engine, which
``run_classifier.py --do_predict --predict_input_glob`` shares).

With ``--runner`` (DirectRunner, DataflowRunner, FlinkRunner, ...) the same prediction runs as an Apache Beam
pipeline (``xlnet_tf.batch.beam``): the options on the command line that are not this tool's flags are Beam's
pipeline options (``--project``, ``--region``, ``--direct_num_workers``, ...), checked against Beam's so that a
typo in one of this tool's flags is still an error naming it.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from typing import Optional, Sequence

from absl import app
from xlnet_tf.batch import (BEAM_RUNNERS, DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_SEQ_LENGTH, SIGNATURES, SUMMARY_FILE,
                            formats, input_format_error)
from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import Settings, path_missing, setting


@dataclasses.dataclass
class PredictSettings(Settings):
    """The flags of ``python -m xlnet_tf.cli.predict`` (checked before TensorFlow loads)."""

    saved_model: Optional[str] = setting(None, "SavedModel directory, or a base path of numbered versions "
                                         "(<base>/<version>/saved_model.pb; the highest is used).")
    signature: str = setting("auto", "auto: serving_default if it takes raw strings, else serve_ids, else "
                             "serving_default (ids).", choices=SIGNATURES)
    input_glob: Optional[str] = setting(None, "Input files: comma-separated globs (local or gs://), *.tsv with a "
                                        "header or *.jsonl.")
    # Not an enum flag: a --task_module's family brings its own formats, loaded after the flags are parsed.
    input_format: str = setting("auto", f"Input format: auto (by file name), {', '.join(formats()[1:])}, or one of "
                                "--task_module's family.")
    output_dir: Optional[str] = setting(None, f"One <input name>.predictions.jsonl per input file, and "
                                        f"{SUMMARY_FILE}.")
    text_fields: str = setting("sentence", "Text column(s)/key(s): 'a' or 'a,b' for sentence pairs.")
    id_field: Optional[str] = setting(None, "Column/key copied to each output row as 'id' (default: none; every "
                                      "row has its input 'line').")
    batch_size: int = setting(64, "Examples per model call.")
    max_seq_length: Optional[int] = setting(None, "Token ids signatures: sequence length (tokens incl. "
                                            "<sep>/<cls>; default: the fine-tuning run's, from the export's "
                                            f"metadata.json, else {DEFAULT_MAX_SEQ_LENGTH}).")
    spiece_model_file: Optional[str] = setting(None, "Token ids signatures: SentencePiece model (default: the one "
                                               "in the export's assets.extra/).")
    uncased: Optional[bool] = setting(None, "Token ids signatures: lower-case the text (default: as the export's "
                                      "metadata.json says, else cased).")
    overwrite: bool = setting(False, "Predict every shard again, even those done; every earlier output in "
                              "--output_dir is deleted.")
    progress_every_s: float = setting(30.0, "Seconds between progress lines.", above=0)
    max_line_bytes: int = setting(DEFAULT_MAX_LINE_BYTES, "TSV/JSONL rows longer than this are skipped and "
                                  "listed (file:line), never read whole.", above=0)
    task_module: Optional[str] = setting(None, "The module (dotted name or .py file) of a task family of your own, "
                                         "for its exports (xlnet_tf.tasks).")
    runner: Optional[str] = setting(None, "Run as an Apache Beam pipeline on this runner (docs/batch.md); the "
                                    "options this tool does not know go to Beam. Default: no Beam, this machine.",
                                    choices=BEAM_RUNNERS)
    share_model: bool = setting(False, "With --runner: one copy of the model per machine, called by its worker "
                                "processes (Beam's share_model_across_processes), instead of one per process.")

    def required(self) -> tuple:
        return ("saved_model", "input_glob", "output_dir")

    def output_dirs(self) -> tuple:
        return ("output_dir",)

    def input_files(self) -> tuple:
        return ("spiece_model_file",)

    def errors(self) -> list:
        errors = super().errors()
        if self.saved_model and path_missing(self.saved_model, "dir"):
            errors.append(f"--saved_model={self.saved_model}: no such directory")
        if self.batch_size <= 0:
            errors.append(f"--batch_size={self.batch_size} must be positive")
        if self.max_seq_length is not None and self.max_seq_length < 4:
            errors.append(f"--max_seq_length={self.max_seq_length} leaves no room for text (needs >= 4)")
        if not self.task_module and (problem := input_format_error(self.input_format)):
            errors.append(problem)  # with --task_module: checked once the module is loaded
        if self.share_model and not self.runner:
            errors.append("--share_model shares a model between Beam's worker processes: it needs --runner")
        return errors


def main(s: PredictSettings) -> None:
    """The command: ``predict_shards`` with the SavedModel, or with ``--runner`` the Beam pipeline."""
    from absl import logging

    from xlnet_tf import tasks

    if s.runner:  # Beam: its options checked before TensorFlow loads
        check_pipeline_args(BEAM_ARGS)
        tasks.load_module(s.task_module)
        from xlnet_tf.batch import beam

        beam.predict(s, BEAM_ARGS)
        return
    from xlnet_tf.batch import prediction

    tasks.load_module(s.task_module)
    fields = prediction.Fields.parse(s.text_fields, s.id_field)
    predictor = prediction.SavedModelPredictor(s.saved_model, s.signature, s.spiece_model_file, s.max_seq_length,
                                               s.uncased)
    logging.info("predicting with %s (signature %s, %s)", predictor.path, predictor.signature,
                 "raw text" if predictor.takes_text else f"token ids, max_seq_length {predictor.max_seq_length}")
    prediction.predict_shards(predictor, s.input_glob, s.output_dir, fields, s.batch_size, s.input_format,
                              s.overwrite, s.progress_every_s, max_line_bytes=s.max_line_bytes)


# --- Beam's pipeline options -----------------------------------------------------------------------------------

BEAM_ARGS: list = []  # the command line's Beam pipeline options (split_beam_args)


def split_beam_args(argv: Sequence[str]) -> tuple:
    """``(this tool's arguments, Beam's)``: with ``--runner`` in ``argv``, every ``--option`` that is not a flag
    of this tool (or absl's) is Beam's, with its value (``--opt=v`` or ``--opt v``); without it, nothing is taken
    out (an unknown flag stays absl's error, as before Beam)."""
    argv = list(argv)
    if not any(a == "--runner" or a.startswith("--runner=") for a in argv[1:]) and not _runner_in_config_file(argv):
        return argv, []
    app.define_help_flags()  # --help, --helpfull, ...: defined when absl parses; theirs all the same
    ours_names = set(cli.FLAGS) | {f.name for f in dataclasses.fields(PredictSettings)} | {"config_file"}
    ours, beam_args, i = argv[:1], [], 1
    while i < len(argv):
        arg = argv[i]
        name = arg.lstrip("-").split("=", 1)[0]
        if not arg.startswith("--") or arg == "--" or name in ours_names or (
                name.startswith("no") and name[2:] in ours_names):
            ours.append(arg)
        else:
            beam_args.append(arg)
            if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1  # its value (this tool takes no positional arguments)
                beam_args.append(argv[i])
        i += 1
    return ours, beam_args


def _runner_in_config_file(argv: Sequence[str]) -> bool:
    """Whether the local ``--config_file`` of ``argv`` sets ``runner``: then, too, the options this tool does not
    know are Beam's (else a Beam option beside a config file's runner was absl's 'Unknown command line flag'). A file
    that cannot be read is left to the flags' parsing, which names its problem."""
    from xlnet_tf import io_utils

    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("--config_file="):
            path = arg.split("=", 1)[1]
        elif arg == "--config_file" and i + 1 < len(argv):
            path = argv[i + 1]
        else:
            continue
        if not path or io_utils.is_uri(path):  # a URI would load TensorFlow to read it: --runner on the command line
            return False
        try:
            return bool(io_utils.read_mapping(path, empty=True).get("runner"))
        except (ValueError, OSError):
            return False
    return False


def check_pipeline_args(args: Sequence[str]) -> None:
    """Every option in ``args`` must be one of Beam's pipeline options (every runner's included), else an error
    naming it and the nearest flag of this tool or Beam: Beam itself only warns and drops an unknown option, which
    would hide a typo in one of this tool's flags. Imports Beam's options only (not TensorFlow); without Beam
    installed, an error saying how to install it."""
    try:
        from apache_beam.options import pipeline_options as po
    except ImportError as e:
        raise cli.InputError(f"--runner runs the prediction on Apache Beam, which is not importable ({e}): "
                             "pip install 'xlnet_tf[beam]'") from None

    # The parser PipelineOptions.get_all_options builds, the same way: Beam's own parser class (its options may
    # be ValueProvider arguments), each PipelineOptions subclass once.
    parser = po._BeamArgumentParser(allow_abbrev=False)  # pylint: disable=protected-access
    for klass in {str(k): k for k in po.PipelineOptions.__subclasses__()}.values():
        klass._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(list(args))
    if unknown:
        options = [u for u in unknown if u.startswith("-")]
        name = (options or unknown)[0].split("=", 1)[0]
        known = [o for action in parser._actions for o in action.option_strings]  # pylint: disable=protected-access
        known += [f"--{f.name}" for f in dataclasses.fields(PredictSettings)]
        near = difflib.get_close_matches(name, known, n=1)
        raise cli.InputError(f"{name}: not a flag of this tool nor a Beam pipeline option"
                             + (f" (did you mean {near[0]}?)" if near else ""))


if __name__ == "__main__":
    sys.argv, BEAM_ARGS = split_beam_args(sys.argv)
    cli.run(PredictSettings, main)
