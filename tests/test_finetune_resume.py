"""Fine-tuning resumes exactly: a run SIGKILLed at a random step after a checkpoint (or stopped there by Ctrl-C) and
rerun with the same flags ends with the checkpoint an uninterrupted run ends with (every variable: weights, optimizer
slots, step, dropout seed states), dropout on, for classification, multiple choice (RACE) and SQuAD; changed order
flags are refused. Every run is a command line, so these tests run on the background thread (tests/background.py)."""

import glob
import os
import pathlib
import random
import re
import subprocess
import sys
import types

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from background import background
from classifier_helpers import DEFAULTS, FIXTURES, REPO, SPIECE, micro_config
from cli_helpers import assert_usage_error
from training_state import assert_same_state, differences, stopped_at

TRAIN_STEPS, SAVE_STEPS = 16, 5
KILLED_AT = os.path.join(REPO, "tests", "killed_at.py")  # runs an entry point and kills it at a step


def common(tmp_path) -> dict:
    return dict(model_config_path=micro_config(tmp_path), spiece_model_file=SPIECE, model_dir=str(tmp_path / "model"),
                do_train=True, train_steps=TRAIN_STEPS, save_steps=SAVE_STEPS, iterations=3, learning_rate=1e-3,
                dropout=0.1, dropatt=0.1, train_batch_size=4, shuffle_buffer=3, seed=3)


def flag_list(values: dict) -> list:
    return [f"--{k}={v}" for k, v in values.items() if v is not None]


def _env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def start_killed(script: str, values: dict, tmp_path, signal_name: str = "KILL"):
    """``script`` with ``values`` (its own model_dir and feature cache) started in a process that kills itself at a
    random step past the first checkpoint (``signal_name="INT"``: Ctrl-C there, and it asks for evaluation and an
    export too); returns what ``resume_killed`` takes. Started before the uninterrupted run, beside which it
    imports TensorFlow."""
    values = dict(values, model_dir=str(tmp_path / "killed"))
    if values.get("output_dir"):
        values["output_dir"] = str(tmp_path / "killed_features")
    if signal_name == "INT":
        values.update(do_eval=True, eval_batch_size=4, export_dir=str(tmp_path / "killed_export"))
    kill_at = random.Random().randint(SAVE_STEPS + 1, TRAIN_STEPS - 1)
    log = tmp_path / "killed.log"  # a file, not a pipe: nobody reads its output while this process trains
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, KILLED_AT, f"--signal={signal_name}", str(kill_at), script,
                                 *flag_list(values)], cwd=REPO, env=_env(), stdout=f, stderr=subprocess.STDOUT)
    return proc, script, values, kill_at, log, signal_name


def run_entry_point(script: str, values: dict, *before: str):
    """``script`` with ``values`` as its flags, run to its end in a new process as a user runs it (``before``:
    ``python`` arguments ahead of the script's, e.g. ``-c CODE``); the finished process."""
    return subprocess.run([sys.executable, *before, script, *flag_list(values)], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=600)


def run_to_the_end(script: str, values: dict) -> None:
    done = run_entry_point(script, values)
    assert done.returncode == 0, done.stderr[-3000:]


def resume_killed(started) -> str:
    """Waits for the killed run of ``start_killed``, then reruns its command; returns its model_dir."""
    proc, script, values, kill_at, log, signal_name = started
    proc.wait(timeout=600)
    text = log.read_text()
    saved = tf.train.latest_checkpoint(values["model_dir"])
    if signal_name == "KILL":
        assert proc.returncode == -9, (kill_at, text[-3000:])
        assert saved and saved.endswith(f"-{(kill_at - 1) // SAVE_STEPS * SAVE_STEPS}"), (kill_at, saved)
    else:
        # Ctrl-C: the host loop it came in ends, is checkpointed, and the run stops there, exit 130, without
        # evaluating or exporting the half-trained model (the rerun does, once trained).
        stop = re.search(rf"stopped by SIGINT at step (\d+) of {TRAIN_STEPS}; rerun the same command to "
                         "resume", text)
        assert proc.returncode == 130 and stop and int(stop.group(1)) >= kill_at, (kill_at, text[-3000:])
        assert saved and saved.endswith(f"-{stop.group(1)}"), (kill_at, saved)
        assert "not run: --do_eval, --export_dir (left to the rerun" in text and "Traceback" not in text, text[-3000:]
        assert not os.path.exists(values["export_dir"]) and not glob.glob(os.path.join(values["model_dir"], "eval*"))
        values = dict(values, do_eval=False, export_dir=None)  # (what the rerun then does is tested elsewhere)
    run_to_the_end(script, values)
    return values["model_dir"]


def variables_by_path(model_dir: str) -> dict:
    """Every variable of the latest checkpoint in ``model_dir`` by its shortest object path other than the named
    ``weights/`` copies (Keras names a model's layers _1, _2... when this process builds it again)."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    values, seen, queue = {}, set(), [(0, "")]
    while queue:  # breadth first: each node by its shortest path
        node, path = queue.pop(0)
        if node in seen:
            continue
        seen.add(node)
        values.update({f"{path}/{a.name}": reader.get_tensor(a.checkpoint_key) for a in graph.nodes[node].attributes})
        queue += [(c.node_id, f"{path}/{c.local_name}") for c in graph.nodes[node].children
                  if (node, c.local_name) != (0, "weights")]
    return values


def assert_same_feature_bytes(straight_dir: str, killed_dir: str):
    """The training features cached by the run in this process and by the killed one (another process, with
    another hash seed) are the same bytes: an Example is serialized deterministically."""
    straight, killed = pathlib.Path(straight_dir), pathlib.Path(killed_dir)
    names = sorted(str(p.relative_to(straight)) for p in straight.rglob("*.tf_record"))
    assert names and set(names) <= {str(p.relative_to(killed)) for p in killed.rglob("*.tf_record")}
    for name in names:
        assert (straight / name).read_bytes() == (killed / name).read_bytes(), name


def assert_same_checkpoints(straight_dir: str, resumed_dir: str):
    straight, resumed = variables_by_path(straight_dir), variables_by_path(resumed_dir)
    assert straight["/global_step/VARIABLE_VALUE"] == TRAIN_STEPS
    assert [n for n in straight if n.startswith("/dropout_seeds/")] and [n for n in straight if "/optimizer/" in n]
    # dropout on; equal to float32 round-off (training_state.py says what that means and why). Not compared:
    # save_counter, the number of saves (a stop by Ctrl-C saves once more), which no step reads.
    resumed.pop("/save_counter/VARIABLE_VALUE")
    assert_same_state({k: v for k, v in straight.items() if k != "/save_counter/VARIABLE_VALUE"}, resumed)


def classifier_values(tmp_path, **task) -> dict:
    return dict(DEFAULTS, **common(tmp_path), max_seq_length=32, **task)


def killed_classifier_run_resumes_exactly(tmp_path, signal_name, **task) -> dict:
    """A run_classifier.py run killed (``signal_name``) and rerun ends with the checkpoint and the cached features
    of an uninterrupted run of the same command; the flags of both."""
    values = classifier_values(tmp_path, **task)
    started = start_killed("run_classifier.py", values, tmp_path, signal_name)
    run_to_the_end("run_classifier.py", values)
    killed = resume_killed(started)
    assert_same_checkpoints(values["model_dir"], killed)
    assert_same_feature_bytes(os.path.join(values["model_dir"], "features"), os.path.join(killed, "features"))
    return values


# A Python process that runs ``run_classifier.py ARGS`` with its training stream started one batch late.
_ONE_BATCH_OFF = """
import runpy, sys
from xlnet_tf.cli.flags import import_tensorflow
import_tensorflow()
from xlnet_tf.finetuning import records
right = records.train_dataset
def shifted(path, spec, ctx, per_replica, shuffle_buffer, seed, num_records, start_step=0):
    return right(path, spec, ctx, per_replica, shuffle_buffer, seed, num_records, start_step + 1)
records.train_dataset = shifted
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@background
def test_a_classifier_run_stopped_by_ctrl_c_resumes_exactly(tmp_path):
    """SST-2, stopped by Ctrl-C; and the comparison's power: a run resumed from the same checkpoint one batch off
    the right data position differs beyond round-off (weights by about the learning rate, optimizer moments by
    their size)."""
    values = killed_classifier_run_resumes_exactly(
        tmp_path, "INT", task_name="sst-2", data_dir=os.path.join(FIXTURES, "glue", "SST-2"))
    off = str(tmp_path / "one_batch_off")
    stopped_at(tmp_path / "killed", SAVE_STEPS, off, name="model")  # resumes from the first checkpoint
    done = run_entry_point("run_classifier.py", dict(values, model_dir=off), "-c", _ONE_BATCH_OFF)
    assert done.returncode == 0, done.stderr[-3000:]
    differ = differences(variables_by_path(values["model_dir"]), variables_by_path(off))
    assert sum("/optimizer/" in n for n in differ) >= 4 and any("/optimizer/" not in n for n in differ), differ


@pytest.mark.slow
@background
def test_a_killed_multiple_choice_run_resumes_exactly_and_refuses_flags_that_change_its_batches(tmp_path):
    """RACE, SIGKILLed; flags that would change the batches of the remaining steps are refused, naming them,
    and the run record is left as it was."""
    values = killed_classifier_run_resumes_exactly(
        tmp_path, "KILL", task_name="race", data_dir=os.path.join(FIXTURES, "race"), max_qa_length=16)
    record = os.path.join(values["model_dir"], "finetune_settings.json")
    with open(record) as f:
        recorded = f.read()
    more = dict(values, train_steps=TRAIN_STEPS + 4, seed=4, train_batch_size=8)
    assert_usage_error(run_entry_point("run_classifier.py", more), "run_classifier.py",
                       "trained with --seed=3 --train_batch_size=4; resuming with --seed=4 --train_batch_size=8 would "
                       "change the training batches from step 16")
    with open(record) as f:
        assert f.read() == recorded


@pytest.mark.slow
@background
def test_killed_squad_run_resumes_exactly(tmp_path):
    squad = os.path.join(FIXTURES, "squad")
    values = dict(common(tmp_path), train_file=os.path.join(squad, "train-v2.0.json"),
                  output_dir=str(tmp_path / "features"), max_seq_length=64, max_query_length=16, doc_stride=24)
    started = start_killed("run_squad.py", values, tmp_path)
    run_to_the_end("run_squad.py", values)
    killed = resume_killed(started)
    assert_same_checkpoints(values["model_dir"], killed)
    assert_same_feature_bytes(values["output_dir"], str(tmp_path / "killed_features"))


def _write_ids(path: str, ids) -> None:
    with tf.io.TFRecordWriter(path) as writer:
        for i in ids:
            feature = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _batches(ds, count):
    return [b["id"].numpy().tolist() for b in ds.take(count)]


def test_training_stream_is_a_function_of_the_step_for_every_input_pipeline(tmp_path):
    """What the resume relies on, per input pipeline of a multi-worker job (2 pipelines feeding 2 replicas
    each): started at step k, the stream gives the batches the stream started at 0 gives from step k on; each
    epoch is a new order of the pipeline's records, each record once."""
    from xlnet_tf.finetuning import records

    path = str(tmp_path / "train.tf_record")
    _write_ids(path, range(23))
    spec = {"id": ([], tf.int64)}
    for pipeline in (0, 1):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=4)

        def stream(step):
            return records.train_dataset(path, spec, ctx, 2, shuffle_buffer=5, seed=7, num_records=23,
                                         start_step=step)
        straight = _batches(stream(0), 30)
        for step in (1, 3, 6, 11):  # within the first window, epoch boundaries, several epochs on
            assert _batches(stream(step), 30 - 2 * step) == straight[2 * step:], (pipeline, step)
        flat = sum(straight, [])
        mine = list(range(pipeline, 23, 2))
        epochs = [flat[i:i + len(mine)] for i in range(0, 4 * len(mine), len(mine))]
        assert all(sorted(e) == mine for e in epochs) and len({tuple(e) for e in epochs}) == 4, epochs
        assert all(sorted(e[:5]) == mine[:5] for e in epochs)  # shuffled within windows of --shuffle_buffer


def test_squad_stream_counts_each_pipelines_records(tmp_path):
    """SQuAD shards (record counts from their manifests): whole shards per pipeline when there are enough,
    else records dealt round-robin; either way a later start continues the same stream."""
    from xlnet_tf.finetuning import records
    from xlnet_tf.tasks.squad import squad_data

    paths = []
    for i, count in enumerate((5, 9, 4)):
        paths.append(str(tmp_path / f"shard{i}.tf_record"))
        records.write_records(paths[-1], [squad_data.feature_row(_squad_feature(i * 100 + j)) for j in range(count)],
                              {})
    for pipelines in (2, 4):
        ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipelines - 1,
                                         num_replicas_in_sync=pipelines)

        def stream(step):
            ds = squad_data.train_dataset(paths, 2, 8, ctx, shuffle_buffer=3, seed=1, start_step=step)
            return [b["unique_ids"].numpy().tolist() for b in ds.take(24 - step)]
        straight = stream(0)
        for step in (3, 13):
            assert stream(step) == straight[step:], (pipelines, step)


def _squad_feature(unique_id):
    return types.SimpleNamespace(unique_id=unique_id, input_ids=[1] * 8, padding_mask=[1.0] * 8, p_mask=[0.0] * 8,
                                 segment_ids=[0] * 8, cls_index=7, start_position=0, end_position=0,
                                 is_impossible=False)
