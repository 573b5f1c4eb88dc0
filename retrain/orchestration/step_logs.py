"""The Airflow log level of each line a step prints, for the launchers that relay a child's
output into the task log (a local child process or a pod). Stdlib only.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

# A child's log line as retrain.common.step formats it ("WARNING name: message"), after
# the prefixes of any relays on the way ("[chief] "), or TensorFlow's C++ line ("E0000 ...").
_LEVEL = re.compile(r"^(?:\[[^\]]+\] )*(?:(DEBUG|INFO|WARNING|ERROR|CRITICAL) |([IWEF])\d{4} )")
_RELAYS = re.compile(r"^(?:\[[^\]]+\] )*")
_CPP_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
# TensorFlow probes CUDA at start and logs its failure as an error; on a machine with no
# GPU device that is expected, not a problem of the step.
_NO_GPU_NOISE = ("failed call to cuInit", "Could not find cuda drivers")
# C++ lines TensorFlow logs at error level about a choice it made and carries on with: the
# fine-tuning steps' int64 ops on a CPU without AVX-512 use Eigen instead of oneDNN.
_NOT_ERRORS = ("oneDNN supports DT_INT64 only on platforms with AVX-512",)


def has_gpu_device() -> bool:
    """Whether this machine exposes an NVIDIA device (what TensorFlow's CUDA probe needs)."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


class LineLevels:
    """The Airflow log level of each line a child prints: its own level where the line
    names one (so a step's WARNING is a WARNING in the task log and the UI's level filter
    works); a record's continuation (an indented or blank line) and a whole traceback keep
    their record's level; any other line is INFO (a plain `print` after an error line is
    not an error)."""

    def __init__(self, gpu: bool | None = None):
        self.level = logging.INFO
        self.gpu = has_gpu_device() if gpu is None else gpu
        self.traceback = False

    def __call__(self, line: str) -> int:
        m = _LEVEL.match(line)
        if m:
            self.traceback = False
            if not self.gpu and any(n in line for n in _NO_GPU_NOISE):
                self.level = logging.INFO
                return logging.DEBUG
            if any(n in line for n in _NOT_ERRORS):
                self.level = logging.INFO
                return logging.INFO
            self.level = (logging.getLevelName(m.group(1)) if m.group(1)
                          else _CPP_LEVELS[m.group(2)])
            return self.level
        body = _RELAYS.sub("", line)     # "[chief]   detail" continues like "  detail"
        if "Traceback (most recent call last)" in body:
            self.level, self.traceback = logging.ERROR, True
        elif self.traceback:
            if body.strip() and not body[:1].isspace() and not body.startswith(
                    ("During handling", "The above exception")):
                self.traceback = False     # the exception's own line ends the traceback
        elif body.strip() and not body[:1].isspace():
            self.level = logging.INFO
        return self.level
