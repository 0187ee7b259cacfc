"""Batch prediction with a SavedModel over large, sharded inputs: streamed, resumable (docs/batch.md).

    python -m xlnet_tf.cli.predict --saved_model=serving/sst2 --input_glob='big/part-*.tsv' --output_dir=out/sst2

Inputs, outputs, resuming, bad rows and which signature is used: ``xlnet_tf.batch.prediction`` (the engine, which
``run_classifier.py --do_predict --predict_input_glob`` shares).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from xlnet_tf.batch import DEFAULT_MAX_SEQ_LENGTH, FORMATS, SIGNATURES, SUMMARY_FILE
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
    input_format: str = setting("auto", "Input format (auto: by file name).", choices=FORMATS)
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
                                      "labels.json says, else cased).")
    overwrite: bool = setting(False, "Predict every shard again, even those done.")
    progress_every_s: float = setting(30.0, "Seconds between progress lines.")
    task_module: Optional[str] = setting(None, "The module (dotted name or .py file) of a task family of your own, "
                                         "for its exports (xlnet_tf.tasks).")

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
        return errors


def main(s: PredictSettings) -> None:
    """The command: ``predict_shards`` with the SavedModel."""
    from absl import logging

    from xlnet_tf import tasks
    from xlnet_tf.batch import prediction

    tasks.load_module(s.task_module)
    fields = prediction.Fields.parse(s.text_fields, s.id_field)
    predictor = prediction.SavedModelPredictor(s.saved_model, s.signature, s.spiece_model_file, s.max_seq_length,
                                               s.uncased)
    logging.info("predicting with %s (signature %s, %s)", predictor.path, predictor.signature,
                 "raw text" if predictor.takes_text else f"token ids, max_seq_length {predictor.max_seq_length}")
    prediction.predict_shards(predictor, s.input_glob, s.output_dir, fields, s.batch_size, s.input_format,
                              s.overwrite, s.progress_every_s)


if __name__ == "__main__":
    cli.run(PredictSettings, main)
