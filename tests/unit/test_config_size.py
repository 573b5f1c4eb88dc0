"""A family config is bounded before it is parsed (issue 45, item 6): a valid 71 MB YAML
config once held the task that checked it (resolve_span, in the Airflow process) for over
400 s and 1.9 GB. Every family's config loader, the one the DAG's early check calls, refuses
a file over RETRAIN_MAX_CONFIG_BYTES at once, naming the file, its size and the limit, never
its content; a small config is read without importing the settings (pydantic)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from retrain.common import run_inputs
from retrain.common.errors import ConfigError
from retrain.orchestration.families import FAMILIES, resolve

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "planted-secret-value-4711"


def _big_valid_config(family, path: Path, size: int) -> Path:
    """The family's bundled config followed by YAML comments up to `size` bytes: still a
    valid config, so only the size can refuse it."""
    text = _bundled_text(family)
    pad = f"# {PLANTED} " + "x" * 60 + "\n"
    path.write_text(text + pad * (max(size - len(text), 0) // len(pad) + 1))
    return path


def _bundled_text(family) -> str:
    module = sys.modules[resolve(family.config_loader).__module__]
    return Path(module.DEFAULT_CONFIG).read_text()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_loader_refuses_a_config_over_the_limit_before_parsing(
        tmp_path, monkeypatch, name):
    family = FAMILIES[name]
    loader = resolve(family.config_loader)
    monkeypatch.delenv("RETRAIN_MAX_CONFIG_BYTES", raising=False)
    path = _big_valid_config(family, tmp_path / "big.yaml", 3 * 1024 * 1024)
    size = path.stat().st_size
    started = time.monotonic()
    with pytest.raises(ConfigError) as e:
        loader(str(path))
    assert time.monotonic() - started < 1.0            # refused, not parsed (about 20 s)
    msg = str(e.value)
    assert str(path) in msg and f"{size:,} bytes" in msg and "1,048,576-byte limit" in msg
    assert "RETRAIN_MAX_CONFIG_BYTES" in msg and PLANTED not in msg


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_limit_is_a_setting(tmp_path, monkeypatch, name):
    family = FAMILIES[name]
    loader = resolve(family.config_loader)
    path = _big_valid_config(family, tmp_path / "mid.yaml", 100 * 1024)
    monkeypatch.setenv("RETRAIN_MAX_CONFIG_BYTES", str(64 * 1024))
    with pytest.raises(ConfigError, match="65,536-byte limit"):
        loader(str(path))
    monkeypatch.setenv("RETRAIN_MAX_CONFIG_BYTES", str(200 * 1024))
    assert loader(str(path)) is not None                # the same file, under the limit


def test_config_text_over_the_limit_is_refused_before_parsing(monkeypatch):
    monkeypatch.setenv("RETRAIN_MAX_CONFIG_BYTES", str(64 * 1024))
    text = "a: 1\n" + f"# {PLANTED}\n" * 10_000
    with pytest.raises(ConfigError) as e:
        run_inputs.parse_config_text(text, "inline", "feature config")
    assert "inline" in str(e.value) and "65,536-byte limit" in str(e.value)
    assert PLANTED not in str(e.value)


def test_a_fifo_named_as_a_config_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    done = []
    t = threading.Thread(target=lambda: done.append(_refusal(fifo)), daemon=True)
    t.start()
    t.join(5)
    assert done and "not a regular file" in done[0]


def _refusal(path) -> str:
    try:
        run_inputs.read_config_file(path, "feature config")
    except ConfigError as e:
        return str(e)
    return "read"


def test_a_small_config_is_read_without_importing_the_settings():
    # The CTR preprocessing job reads its config and never imports pydantic (0.15 s).
    code = ("import sys; from components.ctr import feature_config as fc; fc.load(fc.DEFAULT_CONFIG);"
            "print('retrain.common.settings' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_config_check_runs_as_a_step_out_of_the_task_process(tmp_path, monkeypatch, name):
    """What resolve_span can call instead of the loader itself (the parse leaves the
    Airflow process): a good config passes, a big one is bad data naming the file."""
    from retrain.orchestration import launch
    family = FAMILIES[name]
    monkeypatch.delenv("RETRAIN_MAX_CONFIG_BYTES", raising=False)
    module = sys.modules[resolve(family.config_loader).__module__]
    ok = launch.run_step("components.config_check", {
        "loader": family.config_loader, "path": str(module.DEFAULT_CONFIG)})
    assert ok["ok"] is True
    big = _big_valid_config(family, tmp_path / "big.yaml", 2 * 1024 * 1024)
    with pytest.raises(launch.BadDataFailed) as e:
        launch.run_step("components.config_check", {"loader": family.config_loader,
                                                    "path": str(big)})
    assert str(big) in str(e.value) and "RETRAIN_MAX_CONFIG_BYTES" in str(e.value)
    assert PLANTED not in str(e.value)
