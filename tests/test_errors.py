"""Expected errors are one line, checked before work (issue 27: 12-14): what the entry points turn into that line
(``cli.flags.user_error_message``), output directories checked with the settings, a damaged or mismatched
``--init_checkpoint`` found before the data is encoded (leaving no record of the failed run), and the tools' lines
as a user sees them: no traceback, exit 1."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from background import background
from classifier_helpers import FIXTURES, MICRO_CONFIG, REPO, make_flags
from xlnet_tf.checkpoint import check_pretrained, native_checkpoint, read_model
from xlnet_tf.cli.flags import user_error_message
from xlnet_tf.cli.predict import PredictSettings
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import InputError
from xlnet_tf import runner
from xlnet_tf.models.xlnet import XLNetModel


def raised(function):
    try:
        function()
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("nothing raised")


def test_errors_a_user_caused_are_one_line_and_bugs_keep_their_traceback(tmp_path):
    def generator(error):
        def rows():
            yield 1
            raise error
        return tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec([], tf.int32))

    # Raised in a tf.data generator, TensorFlow re-raises it as its own error with the Python traceback inside.
    wrapped = raised(lambda: list(generator(InputError("/data/a.tsv:3: label 'x' is not in the label set"))))
    assert isinstance(wrapped, tf.errors.InvalidArgumentError) and "Traceback" in wrapped.message
    assert user_error_message(wrapped) == "/data/a.tsv:3: label 'x' is not in the label set"
    assert user_error_message(raised(lambda: list(generator(KeyError("bug"))))) is None
    # A truncated TFRecord file: DataLossError, named as damaged input.
    path = str(tmp_path / "a.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"x" * 100)
    with open(path, "r+b") as f:
        f.truncate(50)
    message = user_error_message(raised(lambda: list(tf.data.TFRecordDataset(path))))
    assert message.startswith("damaged input: ") and "truncated or corrupt TFRecord" in message
    assert "{{" not in message and "\n" not in message
    full = OSError(28, "No space left on device", "/runs/x/model.tmp")
    assert user_error_message(full) == "/runs/x/model.tmp: No space left on device"
    assert user_error_message(FileNotFoundError("gone.tsv")) == "gone.tsv"
    assert user_error_message(ValueError("a bug")) is None and user_error_message(tf.errors.InternalError(
        None, None, "a bug")) is None


def test_a_full_disk_or_a_file_size_limit_is_one_line_naming_the_file(tmp_path):
    """TensorFlow's writers (TFRecord caches, SaveV2 of checkpoints and exports) said "No space left on device" in a
    ResourceExhaustedError's traceback; a file-size limit (ulimit -f) was a traceback through atomic_write, and a full
    disk there named no file."""
    import errno

    from xlnet_tf import io_utils

    cache = tf.errors.ResourceExhaustedError(None, None, "/d/feat/.sst-2.tf_record.tmp-4eumh6am/out; No space left "
                                             "on device")
    assert user_error_message(cache) == "/d/feat/.sst-2.tf_record.tmp-4eumh6am/out: No space left on device"
    save = tf.errors.ResourceExhaustedError(None, None, "{{function_node __wrapped__SaveV2_dtypes_1_device_/job:"
                                            "localhost}} /m/model-2_temp/part-00000-of-00001.data-00000-of-00001."
                                            "tempstate1; Disk quota exceeded [Op:SaveV2]")
    assert user_error_message(save) == ("/m/model-2_temp/part-00000-of-00001.data-00000-of-00001.tempstate1: "
                                        "Disk quota exceeded")
    # Memory, not disk: a bug or a too-big model, kept with its traceback.
    assert user_error_message(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")) is None
    target = str(tmp_path / "part-1.tsv.predictions.jsonl")
    for code in (errno.ENOSPC, errno.EFBIG):
        def write(f, code=code):
            f.write("{}\n")
            raise OSError(code, os.strerror(code))  # what f.write raises on a full disk, or past ulimit -f
        error = raised(lambda: io_utils.atomic_write(target, write))
        assert user_error_message(error) == f"{target}: {os.strerror(code)}"
        assert not os.listdir(tmp_path)  # nothing half-written left
    # Another errno without a file name (write_fn reading its input) is not put on the target.
    error = raised(lambda: io_utils.atomic_write(target, lambda f: (_ for _ in ()).throw(OSError(errno.EINVAL, "x"))))
    assert error.filename is None


def test_a_missing_input_is_an_input_error_for_library_callers_too(tmp_path):
    """Files named but not there were FileNotFoundErrors in some modules and InputErrors in others: a caller
    catching InputError (the library's "what the user gave") missed a missing SentencePiece model or data split.
    Each is a MissingInputError now, both at once."""
    from xlnet_tf.errors import InputError
    from xlnet_tf.tasks.classification import classifier_data
    from xlnet_tf.tokenization import XLNetTokenizer

    for call in (lambda: XLNetTokenizer(str(tmp_path / "none.model")),
                 lambda: classifier_data.read_examples(classifier_data.TASKS["sst-2"], str(tmp_path), "dev")):
        with pytest.raises(InputError) as error:
            call()
        assert isinstance(error.value, FileNotFoundError) and str(tmp_path) in str(error.value)
    raised = subprocess.run(["grep", "-rn", "raise FileNotFoundError", os.path.join(REPO, "xlnet_tf")],
                            capture_output=True, text=True).stdout
    assert not raised, raised


def test_output_directories_are_checked_with_the_settings(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    settings = dict(saved_model=str(tmp_path), input_glob="x.tsv")
    assert PredictSettings(**settings, output_dir=str(blocker)).errors() == [
        f"--output_dir={blocker}: is a file, not a directory"]
    assert PredictSettings(**settings, output_dir=str(blocker / "sub" / "out")).errors() == [
        f"--output_dir={blocker}/sub/out: {blocker} is a file, not a directory"]
    errors = make_flags(tmp_path, task_name="sst-2", do_train=True, data_dir=str(tmp_path),
                        export_dir=str(blocker)).errors()
    assert errors == [f"--export_dir={blocker}: is a file, not a directory"]
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert PredictSettings(**settings, output_dir=str(locked / "out")).errors() == [
            f"--output_dir={locked}/out: cannot write in {locked} (permission denied)"]
    assert PredictSettings(**settings, output_dir=str(tmp_path / "new" / "out")).errors() == []


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A native pretrained checkpoint of the micro network, a copy with its data file cut in half, and one with a
    garbage index."""
    tmp = tmp_path_factory.mktemp("pretrained")
    prefix = native_checkpoint(XLNetModel(XLNetConfig(**MICRO_CONFIG))).write(str(tmp / "good" / "ckpt"))
    damaged = {}
    for name in ("half_data", "bad_index"):
        shutil.copytree(tmp / "good", tmp / name)
        damaged[name] = str(tmp / name / "ckpt")
    data = tmp / "half_data" / "ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    (tmp / "bad_index" / "ckpt.index").write_bytes(b"not an index" * 20)
    return prefix, damaged


def test_a_damaged_or_mismatched_checkpoint_is_an_input_error(pretrained):
    prefix, damaged = pretrained
    config = XLNetConfig(**MICRO_CONFIG)
    check_pretrained(prefix, config)
    for path in damaged.values():
        with pytest.raises(InputError, match=f"{path}: unreadable checkpoint"):
            check_pretrained(path, config)
    wider = XLNetConfig(**dict(MICRO_CONFIG, d_model=32))
    with pytest.raises(InputError, match=rf"{prefix}: checkpoint does not hold every XLNet variable of this "
                                         r"model \(different config\?\): .*shape"):
        check_pretrained(prefix, wider)
    with pytest.raises(InputError, match=rf"{prefix}: not a checkpoint of this model"):
        read_model(XLNetModel(wider), prefix)


def test_init_checkpoint_is_checked_before_the_data_is_encoded(pretrained, tmp_path):
    """A damaged --init_checkpoint ends the run before the features are encoded, and leaves neither a feature
    cache nor a finetune_settings.json (which the export would trust) in --model_dir."""
    _, damaged = pretrained
    settings = make_flags(tmp_path, task_name="sst-2", do_train=True, data_dir=os.path.join(FIXTURES, "glue", "SST-2"),
                          init_checkpoint=damaged["half_data"])
    with pytest.raises(InputError, match="unreadable checkpoint"):
        runner.run(settings)
    assert not os.path.exists(settings.model_dir) or os.listdir(settings.model_dir) == []


# A fine-tuned SST-2 checkpoint of a wider micro model (d_model 32) at argv[1]/model-1.
_WIDER_CHECKPOINT = """
import json, os, sys
import tensorflow as tf
from classifier_helpers import MICRO_CONFIG, build_model, make_flags
wider = make_flags(sys.argv[1], task_name="sst-2", do_predict=True)
with open(os.path.join(sys.argv[1], "micro_config.json"), "w") as f:
    json.dump(dict(MICRO_CONFIG, d_model=32), f)
model, _ = build_model(wider)
tf.train.Checkpoint(model=model).write(os.path.join(sys.argv[1], "model-1"))
"""


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_the_tools_print_one_line_and_exit_1(tmp_path):
    """As a user runs them (started together: each pays TensorFlow's import): a damaged --init_checkpoint (its
    index garbage), a fine-tuned checkpoint of another shape, and run_squad.py evaluating with only
    --init_checkpoint."""
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO_CONFIG))
    common = [f"--model_config_path={config}", "--spiece_model_file=data/spiece.model", "--max_seq_length=32"]
    damaged = tmp_path / "bad_index" / "ckpt"
    damaged.parent.mkdir()
    (tmp_path / "bad_index" / "ckpt.index").write_bytes(b"not an index" * 20)
    (tmp_path / "bad_index" / "ckpt.data-00000-of-00001").write_bytes(bytes(4096))
    # A fine-tuned checkpoint of a wider model: TensorFlow's restore fails part-way, and used to print one
    # "Value in checkpoint could not be found" line per variable at the interpreter's exit, under the traceback.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    wider = subprocess.run([sys.executable, "-c", _WIDER_CHECKPOINT, str(tmp_path / "wider")], cwd=REPO,
                           capture_output=True, text=True, timeout=300,
                           env=dict(env, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), REPO])))
    assert wider.returncode == 0, wider.stderr[-3000:]
    wide_checkpoint = tmp_path / "wider" / "model-1"
    commands = {
        "other_shape": ["run_classifier.py", "--task_name=sst-2", "--do_train=false", "--do_eval",
                        f"--data_dir={FIXTURES}/glue/SST-2", f"--model_dir={tmp_path}/o",
                        f"--predict_ckpt={wide_checkpoint}", *common],
        "checkpoint": ["run_classifier.py", "--task_name=sst-2", "--do_train", "--train_steps=2",
                       f"--data_dir={FIXTURES}/glue/SST-2", f"--model_dir={tmp_path}/c",
                       f"--init_checkpoint={damaged}", *common],
        "squad": ["run_squad.py", "--config_file=configs/squad_tiny.yaml", "--do_train=false", "--do_eval",
                  "--export_dir=", f"--model_dir={tmp_path}/s", f"--init_checkpoint={damaged}"],
    }
    started = {name: subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for name, argv in commands.items()}
    expected = {"other_shape": f"{wide_checkpoint}: not a checkpoint of this model (Received incompatible tensor",
                "checkpoint": f"{damaged}: unreadable checkpoint (truncated, corrupt, or not a "
                              "TensorFlow checkpoint)",
                "squad": f"--model_dir={tmp_path}/s holds no fine-tuned checkpoint to evaluate, predict or export "
                         "with: train first (--do_train) or name one with --predict_ckpt"}
    for name, process in started.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 1, (name, stderr[-3000:])
        assert "Traceback" not in stderr, (name, stderr[-3000:])
        errors = [line for line in stderr.splitlines() if ": error: " in line]
        assert len(errors) == 1 and expected[name] in errors[0], (name, stderr[-3000:])
        assert "could not be found" not in stderr, (name, stderr[-3000:])
    assert not os.path.exists(tmp_path / "c" / "features")  # refused before the encoding


def test_a_corrupt_saved_model_pb_is_named(tmp_path):
    from xlnet_tf.batch.prediction import SavedModelPredictor
    from xlnet_tf.finetuning.serving import custom_ops

    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff" + b"not a protobuf" * 10)
    with pytest.raises(InputError, match=rf"{tmp_path}/1/saved_model.pb: not a SavedModel \(truncated or corrupt"):
        custom_ops(str(tmp_path / "1"))
    with pytest.raises(InputError, match=rf"--saved_model={tmp_path}/1: cannot load it"):
        SavedModelPredictor(str(tmp_path))


# -- non-finite numbers (issue 36): every config reader refuses NaN and infinity, naming the key ----------------------

@pytest.mark.parametrize("key, value", [("layer_norm_eps", "NaN"), ("initializer_range", "Infinity"),
                                        ("summary_last_dropout", "-Infinity")])
def test_an_hf_config_with_a_non_finite_number_is_refused_naming_it(tmp_path, key, value):
    from xlnet_tf import hf

    (tmp_path / "config.json").write_text('{"model_type": "xlnet", "d_model": 16, "n_layer": 1, "n_head": 2, '
                                          f'"d_inner": 32, "vocab_size": 100, "{key}": {value}}}')
    with pytest.raises(InputError, match=rf"config.json: {key} is not a finite number"):
        hf.HFCheckpoint(str(tmp_path)).xlnet_config()
    with pytest.raises(InputError, match=rf"config.json: {key} is not a finite number"):
        XLNetConfig.from_json(tmp_path / "config.json")
    with pytest.raises(InputError, match=rf"{key} is not a finite number"):
        XLNetConfig.from_hf(json.loads((tmp_path / "config.json").read_text()), "c.json")


def test_an_xlnet_config_and_settings_refuse_non_finite_numbers(tmp_path):
    path = tmp_path / "xlnet_config.json"
    path.write_text(json.dumps(dict(MICRO_CONFIG)).rstrip("}") + ', "dropout": NaN}')
    with pytest.raises(InputError, match="dropout is not a finite number"):
        XLNetConfig.from_json(path)
    with pytest.raises(InputError, match="initializer_range must be a finite number"):
        XLNetConfig(**MICRO_CONFIG, initializer_range=float("nan"))
    from xlnet_tf.cli.launch import LaunchSettings
    from xlnet_tf.cli.serving_client import ServingClientSettings
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    errors = " | ".join(ClassifierSettings(learning_rate=float("nan"), dropout=float("inf")).errors() +
                        ServingClientSettings(timeout=float("nan")).errors() +
                        LaunchSettings(stop_after=float("inf"), command=("true",)).errors())
    for flag in ("--learning_rate=nan", "--dropout=inf", "--timeout=nan", "--stop_after=inf"):
        assert f"{flag}: not a finite number" in errors, errors


def test_numbers_out_of_their_range_are_refused_naming_the_flag_before_tensorflow_loads():
    """A negative learning rate trained (gradient ascent), dropout 1.5 or min_lr_ratio 2 ran, warmup, seed and
    iterations below their floor failed later or not at all: every setting's range is checked with the others."""
    from xlnet_tf.tasks.task_settings import ClassifierSettings
    from xlnet_tf.training.settings import PretrainSettings, field_metadata

    errors = ClassifierSettings(learning_rate=-1.0, dropout=1.5, dropatt=-0.1, min_lr_ratio=2.0, warmup_steps=-1,
                                seed=-1, iterations=0, adam_epsilon=0.0, lr_layer_decay_rate=0.0, max_save=-1,
                                weight_decay=-0.01, clamp_len=-2, save_steps=0, shuffle_buffer=0).errors()
    for message in ("--learning_rate=-1.0 must be positive", "--dropout=1.5 must be in [0, 1)",
                    "--dropatt=-0.1 must be in [0, 1)", "--min_lr_ratio=2.0 must be in [0, 1]",
                    "--warmup_steps=-1 must be >= 0", "--seed=-1 must be >= 0", "--iterations=0 must be >= 1",
                    "--adam_epsilon=0.0 must be positive", "--lr_layer_decay_rate=0.0 must be positive",
                    "--max_save=-1 must be >= 0", "--weight_decay=-0.01 must be >= 0", "--clamp_len=-2 must be >= -1",
                    "--save_steps=0 must be positive", "--shuffle_buffer=0 must be >= 1"):
        assert message in errors, (message, errors)
    assert len([e for e in errors if " must be " in e]) == 14, errors  # each once
    errors = PretrainSettings(mask_alpha=0, num_predict=0, perm_size=0, mem_len=-1, grad_accum_steps=0).errors()
    for message in ("--mask_alpha=0 must be >= 1", "--num_predict=0 must be >= 1", "--perm_size=0 must be >= 1",
                    "--mem_len=-1 must be >= 0", "--grad_accum_steps=0 must be >= 1"):
        assert message in errors, (message, errors)
    # Each tool's defaults are in range (None: not set, not checked), and bounds are inherited with the help.
    for settings_cls in (PretrainSettings, ClassifierSettings, PredictSettings):
        assert not [e for e in settings_cls().errors() if "must be" in e and "below" not in e]
    assert str(field_metadata(PretrainSettings, "learning_rate")["bounds"]) == "positive"


def test_a_value_outside_a_settings_choices_is_refused_in_python_as_on_the_command_line():
    """absl's enum flags refuse another value, but settings built in Python or from a job file are not flags:
    run_tagger's --tag_scheme=bogus trained as plain tags. Every field's choices are checked with the others."""
    from xlnet_tf.tasks.squad import SquadSettings
    from xlnet_tf.tasks.tagging import TaggingSettings
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    assert "--tag_scheme='bogus' must be one of auto, bio, plain" in TaggingSettings(tag_scheme="bogus").errors()
    errors = ClassifierSettings(eval_split="val", summary_type="max", strategy="tpus", dtype="fp16").errors()
    for message in ("--eval_split='val' must be one of train, dev, test", "--summary_type='max' must be one of",
                    "--strategy='tpus' must be one of", "--dtype='fp16' must be one of"):
        assert any(e.startswith(message) for e in errors), (message, errors)
    assert len([e for e in errors if "must be one of" in e]) == 4, errors  # each once
    errors = SquadSettings(doc_stride=0, n_best_size=0, num_proc=0).errors()
    for message in ("--doc_stride=0 must be positive", "--n_best_size=0 must be positive",
                    "--num_proc=0 must be positive"):
        assert message in errors, (message, errors)


def test_a_config_file_with_nan_is_refused_naming_the_flag(tmp_path):
    """YAML's .nan reaches a float flag: the settings refuse it (one line through the tool, as every setting)."""
    from absl import flags

    from xlnet_tf.cli.flags import apply_config_file, define_flags, settings_from_flags
    from xlnet_tf.cli.serving_client import ServingClientSettings

    values = flags.FlagValues()
    define_flags(ServingClientSettings, values)
    values(["prog"])
    (tmp_path / "c.yaml").write_text("timeout: .nan\nserver: 'h:1'\nmodel_name: m\n")
    apply_config_file(values, str(tmp_path / "c.yaml"))
    with pytest.raises(InputError, match=r"--timeout=nan: not a finite number"):
        settings_from_flags(ServingClientSettings, values, ["x"]).validate()
