"""The fine-tuning runner of run_classifier.py, run_squad.py and run_tagger.py: the stages train, eval, predict and
export of any task family, through the hooks of its ``Task`` (``xlnet_tf.tasks.base``). It coordinates the task
families, batch prediction and the exports, so it sits above them (docs/design.md's layers; it was
``xlnet_tf.finetuning.runner``).

``run(settings)`` takes the entry point's settings (``ClassifierSettings`` or ``SquadSettings``, built from the
flags by ``xlnet_tf.cli``, or directly); ``settings.family()`` names the task family (``xlnet_tf.tasks``). Nothing
here depends on which family it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Optional

import tensorflow as tf
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.checkpoint import check_pretrained
from xlnet_tf.finetuning.serving import existing_export, export_source, export_serving, write_run_record
from xlnet_tf.finetuning.trainer import ModelAndLoss, data_order, train
from xlnet_tf.training.distribute import num_hosts
from xlnet_tf.training.loop import worker_checkpoint_dir
from xlnet_tf.training.pretraining import all_workers_here
from xlnet_tf.training.xla import check_jit_compile
from xlnet_tf.training.setup import check_data_order, checkpoint_step, run_scope, training_lock


def run(settings) -> Optional[dict]:
    """Runs the stages the settings ask for; returns {'train': ..., 'eval': ..., 'predict': [...], 'export': ...}
    (None for a data-preparation-only run, run_squad.py --do_prepro). Training stopped by a signal (SIGTERM,
    Ctrl-C: ``result['train']['stopped_by']``) ends the run there."""
    s = settings.validate()
    family = s.family()
    task = family.task(s)
    if task.prepare_only():
        return None
    with run_scope(s) as strategy:
        check_jit_compile(strategy, s.jit_compile)  # before the data is encoded
        # One training run at a time in a model_dir (two would interleave their checkpoints); evaluating,
        # predicting or exporting from it meanwhile is allowed.
        with training_lock(strategy, s.model_dir) if s.do_train else contextlib.nullcontext():
            return _stages(s, family, task, strategy)


def _check_resumes_its_own_run(s, family, task) -> None:
    """Refuses, before anything is written, to train in a ``--model_dir`` whose checkpoints are another task's or
    another model shape's (its finetune_settings.json), or a pretraining run's: resuming would train this task from
    that run's head, optimizer state and step (a head of the same shape loads), or stop at a shape error naming
    neither, having written this run's record into that directory."""
    from xlnet_tf import tasks
    from xlnet_tf.config import CHECKPOINT_KEYS, XLNetConfig
    from xlnet_tf.finetuning.serving import RUN_RECORD, read_run_record
    from xlnet_tf.training.settings import SettingsError

    if not tf.train.latest_checkpoint(s.model_dir):
        return
    record = read_run_record(s.model_dir)
    if record is None:
        if io_utils.exists(os.path.join(s.model_dir, "xlnet_config.json")):  # run_pretrain.py's (record_network)
            raise SettingsError(f"--model_dir={s.model_dir} holds a pretraining run (its checkpoints and "
                                "xlnet_config.json): fine-tune from it with --init_checkpoint="
                                f"{s.model_dir} and a new --model_dir")
        return  # a run of an older xlnet_tf, which recorded nothing
    other = tasks.other_task_of_record(record, family, s)
    differ = [f"the task {other[0]}, not {other[1]}"] if other else []
    path = record["settings"].get("model_config_path")
    if path and io_utils.exists(path):
        before = XLNetConfig.from_json(path).to_dict()
        now = task.model_config.to_dict()
        differ += [f"{k} {before[k]}, not {now[k]}" for k in CHECKPOINT_KEYS if before.get(k) != now.get(k)]
    if differ:
        raise SettingsError(f"--model_dir={s.model_dir} holds the training of another model: "
                            f"{', '.join(differ)} ({os.path.join(s.model_dir, RUN_RECORD)}): use a new --model_dir "
                            "(warm-started from this one's checkpoint with --init_checkpoint, if that is the aim)")


def _stages(s, family, task, strategy) -> dict:
    """``run``'s stages, once the strategy is up (and the training lock held).

    On several workers (``--strategy=multi_worker``) every worker trains, then evaluates and predicts on the whole
    eval data (``trainer.predict``: no collective), so that every worker's result is the run's; the files written
    once for the run (its record, the evaluation report and summaries, predictions, the export, --predict_input_glob's
    batch prediction) are the chief's alone to write, as its checkpoints are: workers writing them too would race
    the chief for the same paths (an export version: the loser failed). Every worker (the same flags) meets the
    others after training and at the end: the others wait for the chief's writing rather than end before it."""
    result, model = {}, None
    chief = worker_checkpoint_dir(strategy, s.model_dir)[1]
    workers = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and num_hosts(strategy) > 1

    if s.do_train:
        _check_resumes_its_own_run(s, family, task)  # cheap checks first: a refused resume writes and encodes nothing
        check_data_order(s.model_dir, data_order(s, strategy))
        if s.init_checkpoint and not tf.train.latest_checkpoint(s.model_dir):  # (a resumed run does not read it)
            # Seconds, before the minutes of encoding the data: a damaged checkpoint or one of another config.
            check_pretrained(s.init_checkpoint, task.model_config)
        task.check_eval_data()  # first: a missing or bad eval file is said before the minutes of the training set
        dataset_fn, summary = task.training_data(strategy.num_replicas_in_sync)
        # What `python -m xlnet_tf.cli.export` rebuilds the model from: written once the inputs were read, so that
        # a run that failed on them leaves the record of the run trained in this directory before (if any).
        if chief:
            write_run_record(s.model_dir, family, s)
        # labels: an HF --init_checkpoint's head is kept where it names the task's labels (checkpoint.warm_start)
        finetune = ModelAndLoss(task.build_model, task.loss, getattr(task, "labels", None),
                                task.sequences_per_example)
        model, train_metrics = train(strategy, finetune, s, dataset_fn)
        result["train"] = dict(train_metrics, **summary)
        if train_metrics.get("stopped_by"):
            # Stopped by a signal (checkpointed): evaluating, predicting or exporting now would publish a model half
            # trained (an export is a new version TF Serving loads) while the machine goes down. The rerun that
            # finishes training does them.
            later = [flag for flag, asked in (("--do_eval", s.do_eval), ("--do_predict", s.do_predict),
                                              ("--export_dir", s.export_dir)) if asked]
            if later:
                logging.warning("not run: %s (left to the rerun that finishes training)", ", ".join(later))
            return result

    def inference_model(checkpoint_path=None):
        with strategy.scope():
            fresh = task.build_model()
        return fresh, task.restore(fresh, checkpoint_path)

    evaluating = s.do_eval
    if evaluating or s.do_predict or s.export_dir:
        if s.do_train and workers:
            # The chief may still be writing the last checkpoint, which the workers read next (its path and step,
            # the checkpoints of --eval_all_ckpt): every worker here first (training's last collective is before
            # that save).
            all_workers_here(strategy, "at the end of training")
        if model is None or s.predict_ckpt:
            model, checkpoint = inference_model(s.predict_ckpt)
        else:
            checkpoint = tf.train.latest_checkpoint(s.model_dir)
        step = checkpoint_step(checkpoint)

    predicting = s.do_predict
    if s.do_predict and task.predicts_input_files():  # large inputs, streamed (xlnet_tf.batch.prediction)
        if chief:  # (one job writes a predict directory: another worker's would be refused by its lock)
            result["predict"] = predict_input_files(task, model, checkpoint, strategy)
        else:
            logging.info("--do_predict over --predict_input_glob: left to the chief (worker 0)")
        predicting = False
    if evaluating or predicting:
        data = task.eval_data()
        outputs = task.infer(strategy, model, data)
        if task.writes_predictions(predicting):
            if chief:
                written = task.write_predictions(data, outputs, step, checkpoint)
            else:
                written = []
                logging.info("predictions: written by the chief (worker 0)")
            if predicting:
                result["predict"] = written
        if task.evaluates(data, evaluating):
            metrics = task.metrics(data, outputs)
            others = None
            if getattr(s, "eval_all_ckpt", False):  # every checkpoint in model_dir, best by the main metric
                others = {}
                state = tf.train.get_checkpoint_state(s.model_dir)
                # Not those written between --save_steps where a signal stopped training (a preemption): a run never
                # stopped has none there, and the best checkpoint must not depend on whether the run was stopped.
                scored = [ckpt for ckpt in (state.all_model_checkpoint_paths if state else [])
                          if ckpt == checkpoint or checkpoint_step(ckpt) == s.train_steps
                          or not checkpoint_step(ckpt) % s.checkpoint_every]
                if checkpoint not in scored:
                    scored.append(checkpoint)
                if len(scored) > 1:
                    # One model for the others, restored in turn: building one under a multi-worker strategy is a
                    # collective (its initial values come from the chief), which every worker must then do as often.
                    other, _ = inference_model(checkpoint)
                for i, ckpt in enumerate(scored, 1):
                    if ckpt == checkpoint:  # evaluated above (write_eval writes its summaries)
                        others[ckpt] = metrics
                    else:
                        task.restore(other, ckpt)
                        others[ckpt] = task.metrics(data, task.infer(strategy, other, data))
                        if chief:
                            task.write_eval_summaries(checkpoint_step(ckpt), others[ckpt])
                    logging.info("--eval_all_ckpt %d/%d: %s at step %d: %s %.4f", i, len(scored), task.eval_split,
                                 checkpoint_step(ckpt), task.main_metric, others[ckpt][task.main_metric])
            if chief:
                result["eval"] = task.write_eval(metrics, step, checkpoint, data, others)
            else:
                result["eval"] = task.eval_report(metrics, step, checkpoint, data, others)
                logging.info("eval %s at step %d: %s (the chief, worker 0, writes the report)", task.name, step,
                             {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()})

    if s.export_dir:
        if chief:
            info = task.export_info(step)
            done = checkpoint and existing_export(s.export_dir, info, export_source(checkpoint, s.spiece_model_file))
            if done:  # a rerun of a finished run: a new version of the same model would only move TF Serving to it
                logging.info("--export_dir: %s is this checkpoint's export already (step %d); not exported again",
                             done, step)
                result["export"] = done
            else:
                result["export"] = export_serving(model, s.export_dir, info, s.spiece_model_file, checkpoint)
        else:
            logging.info("--export_dir=%s: the chief (worker 0) exports", s.export_dir)
    if workers and (evaluating or s.do_predict or s.export_dir):
        # The others wait for the chief's writing (an export: minutes) rather than end: a worker gone is soon
        # reported by the chief's coordination service as crashed. A chief that failed ends the others' wait.
        all_workers_here(strategy, "while the chief wrote the evaluation, predictions or export")
    return result


def predict_input_files(task, model, checkpoint: str, strategy) -> list:
    """``--do_predict`` over ``--predict_input_glob``: one predictions file per input file in the predict directory
    (``xlnet_tf.batch.prediction.predict_shards`` with the task family's batch hooks: streamed, resumable), the
    model run in ``strategy.run`` on batches of static shape (``--jit_compile``: with XLA). Returns the files
    written."""
    from xlnet_tf.batch import prediction as batch_predict

    s = task.settings
    info = dataclasses.asdict(task.serving_info(checkpoint_step(checkpoint)))
    length = info["max_seq_length"]  # a long document's whole length (docs/long_documents.md)
    predictor = batch_predict.KerasPredictor(
        model, task.family, info, task.tokenizer, length,
        identity=dict(sha256=batch_predict.checkpoint_sha256(checkpoint, model), task=task.name,
                      max_seq_length=length, spiece_sha256=task.tokenizer.fingerprint(), uncased=s.uncased),
        strategy=strategy, batch_size=s.predict_batch_size, jit_compile=s.jit_compile,
        source=dict(checkpoint=checkpoint))
    fields = batch_predict.Fields.parse(s.predict_text_fields, s.predict_id_field, "--predict_text_fields")
    summary = batch_predict.predict_shards(predictor, s.predict_input_glob, task.predict_dir, fields,
                                           predictor.batch_size, glob_flag="--predict_input_glob")
    return [shard["output"] for shard in summary["shards"]]
