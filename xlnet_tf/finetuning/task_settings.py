"""Settings of run_classifier.py (GLUE, IMDB, Yelp, RACE) and run_squad.py: ``FinetuneSettings`` plus each task's
own. Field names and defaults are the flags' (the original run_classifier.py / run_squad.py ones). No TensorFlow
here: the entry points validate before it loads."""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Optional

from xlnet_tf.config import SUMMARY_TYPES
from xlnet_tf.tasks import classifier_data
from xlnet_tf.training.settings import FinetuneSettings


@dataclasses.dataclass
class ClassifierSettings(FinetuneSettings):
    task_name: Optional[str] = None
    data_dir: Optional[str] = None
    summary_type: str = "last"
    use_summ_proj: bool = True
    cls_scope: Optional[str] = None
    is_regression: bool = False
    max_qa_length: int = 128
    high_only: bool = False
    middle_only: bool = False
    eval_split: str = "dev"
    eval_all_ckpt: bool = False
    eval_batch_size: int = 128
    max_save: int = 0
    # Batch prediction over large sharded inputs (xlnet_tf.batch.prediction) instead of --eval_split's file.
    predict_input_glob: Optional[str] = None
    predict_text_fields: str = "sentence"
    predict_id_field: Optional[str] = None

    BATCH_SIZES: ClassVar[tuple] = ("train_batch_size", "eval_batch_size", "predict_batch_size")

    @property
    def is_race(self) -> bool:
        return (self.task_name or "").lower() == "race"

    def required(self) -> tuple:
        reads_data = self.do_train or self.do_eval or (self.do_predict and not self.predict_input_glob)
        return ("task_name",) + super().required() + (("data_dir",) if reads_data else ())

    def errors(self) -> list:
        errors = super().errors()
        if self.task_name and not self.is_race:
            try:
                task = classifier_data.get_task(self.task_name)
                if self.is_regression and not task.regression:
                    errors.append(f"--is_regression=True but --task_name={self.task_name} is a classification task")
            except ValueError as e:
                errors.append(str(e))
        if self.data_dir and not os.path.isdir(self.data_dir):
            errors.append(f"--data_dir={self.data_dir}: not a directory")
        if self.max_seq_length < 4:
            errors.append(f"--max_seq_length={self.max_seq_length} leaves no room for text (needs >= 4)")
        if self.summary_type not in SUMMARY_TYPES:
            errors.append(f"--summary_type={self.summary_type!r} must be one of {', '.join(SUMMARY_TYPES)}")
        if self.is_race:
            if self.max_qa_length <= 0 or self.max_qa_length > self.max_seq_length - 4:
                errors.append(f"--max_qa_length={self.max_qa_length} must be in [1, max_seq_length - 4 = "
                              f"{self.max_seq_length - 4}]")
            if self.high_only and self.middle_only:
                errors.append("--high_only and --middle_only exclude each other")
        if self.predict_input_glob:
            if not self.do_predict:
                errors.append("--predict_input_glob is read by --do_predict: set it too")
            if self.is_race:
                errors.append("--predict_input_glob: batch prediction handles classification and regression "
                              "tasks, not race")
            fields = [n.strip() for n in (self.predict_text_fields or "").split(",")]
            if not 1 <= len(fields) <= 2 or not all(fields):
                errors.append(f"--predict_text_fields={self.predict_text_fields!r}: give one field name, or two "
                              "for sentence pairs (a,b)")
        if self.do_eval and self.eval_split == "test":
            errors.append("--do_eval needs labels; --eval_split=test has none (use --do_predict for test predictions)")
        if self.eval_split not in classifier_data.SPLITS:
            errors.append(f"--eval_split={self.eval_split!r} must be one of {classifier_data.SPLITS}")
        return errors


@dataclasses.dataclass
class SquadSettings(FinetuneSettings):
    do_prepro: bool = False
    num_proc: int = 1
    proc_id: int = 0
    init: str = "normal"
    init_std: float = 0.02
    train_file: Optional[str] = None
    predict_file: Optional[str] = None
    max_query_length: int = 64
    doc_stride: int = 128
    max_answer_length: int = 64
    n_best_size: int = 5
    start_n_top: int = 5
    end_n_top: int = 5
    target_eval_key: str = "best_f1"
    # The original run_squad.py's defaults where they differ (its published XLNet-Large recipe).
    do_train: bool = True
    max_seq_length: int = 512
    train_batch_size: int = 48
    train_steps: int = 8000
    learning_rate: float = 3e-5
    adam_epsilon: float = 1e-6
    lr_layer_decay_rate: float = 0.75
    predict_batch_size: int = 32

    STAGES: ClassVar[tuple] = ("do_prepro",) + FinetuneSettings.STAGES

    def required(self) -> tuple:
        names = ()
        if self.do_prepro or self.do_train or self.do_eval or self.do_predict:
            names += ("spiece_model_file",)
        if self.do_prepro or self.do_train:
            names += ("train_file",)
        if self.do_eval or self.do_predict:
            names += ("predict_file",)
        return names if self.do_prepro else names + ("model_config_path", "model_dir")

    def input_files(self) -> tuple:
        return super().input_files() + ("train_file", "predict_file")

    def trains(self) -> bool:
        return self.do_train and not self.do_prepro

    def errors(self) -> list:
        errors = super().errors()
        if self.do_prepro and not (self.output_dir or self.model_dir):
            errors.append("--do_prepro needs --output_dir (or --model_dir)")
        if self.max_seq_length - self.max_query_length - 3 < 1:
            errors.append(f"--max_seq_length={self.max_seq_length} leaves no room for the paragraph after "
                          f"--max_query_length={self.max_query_length} and 3 special tokens")
        if self.doc_stride <= 0 or self.max_query_length <= 0 or self.max_answer_length <= 0:
            errors.append("--doc_stride, --max_query_length and --max_answer_length must be positive")
        elif self.doc_stride > self.max_seq_length - self.max_query_length - 3 >= 1:
            errors.append(f"--doc_stride={self.doc_stride} exceeds the paragraph window (--max_seq_length="
                          f"{self.max_seq_length} - --max_query_length={self.max_query_length} - 3 = "
                          f"{self.max_seq_length - self.max_query_length - 3} tokens): the tokens between windows "
                          "would never be seen")
        if not 0 <= self.proc_id < self.num_proc:
            errors.append(f"--proc_id={self.proc_id} must be in [0, --num_proc={self.num_proc})")
        if min(self.start_n_top, self.end_n_top, self.n_best_size) <= 0:
            errors.append("--start_n_top, --end_n_top and --n_best_size must be positive")
        if max(self.start_n_top, self.end_n_top) > self.max_seq_length:
            errors.append("--start_n_top/--end_n_top cannot exceed --max_seq_length")
        if self.init != "normal":
            errors.append("--init=uniform is not supported (use --init=normal with --init_std)")
        return errors

    @property
    def features_dir(self) -> str:
        return self.output_dir or os.path.join(self.model_dir, "data")
