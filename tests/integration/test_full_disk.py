"""A full disk fails every step within bounded time, naming the path, and leaves nothing.

The run's folder is a real tmpfs of 1 MB, filled to its last few KB: enough for the
launcher's spec and result files, not for any step's output. Each step runs through the
real launcher (`run_step`, a subprocess, as an Airflow task runs it) on real inputs; each
must fail typed (StepFailed: a retry may find space freed), in bounded time, with a message
that names the full device's path, and leave no visible output. Needs root for `mount`
(CI runs as root); elsewhere the test is skipped and says why.
"""
from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from retrain.orchestration.launch import BadDataFailed, StepFailed, run_step

LEFT_FREE = 24 << 10


@pytest.fixture
def full_disk(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                      capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root: the full-disk cases did not run")
    try:
        filler = mnt / ".filler"
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        os.truncate(filler, filler.stat().st_size - LEFT_FREE)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _visible(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("stage", ["validate", "preprocess", "train"])
def test_a_full_disk_fails_each_step_in_bounded_time_naming_the_path(
        full_disk, home, preprocessed, stage):
    raw = home / "raw" / "ctr"
    out = full_disk / stage
    module, spec = {
        "validate": ("components.ctr.validate",
                     {"span_dir": str(raw / "dt=2026-11-03"), "out_dir": str(out),
                      "compute_previous": False}),
        "preprocess": ("components.ctr.preprocess",
                       {"raw_root": str(raw), "span": "2026-11-03", "window_days": 2,
                        "eval_percent": 25, "output_dir": str(out)}),
        "train": ("components.ctr.ps_train",
                  {"preprocess_dir": preprocessed["output_dir"], "out_dir": str(out)}),
    }[stage]
    t0 = time.monotonic()
    with pytest.raises(StepFailed) as e:
        run_step(module, spec)
    seconds = time.monotonic() - t0
    assert not isinstance(e.value, BadDataFailed)    # space can be freed: a retry may pass
    assert str(full_disk) in str(e.value), str(e.value)[-600:]
    assert "no space left" in str(e.value).lower() or "bytes free" in str(e.value)
    assert seconds < 180
    # No partial output, no scratch left. The trainer keeps its checkpoint folder beside
    # the output on purpose (a retry resumes from it), but only complete checkpoints.
    kept = {"train": ["train_checkpoints"]}.get(stage, [])
    assert _visible(full_disk) in ([], kept)
    assert not list(full_disk.rglob("*_temp")), "a half-written checkpoint was left"


def test_publishing_onto_a_full_disk_refuses_and_keeps_the_registry_consistent(
        full_disk, trained):
    from retrain.common.registry import Registry
    reg = Registry(full_disk / "registry")
    with pytest.raises(OSError) as e:
        reg.publish(trained["model_dir"], "ctr", {"blessed": True})
    assert str(full_disk) in str(e.value)
    assert reg.current_version("ctr") is None
