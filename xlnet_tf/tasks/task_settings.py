"""Settings of run_classifier.py: ``FinetuneSettings`` plus the flags of the task families it runs (classification
and regression, multiple choice, and families of a ``--task_module``). Field names and defaults are the flags' (the
original run_classifier.py / run_race.py ones). What is specific to a family is checked by the family
(``TaskFamily.settings_errors``). run_squad.py's settings are the squad family's (``xlnet_tf.tasks.squad``). It
lives with the families, in the layer of their registry, which it asks (it was ``xlnet_tf.finetuning.task_settings``
below them). No TensorFlow here: the entry points validate before it loads."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping, Optional

from xlnet_tf import tasks
from xlnet_tf.config import SUMMARY_TYPES
from xlnet_tf.training.settings import FinetuneSettings, Ignored, path_missing, setting, setting_of

SPLITS = ("train", "dev", "test")
LONG_DOCUMENT = ("truncate", "memory")


@dataclasses.dataclass
class ClassifierSettings(FinetuneSettings):
    task_name: Optional[str] = setting(None, "cola, sst-2, mrpc, sts-b, qqp, mnli_matched, mnli_mismatched, qnli, "
                                       "rte, wnli, ax (GLUE's diagnostic: an MNLI run's --model_dir), imdb, "
                                       "yelp2, yelp5, brown_genre, race, or a task of a --task_module.")
    task_module: Optional[str] = setting(None, "Task families of your own: a module (dotted name, or the path of a "
                                         ".py file) that registers them (xlnet_tf.tasks.register).")
    data_dir: Optional[str] = setting(None, "Task data in its official layout.")
    # Head.
    summary_type: str = setting("last", "How a sequence is summarised.", choices=SUMMARY_TYPES)
    use_summ_proj: bool = setting(True, "tanh projection of the summary (as pretrained XLNet heads).")
    cls_scope: Optional[str] = setting(None, "Classifier head scope (default: the task name).")
    is_regression: bool = setting(False, "Regression task (implied by --task_name=sts-b).")
    # Long documents (classification and regression; docs/long_documents.md).
    long_document: str = setting("truncate", "truncate: one sequence of --max_seq_length, the start of the text; "
                                 "memory: up to --max_segments consecutive segments of --max_seq_length read in "
                                 "order through XLNet's memory, classified from the last.", choices=LONG_DOCUMENT)
    max_segments: int = setting(8, "--long_document=memory: segments per document; the first max_segments * "
                                "max_seq_length - 2 tokens of a text are read.")
    mem_len: Optional[int] = setting(None, "--long_document=memory: hidden states kept per layer (default: all "
                                     "earlier segments, (max_segments - 1) * max_seq_length; less is cheaper and "
                                     "forgets the start).")
    # RACE (the multiple_choice family).
    max_qa_length: int = setting(128, "RACE: question+option tokens kept (from the end).", minimum=1)
    high_only: bool = setting(False, "RACE: high-school passages only.")
    middle_only: bool = setting(False, "RACE: middle-school passages only.")
    eval_split: str = setting("dev", "The split --do_eval and --do_predict read (--do_eval on test: RACE and "
                              "tagging, whose test files have labels).", choices=SPLITS)
    eval_all_ckpt: bool = setting(False, "Evaluate every checkpoint in model_dir and report the best (those of "
                                  "--save_steps and the last; not one written where a signal stopped training).")
    eval_batch_size: int = setting(128, "Global eval batch size.")
    train_batch_size: Optional[int] = setting_of(FinetuneSettings, "train_batch_size",
                                                 help_suffix=" RACE: questions of 4 sequences.")
    max_save: int = 0
    # Batch prediction over large sharded inputs (xlnet_tf.batch.prediction) instead of --eval_split's file.
    predict_input_glob: Optional[str] = setting(None, "--do_predict over these files instead of --eval_split's: "
                                                "comma-separated globs (local or gs://) of *.tsv (header row) or "
                                                "*.jsonl, streamed; one <name>.predictions.jsonl per file in "
                                                "--predict_dir, resumable (docs/batch.md).")
    predict_text_fields: str = setting("sentence", "With --predict_input_glob: text column(s)/key(s), 'a' or 'a,b' "
                                       "for pairs.")
    predict_id_field: Optional[str] = setting(None, "With --predict_input_glob: column/key copied to each output row "
                                              "as 'id'.")

    BATCH_SIZES: ClassVar[tuple] = ("train_batch_size", "eval_batch_size", "predict_batch_size")
    ORIGINAL_FLAGS: ClassVar[Mapping] = dict(
        FinetuneSettings.ORIGINAL_FLAGS,
        num_hosts=Ignored(1, "Original flag, unused (hosts come from the strategy)."),
        num_core_per_host=Ignored(None, "Original flag, unused (replicas come from --strategy).", kind=int),
        predict_threshold=Ignored(0.0, "Original flag, unused."))

    @property
    def segments(self) -> int:
        """Segments per example: ``max_segments`` with ``--long_document=memory``, else 1."""
        return self.max_segments if self.long_document == "memory" else 1

    @property
    def document_length(self) -> int:
        """Tokens per example: every segment's (one sequence of the whole document, split in the model)."""
        return self.segments * self.max_seq_length

    @property
    def memory_length(self) -> int:
        """Memory per layer of a long-document model (0: none)."""
        if self.segments == 1:
            return 0
        return self.mem_len or (self.segments - 1) * self.max_seq_length

    def family(self):
        """The task family of ``--task_name`` (after loading ``--task_module``)."""
        tasks.load_module(self.task_module)
        return tasks.for_task(self.task_name)

    def required(self) -> tuple:
        reads_data = self.do_train or self.do_eval or (self.do_predict and not self.predict_input_glob)
        return ("task_name",) + super().required() + (("data_dir",) if reads_data else ())

    def errors(self) -> list:
        errors = super().errors()
        family = None
        try:
            tasks.load_module(self.task_module)
        except ValueError as e:
            errors.append(str(e))
        if self.task_name:
            try:
                family = tasks.for_task(self.task_name)
            except ValueError as e:
                errors.append(str(e))
        if family is not None and not isinstance(self, family.settings_class):
            errors.append(f"--task_name={self.task_name}: a {family.name} task, fine-tuned by {family.entry_point}")
            family = None
        if self.data_dir and path_missing(self.data_dir, "dir"):
            errors.append(f"--data_dir={self.data_dir}: not a directory")
        if self.max_seq_length < 4:
            errors.append(f"--max_seq_length={self.max_seq_length} leaves no room for text (needs >= 4)")
        if self.long_document == "memory":
            if self.max_segments < 2:
                errors.append(f"--max_segments={self.max_segments}: --long_document=memory reads >= 2 segments")
            if self.mem_len is not None and self.mem_len < 1:
                errors.append(f"--mem_len={self.mem_len} must be >= 1")
        if self.predict_input_glob:
            if not self.do_predict:
                errors.append("--predict_input_glob is read by --do_predict: set it too")
            fields = [n.strip() for n in (self.predict_text_fields or "").split(",")]
            if not 1 <= len(fields) <= 2 or not all(fields):
                errors.append(f"--predict_text_fields={self.predict_text_fields!r}: give one field name, or two "
                              "for sentence pairs (a,b)")
        # A test file's content is not read here, before TensorFlow loads: a family whose test files may carry
        # labels (TaskFamily.test_split_labelled) refuses an unlabelled one, naming it, when it reads it.
        if self.do_eval and self.eval_split == "test" and not (family is not None and family.test_split_labelled):
            errors.append("--do_eval needs labels; --eval_split=test has none (use --do_predict for test predictions)")
        if family is not None:
            errors += family.settings_errors(self)
        return errors
