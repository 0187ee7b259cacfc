"""run_classifier.py as users call it: original flag names/defaults, the YAML demo config, errors before work."""

import json
import os
import subprocess
import sys

from classifier_helpers import DEFAULTS, REPO

_DUMP = """
import json, sys
from absl import flags
from xlnet_tf.cli.flags import apply_config_file, define_flags
from xlnet_tf.tasks.task_settings import ClassifierSettings
define_flags(ClassifierSettings)
flags.FLAGS(["x"])
defaults = {name: flags.FLAGS[name].default for name in flags.FLAGS}
applied = apply_config_file(flags.FLAGS, "configs/finetune_sentiment_tiny.yaml")
print(json.dumps({"defaults": {k: v for k, v in defaults.items() if isinstance(v, (str, int, float, bool, type(None)))},
                  "applied": sorted(applied)}))
"""


def test_flag_defaults_and_demo_config():
    out = subprocess.run([sys.executable, "-c", _DUMP], cwd=REPO, capture_output=True, text=True, check=True)
    dumped = json.loads(out.stdout.strip().splitlines()[-1])
    defaults = dumped["defaults"]
    assert {k: defaults[k] for k in DEFAULTS} == DEFAULTS
    assert {"task_name", "init_checkpoint", "export_dir", "do_train", "do_eval", "do_predict"} <= set(dumped["applied"])


def test_bad_flags_fail_with_a_clear_message(tmp_path):
    proc = subprocess.run([sys.executable, "run_classifier.py", "--task_name=glue", "--do_train",
                           f"--model_dir={tmp_path}", "--model_config_path=configs/tiny.json",
                           "--spiece_model_file=data/spiece.model", f"--data_dir={tmp_path}/nope"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "--task_name='glue': unknown task" in proc.stderr and "nope: not a directory" in proc.stderr
    assert not os.listdir(str(tmp_path))  # nothing written
