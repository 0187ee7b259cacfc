"""Text files -> XLNet pretraining TFRecords (resumable, parallel; ``xlnet_tf.data.writer`` has the details).

    python -m xlnet_tf.cli.create_data --input_glob='corpus/*.txt' --spiece_model_file=spiece.model \\
        --save_dir=proc_data --seq_len=512 --reuse_len=256 --num_predict=85 --bsz_per_host=32 \\
        --num_core_per_host=8 --bi_data --num_workers=8

The data shape (``--seq_len``, ``--reuse_len``, ``--num_predict``, ``--bi_data``, ``--num_core_per_host``,
``--mask_alpha``, ``--mask_beta``) is run_pretrain.py's settings, defined once (``PretrainDataSettings``): the same
names, help and defaults, so data written with the defaults trains with run_pretrain.py's defaults.
``--bsz_per_host`` is the per-host training batch.
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Mapping, Optional

from xlnet_tf import io_utils
from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import Alias, PretrainDataSettings, RunSettings, Settings, setting, setting_of

# This module is __main__ of `python -m xlnet_tf.cli.create_data`, and the writer's worker processes ("spawn")
# import it again: nothing here may start work at import, and the workers' functions live in xlnet_tf.data.writer,
# so that they pickle by that importable name.


@dataclasses.dataclass
class CreateDataSettings(Settings, PretrainDataSettings):
    """The flags of ``python -m xlnet_tf.cli.create_data``: the data shape shared with run_pretrain.py and the
    writer's own."""

    spiece_model_file: Optional[str] = setting_of(RunSettings, "spiece_model_file")
    uncased: bool = setting_of(RunSettings, "uncased")
    save_dir: Optional[str] = setting(None, "Output directory (tfrecords/, parts/, manifest.json).")
    bsz_per_host: int = setting(32, "Examples per host batch: one training step of one host (the per-host "
                                "training batch).")
    use_eod: bool = setting(True, "Insert <eod> at blank lines (document ends).")
    pass_id: int = setting(0, "Pass over the data: passes sample different masks and random B's.")
    num_passes: int = setting(1, "Passes to write, --pass_id and the ones after it (the original data_utils.py's "
                              "flag: the text once per pass, each shuffled anew with other masks).")
    num_task: int = setting(1, "Number of tasks (machines) sharing the input files.")
    task: int = setting(0, "This task's id in [0, num_task).")
    split: str = setting("train", "Split name of the written data.", choices=("train", "dev", "test"))
    original_span_bug: bool = setting(False, "Count span lengths in pieces, as the released code did by mistake, "
                                      "instead of words as the paper describes.")
    num_workers: int = setting(max(1, os.cpu_count() or 1), "Processes for tokenising and writing.")
    batches_per_shard: int = setting(500, "Host batches per output shard.")
    seed: int = setting(0, "Random seed (masks, A/B choice); the output is deterministic for a seed.", minimum=0)
    max_line_bytes: int = setting(200_000, "Longer lines are skipped and reported.")

    ORIGINAL_FLAGS: ClassVar[Mapping] = {
        "sp_path": Alias("spiece_model_file", "Original name of --spiece_model_file (data_utils.py)."),
    }

    def required(self) -> tuple:
        return ("input_glob", "spiece_model_file", "save_dir", "seq_len", "reuse_len", "num_predict")

    def output_dirs(self) -> tuple:
        return ("save_dir",)

    def input_files(self) -> tuple:
        return ("spiece_model_file",)

    def writer_config(self):
        """The writer's settings (``xlnet_tf.data.writer.WriterConfig``)."""
        from xlnet_tf.data import writer
        from xlnet_tf.data.examples import ExampleSettings

        shape = ExampleSettings(seq_len=self.seq_len, reuse_len=self.reuse_len, bsz_per_host=self.bsz_per_host,
                                num_core_per_host=self.num_core_per_host or 1, bi_data=self.bi_data,
                                mask_alpha=self.mask_alpha, mask_beta=self.mask_beta, num_predict=self.num_predict,
                                original_span_bug=self.original_span_bug)
        return writer.WriterConfig(input_glob=self.input_glob, sp_path=self.spiece_model_file,
                                   save_dir=self.save_dir, settings=shape, uncased=self.uncased,
                                   use_eod=self.use_eod, pass_id=self.pass_id, num_passes=self.num_passes,
                                   task=self.task, num_task=self.num_task, split=self.split, seed=self.seed,
                                   num_workers=self.num_workers, batches_per_shard=self.batches_per_shard,
                                   max_line_bytes=self.max_line_bytes)

    def errors(self) -> list:
        errors = super().errors()
        if self.input_glob:
            errors += io_utils.unmatched_globs(self.input_glob, "--input_glob")
        if None not in (self.seq_len, self.reuse_len, self.num_predict):  # the writer's checks need the shape
            # (its SentencePiece file and input checks are the ones above)
            errors += [e for e in self.writer_config().errors()
                       if not e.startswith(("--spiece_model_file=", "--input_glob"))]
        return errors


def main(s: CreateDataSettings) -> None:
    """The command: writes this task's shards and (re)merges the manifest."""
    import logging

    from absl import logging as absl_logging

    from xlnet_tf.data import writer

    absl_logging.get_absl_handler().setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    writer.log.setLevel(logging.INFO)
    writer.run(s.writer_config())


if __name__ == "__main__":
    cli.run(CreateDataSettings, main)
