"""retrain.common.tf_keras_env: Keras 2 is chosen before TensorFlow's import, so a
tf.Transform process never loads Keras 3 (0.7 s of its start-up), and a user's explicit
setting or an already imported TensorFlow is left alone."""
from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("import os, sys\n"
         "{before}\n"
         "from retrain.common.tf_keras_env import use_keras2\n"
         "use_keras2()\n"
         "import tensorflow_transform\n"
         "print('keras.src' in sys.modules, os.environ.get('TF_USE_LEGACY_KERAS'))\n")


def _probe(before: str = "", **env) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    out = subprocess.run([sys.executable, "-c", PROBE.format(before=before)],
                         env={**environ, **env}, capture_output=True, text=True, check=True)
    return out.stdout.split("\n")[-2]


def test_keras_3_is_not_loaded_when_chosen_first():
    assert _probe() == "False 1"


def test_an_explicit_setting_wins():
    assert _probe(TF_USE_LEGACY_KERAS="0") == "True 0"


def test_too_late_once_tensorflow_is_imported():
    # TensorFlow already loaded Keras 3; tf.Transform sets the variable itself afterwards.
    assert _probe(before="import tensorflow") == "True 1"


def test_every_trainer_process_chooses_keras_2_first():
    # ps, worker and chief all start as `python -m components.ctr.ps_train`; a spec it
    # refuses ends the process before TensorFlow, after the choice.
    code = ("import os, runpy, sys\n"
            "sys.argv = ['ps_train', '--spec', '{\"no_such_field\": 1}']\n"
            "try:\n"
            "    runpy.run_module('components.ctr.ps_train', run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(os.environ.get('TF_USE_LEGACY_KERAS'), 'tensorflow' in sys.modules)\n")
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split("\n")[-2] == "1 False"
