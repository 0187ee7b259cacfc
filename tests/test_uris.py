"""Every path is a URI: the library on TensorFlow's in-memory ``ram://`` filesystem in this process (pretraining data,
a short pretraining run, fine-tuning from it, an export, batch prediction, a job's results), and the command-line
tools with ``file://`` URIs for every path (data -> pretrain -> fine-tune -> export -> batch predict). A path that
skips ``tf.io.gfile`` (os.path, open, glob, shutil) fails here: ram:// exists for no other API, and a file:// path
handed to one would be taken as a relative directory named ``file:``."""

import json
import os
import subprocess
import sys
import uuid

import pytest
import tensorflow as tf

from background import background
from classifier_helpers import FIXTURES, MICRO_CONFIG, REPO, SPIECE, make_flags
from xlnet_tf import io_utils
from xlnet_tf.errors import InputError
from xlnet_tf.training.settings import SettingsError

CORPUS = os.path.join(REPO, "data", "corpus", "brown_sample.txt")
gfile = tf.io.gfile


def ram_dir() -> str:
    return f"ram://xlnet-{uuid.uuid4().hex[:8]}"


def put_config(uri: str) -> str:
    """The one-layer test model's config at ``uri``: compiling the steps is most of these runs' time."""
    io_utils.write_json_atomic(uri, MICRO_CONFIG)
    return uri


def put(local: str, uri: str) -> str:
    io_utils.makedirs(os.path.dirname(uri))
    gfile.copy(local, uri, overwrite=True)
    return uri


def test_io_utils_atomic_writes_on_ram():
    root = ram_dir()
    path = io_utils.join(root, "a", "b.json")
    io_utils.write_json_atomic(path, {"x": 1})
    io_utils.write_json_atomic(path, {"x": 2})
    assert io_utils.read_json(path) == {"x": 2} and io_utils.listdir(io_utils.join(root, "a")) == ["b.json"]
    # A failed write leaves the old file and no temporary.
    with pytest.raises(RuntimeError):
        io_utils.atomic_write(path, lambda f: (f.write("half"), (_ for _ in ()).throw(RuntimeError("boom"))))
    assert io_utils.read_json(path) == {"x": 2} and io_utils.listdir(io_utils.join(root, "a")) == ["b.json"]
    # A directory is moved in file by file, the "complete" marker last; nothing temporary is left.
    target = io_utils.join(root, "export", "1")
    with io_utils.atomic_path(target, last=("saved_model.pb",)) as tmp:
        for name in ("saved_model.pb", "variables/variables.index", "assets.extra/x.json"):
            with io_utils.open(io_utils.join(tmp, name), "w") as f:
                f.write(name)
    assert sorted(io_utils.join(d, n)[len(target) + 1:] for d, _, ns in io_utils.walk(target) for n in ns) == [
        "assets.extra/x.json", "saved_model.pb", "variables/variables.index"]
    assert io_utils.listdir(io_utils.join(root, "export")) == ["1"]
    assert io_utils.read_text(io_utils.join(target, "variables/variables.index")) == "variables/variables.index"
    # Text reading as open() does (errors=, newline=, readline(size)).
    raw = io_utils.join(root, "t.txt")
    with io_utils.open(raw, "wb") as f:
        f.write(b"caf\xe9\r\nline two\n")
    with io_utils.open(raw, encoding="utf-8", errors="replace", newline="") as f:
        assert f.read() == "caf\ufffd\r\nline two\n"
    with io_utils.open(raw, "rb") as f:
        assert f.readline(3) == b"caf"
    assert io_utils.probe(raw) is True and io_utils.probe(raw + "x") is False and io_utils.stat(raw)[0] == 15


@pytest.mark.parametrize("where", ["local", "ram"])
def test_atomic_path_replaces_a_file_with_a_directory_and_back(tmp_path, where):
    """A local directory written over a file (or a file over a directory) raised NotADirectoryError /
    IsADirectoryError from rename() and left the temporary behind; object stores replaced either."""
    path = str(tmp_path / "out") if where == "local" else io_utils.join(ram_dir(), "out")
    io_utils.write_text_atomic(path, "a file")
    with io_utils.atomic_path(path) as tmp:
        io_utils.makedirs(tmp)
        io_utils.write_text_atomic(io_utils.join(tmp, "x.json"), "{}")
    assert io_utils.listdir(path) == ["x.json"]
    with io_utils.atomic_path(path) as tmp:
        io_utils.write_text_atomic(tmp, "a file again")
    assert io_utils.read_text(path) == "a file again"
    assert io_utils.listdir(io_utils.dirname(path)) == ["out"]  # nothing temporary left


def test_a_killed_writers_temporaries_are_removed_by_the_next_write_of_its_target(tmp_path):
    """A feature cache's or an export version's temporary directory of a killed run stayed forever (102 MB beside
    one cache): the next write of the same target removes those of processes gone from this host, and only those
    (another run alive may be writing the same cache; another host's processes cannot be asked)."""
    import subprocess

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = io_utils._host()
    cache = tmp_path / "sst-2.len-64.train.tf_record"
    stale = tmp_path / f".{cache.name}.tmp-{host}-{dead.pid}-abc_12"
    (stale / "out").mkdir(parents=True)
    (stale / "out" / "half").write_bytes(b"x" * 1000)
    stale_file = tmp_path / f".{cache.name}.tmp-{host}-{dead.pid}-q1w2e3"
    stale_file.write_text("half")
    live = tmp_path / f".{cache.name}.tmp-{host}-{os.getppid()}-zz9"  # a process that is alive: another writer
    live.mkdir()
    elsewhere = tmp_path / f".{cache.name}.tmp-otherhost-{dead.pid}-k8"
    elsewhere.mkdir()
    other_target = tmp_path / f".other.tmp-{host}-{dead.pid}-r5"  # another target's: not this write's to judge
    other_target.mkdir()
    with io_utils.atomic_path(str(cache)) as tmp:
        io_utils.write_text_atomic(tmp, "records")
    assert cache.read_text() == "records"
    assert sorted(os.listdir(tmp_path)) == sorted([cache.name, live.name, elsewhere.name, other_target.name])
    # A file written by atomic_write clears its dead temporaries too, and its own carry this host and pid.
    stale_file.write_text("half")
    io_utils.write_text_atomic(str(cache), "again")
    assert not stale_file.exists() and live.exists()
    with io_utils.atomic_path(str(tmp_path / "v")) as tmp:
        assert os.path.basename(os.path.dirname(tmp)).startswith(f".v.tmp-{host}-{os.getpid()}-")
        io_utils.write_text_atomic(tmp, "v")


def test_settings_check_uris_after_tensorflow_loads():
    """The settings layer never imports TensorFlow: a URI is taken as present until it is loaded (probe None),
    then checked with tf.io.gfile with the local message. The config and SentencePiece model beside a URI
    --init_checkpoint are not missing until then, and are looked up when validate() runs with TensorFlow loaded."""
    code = ("import sys; from xlnet_tf.training.settings import PretrainSettings as P; "
            "e = P(model_dir='m', data_dir='d', model_config_path='ram://nope/c.json').errors(); "
            "w = P(model_dir='m', data_dir='d', train_batch_size=8, seq_len=16, reuse_len=8, num_predict=2, "
            "train_steps=2, init_checkpoint='gs://b/release/xlnet_model.ckpt'); "
            "print([x for x in e if 'file not found' in x], w.awaiting(), w.errors(), 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                         env=dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert out.stdout.strip() == "[] ('model_config_path', 'spiece_model_file') [] False", out.stderr[-2000:]
    from xlnet_tf.training.settings import PretrainSettings  # TensorFlow is loaded here

    errors = PretrainSettings(model_dir="m", data_dir="d", model_config_path="ram://nope/c.json").errors()
    assert "--model_config_path=ram://nope/c.json: file not found" in errors
    release = f"ram://{uuid.uuid4().hex}/release"
    io_utils.write_text_atomic(f"{release}/xlnet_config.json", json.dumps(MICRO_CONFIG))
    found = PretrainSettings(model_dir="m", data_dir="d", init_checkpoint=release)  # (a release directory)
    assert found.model_config_path == f"{release}/xlnet_config.json" and found.spiece_model_file is None
    with pytest.raises(SettingsError, match=r"missing required flag\(s\): --model_config_path \(no xlnet_config.json "
                                            r"beside --init_checkpoint=ram://\w+/nothing/xlnet_model.ckpt\)"):
        PretrainSettings(model_dir="m", data_dir="d", train_batch_size=8, seq_len=16, reuse_len=8, num_predict=2,
                         train_steps=2, init_checkpoint=release.replace("release", "nothing") + "/xlnet_model.ckpt",
                         ).validate()


@pytest.mark.slow
def test_pretrain_finetune_export_predict_on_ram():
    """The library, every path on ram://: data written from a ram:// corpus, 2 pretraining steps, 2 fine-tuning
    steps from that checkpoint with prediction and an export, batch prediction with the export, a job's files."""
    from xlnet_tf.batch import job_runner, prediction as bp
    from xlnet_tf import runner
    from xlnet_tf.finetuning.serving import existing_versions
    from xlnet_tf.training.pretraining import pretrain
    from xlnet_tf.training.settings import PretrainSettings

    root = ram_dir()
    spiece, config = put(SPIECE, f"{root}/in/spiece.model"), put_config(f"{root}/in/config.json")
    with open(CORPUS, encoding="utf-8") as f:
        io_utils.write_text_atomic(f"{root}/in/corpus/a.txt", "".join(f.readlines()[:300]))
    metrics = pretrain(PretrainSettings(
        model_config_path=config, spiece_model_file=spiece, input_glob=f"{root}/in/corpus/*.txt",
        data_dir=f"{root}/data", model_dir=f"{root}/pretrain", train_batch_size=4, seq_len=16, reuse_len=8,
        perm_size=8, mem_len=8, num_predict=3, train_steps=2, iterations=2, learning_rate=1e-3))
    assert metrics["step"] == 2
    assert tf.train.latest_checkpoint(f"{root}/pretrain").endswith("-2")
    assert io_utils.exists(f"{root}/data/manifest.json")

    glue = f"{root}/glue/MRPC"
    for name in os.listdir(os.path.join(FIXTURES, "glue", "MRPC")):
        put(os.path.join(FIXTURES, "glue", "MRPC", name), f"{glue}/{name}")
    settings = make_flags("/nonexistent-unused", task_name="mrpc", data_dir=glue, model_config_path=config,
                          spiece_model_file=spiece, init_checkpoint=f"{root}/pretrain", model_dir=f"{root}/ft",
                          output_dir=f"{root}/ft-data", max_seq_length=24, do_train=True, do_predict=True,
                          export_dir=f"{root}/serving", predict_dir=f"{root}/predict")
    result = runner.run(settings)
    assert result["export"] == f"{root}/serving/2" and existing_versions(f"{root}/serving") == [2]
    assert io_utils.listdir(f"{root}/serving") == ["2"]  # no temporary left
    assert io_utils.exists(f"{root}/serving/2/saved_model.pb")
    assert io_utils.exists(f"{root}/serving/2/assets.extra/spiece.model")
    assert len(io_utils.read_json(f"{root}/predict/mrpc.dev.logits.json")) == 6

    io_utils.write_text_atomic(f"{root}/batch/in/part-0.tsv", "id\tsentence\tsentence2\nr0\tA dog.\tA cat.\n"
                                                             "r1\tIt rains.\tIt is wet.\n")
    predictor = bp.SavedModelPredictor(f"{root}/serving")
    summary = bp.predict_shards(predictor, f"{root}/batch/in/*.tsv", f"{root}/batch/out",
                                bp.Fields.parse("sentence,sentence2", "id"), batch_size=2)
    assert summary["complete"] and summary["rows"] == 2
    out = io_utils.read_text(f"{root}/batch/out/part-0.tsv.predictions.jsonl").splitlines()
    assert [json.loads(line)["id"] for line in out] == ["r0", "r1"]

    job_file = f"{root}/job.yaml"
    io_utils.write_text_atomic(job_file, f"output_dir: {root}/job\nruns:\n  - name: a\n    task_name: mrpc\n")
    job = job_runner.load_job(job_file)
    job_runner.prepare_run(job.runs[0])
    job_runner.write_results(job, [dict(run="a", group="a", task="mrpc", seed=None, status="pending",
                                        model_dir=job.runs[0].model_dir, log="")])
    assert io_utils.read_json(f"{root}/job/results.json")["runs"][0]["status"] == "pending"
    assert io_utils.exists(f"{root}/job/a/{job_runner.FLAGS_FILE}") and job_runner.flags_changed(job.runs[0]) == []


def _tool(command, args, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, *command, *[f"--{k}={v}" for k, v in args.items()]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stderr


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_command_line_tools_with_file_uris(tmp_path):
    """data + pretrain -> fine-tune -> export -> batch predict, every path a file:// URI, run from an empty
    working directory: a path taken by a non-gfile API would leave a ``file:`` directory there or fail."""
    work, root = tmp_path / "cwd", tmp_path / "store"
    work.mkdir()
    uri = f"file://{root}"
    spiece, config = put(SPIECE, f"{uri}/in/spiece.model"), put_config(f"{uri}/in/config.json")
    with open(CORPUS, encoding="utf-8") as f:
        io_utils.write_text_atomic(f"{uri}/in/corpus/a.txt", "".join(f.readlines()[:300]))
    for name in os.listdir(os.path.join(FIXTURES, "glue", "SST-2")):
        put(os.path.join(FIXTURES, "glue", "SST-2", name), f"{uri}/glue/SST-2/{name}")
    # run_pretrain.py writes the data from --input_glob first (the writer of python -m xlnet_tf.cli.create_data;
    # one process less).
    _tool([os.path.join(REPO, "run_pretrain.py")], dict(
        config_file="", model_config_path=config, spiece_model_file=spiece, input_glob=f"{uri}/in/corpus/*.txt",
        data_dir=f"{uri}/data", model_dir=f"{uri}/pretrain", train_batch_size=4, seq_len=16, reuse_len=8,
        num_predict=3, perm_size=8, mem_len=8, train_steps=2, iterations=2), work)
    # The config and SentencePiece model: the pretraining run's, beside --init_checkpoint (looked up once
    # TensorFlow is loaded: a URI).
    _tool([os.path.join(REPO, "run_classifier.py")], dict(
        task_name="sst-2", data_dir=f"{uri}/glue/SST-2", output_dir=f"{uri}/features",
        init_checkpoint=f"{uri}/pretrain", model_dir=f"{uri}/ft", max_seq_length=24, train_batch_size=4,
        train_steps=2, iterations=2, do_train=True), work)
    _tool(["-m", "xlnet_tf.cli.export"], dict(model_dir=f"{uri}/ft", export_dir=f"{uri}/serving"), work)
    io_utils.write_text_atomic(f"{uri}/batch/part-0.tsv", "id\tsentence\nr0\tA fine film.\nr1\tDull.\n")
    _tool(["-m", "xlnet_tf.cli.predict"], dict(
        saved_model=f"{uri}/serving", input_glob=f"{uri}/batch/*.tsv", output_dir=f"{uri}/predictions",
        id_field="id", batch_size=2), work)
    rows = [json.loads(line) for line in (root / "predictions" / "part-0.tsv.predictions.jsonl").read_text()
            .splitlines()]
    assert [r["id"] for r in rows] == ["r0", "r1"] and all(r["prediction"] in ("0", "1") for r in rows)
    assert (root / "data" / "manifest.json").exists() and (root / "ft" / "finetune_settings.json").exists()
    assert os.listdir(root / "serving") == ["2"] and (root / "serving" / "2" / "saved_model.pb").exists()
    assert os.listdir(work) == []  # nothing written relative to the working directory ("file:/...")


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_a_missing_uri_is_one_line_naming_the_flag(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "xlnet_tf.cli.export", f"--model_dir=file://{tmp_path}/none",
         f"--export_dir=file://{tmp_path}/out"], cwd=REPO, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"error: --model_dir=file://{tmp_path}/none: not a directory" in done.stderr


# -- a URI that cannot be used (issue 36): no network, no credentials, permission denied -> one line naming it ------

def _failing_gfile(monkeypatch, error):
    def fail(*args, **kwargs):
        raise error
    for name in ("exists", "isdir", "listdir", "glob", "stat", "makedirs", "GFile", "copy", "rename", "remove"):
        monkeypatch.setattr(tf.io.gfile, name, fail)


@pytest.mark.parametrize("error, says", [
    (tf.errors.FailedPreconditionError(None, None, "Error executing an HTTP request: libcurl code 6 meaning "
                                                   "'Could not resolve hostname'\n\t when reading gs://b/x"),
     "gs://b/x: cannot be reached (Error executing an HTTP request: libcurl code 6"),
    (tf.errors.PermissionDeniedError(None, None, "Error executing an HTTP request: HTTP response code 403"),
     "gs://b/x: permission denied (Error executing an HTTP request: HTTP response code 403); check the network "
     "and the credentials"),
    (tf.errors.UnauthenticatedError(None, None, "no token"), "gs://b/x: not authenticated"),
])
def test_every_io_function_names_a_uri_it_cannot_use(monkeypatch, error, says):
    _failing_gfile(monkeypatch, error)
    calls = {"exists": lambda p: io_utils.exists(p), "isdir": lambda p: io_utils.isdir(p),
             "listdir": lambda p: io_utils.listdir(p), "glob": lambda p: io_utils.glob(p + "/*"),
             "stat": lambda p: io_utils.stat(p), "makedirs": lambda p: io_utils.makedirs(p),
             "read": lambda p: io_utils.read_text(p), "json": lambda p: io_utils.read_json(p),
             "write": lambda p: io_utils.write_text_atomic(p, "x"), "copy": lambda p: io_utils.copy(p, p + "2")}
    for what, call in calls.items():
        with pytest.raises(InputError) as caught:
            call("gs://b/x")
        assert str(caught.value).startswith("gs://b/x") and says.split(" (")[0].split(": ", 1)[1] in str(
            caught.value) and "\n" not in str(caught.value), (what, str(caught.value))
    assert says in str(caught.value)


def test_tensorflows_own_uri_errors_are_one_line_and_others_keep_their_traceback():
    from xlnet_tf.cli.flags import user_error_message

    raw = tf.errors.FailedPreconditionError(None, None, "Error executing an HTTP request: libcurl code 6\n\t when "
                                                        "reading metadata of gs://bucket/m/checkpoint")
    assert user_error_message(raw) == (
        "gs://bucket/m/checkpoint: cannot be reached (Error executing an HTTP request: libcurl code 6); check the "
        "network and the credentials (gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS)")
    assert user_error_message(tf.errors.NotFoundError(None, None, "gs://bucket/none/x.index")) == \
        "gs://bucket/none/x.index: not found"
    assert user_error_message(tf.errors.InvalidArgumentError(None, None, "shape mismatch")) is None
    assert user_error_message(tf.errors.InternalError(None, None, "a kernel failed")) is None


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_run_tagger_with_gs_paths_and_no_network_is_one_line():
    """This machine has no network: the gs:// data directory is named with the cause (was a traceback)."""
    done = subprocess.run(
        [sys.executable, "run_tagger.py", "--data_dir=gs://xlnet-no-such-bucket/x", "--model_dir=gs://xlnet-no-such-"
         "bucket/m", f"--spiece_model_file={SPIECE}", "--model_config_path=configs/tiny.json", "--do_train",
         "--train_steps=1"], cwd=REPO, capture_output=True, text=True, timeout=180,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-2]
    assert line.startswith("run_tagger.py: error: gs://xlnet-no-such-bucket/"), line
