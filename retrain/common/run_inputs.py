"""Refuse a run's inputs before any work, naming each problem: a span in the future, a data
folder or config file outside the allowed roots or given as a relative path, a config
file that does not parse. Stdlib only (the DAG factory's first task calls it).

Why: a span in 2030 or `raw_root: /etc` used to wait 12 hours in the sensor, `../../` was
taken relative to wherever the worker ran, and a wrong config failed only when a step read
it, after the wait. A config param pointed at /etc/shadow printed account lines with their
hashes into the task log: a parameter that names a file is confined to configured
folders, and no message about a file a parameter named ever echoes its content (rule 22).

Deployment settings (environment): RETRAIN_MAX_FUTURE_DAYS (default 1: a span may be at
most that many days after today, for clock skew and time zones),
RETRAIN_ALLOWED_DATA_ROOTS (os.pathsep-separated folders; unset: any absolute path) for
`raw_root` and config files, and RETRAIN_CONFIG_ROOTS (os.pathsep-separated folders) for
config files. A config file (`feature_config`, `text_config`) must lie, symlinks resolved,
in the config folders shipped with the code (`components/<family>/<folder>/` holding
YAML/JSON files), in RETRAIN_CONFIG_ROOTS or in RETRAIN_ALLOWED_DATA_ROOTS: with neither
set, only the bundled configs are accepted.

The second half is what the family config loaders share so that no error echoes a file:
`read_config_file` (a syntax error names the file, line and column; a file that is not
UTF-8 names the file), `key_text` (a key of the user's file, as a message may name it),
`word_text` (a name or a choice the config uses, shown only if it is a short word) and
`what` (a wrong value described by its type, never shown).

A config file is bounded before it is read or parsed: over RETRAIN_MAX_CONFIG_BYTES (default
1 MiB; real configs are a few KB) it is refused naming the file, its size and the limit.
Why: PyYAML parses about 0.14 MB/s here, so a valid 71 MB config held the task that checked
it for over 400 s and 1.9 GB. Only a regular file is read (a FIFO named as a config would
block the reader forever).
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from retrain.common.errors import ConfigError

URL_SCHEMES = ("gs://", "s3://", "hdfs://", "abfs://", "az://")
DATA_ROOTS_ENV = "RETRAIN_ALLOWED_DATA_ROOTS"   # = settings.env_name(...): tests/unit/test_settings.py
CONFIG_ROOTS_ENV = "RETRAIN_CONFIG_ROOTS"
# The step package beside this one (a checkout or site-packages): its bundled config folders.
COMPONENTS = Path(__file__).resolve().parents[2] / "components"
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
NAME_CAP = 40          # longest key or name a message shows
CONFIG_BYTES_ENV = "RETRAIN_MAX_CONFIG_BYTES"
# The lowest RETRAIN_MAX_CONFIG_BYTES may go (settings.Settings.max_config_bytes): a config
# no bigger than this is read without importing the settings (pydantic, 0.15 s), so a step
# process that reads a small config (the CTR preprocessing job) never pays for them.
MIN_CONFIG_BYTES_LIMIT = 64 * 1024


def _setting_roots(field: str) -> list[Path]:
    """The folders of a path-list setting (allowed_data_roots, config_roots)."""
    from retrain.common.settings import path_list, settings   # pydantic: 0.15 s to import
    return [Path(p).resolve() for p in path_list(getattr(settings(), field))]


def allowed_roots() -> list[Path]:
    """Folders a run's `raw_root` (and config file) may lie in; empty: anywhere."""
    return _setting_roots("allowed_data_roots")


@functools.lru_cache(maxsize=1)
def bundled_config_roots() -> tuple[Path, ...]:
    """The config folders shipped with the code: `components/<package>/<folder>/` that
    hold YAML/JSON files (the bundled feature configs, the bundled text configs)."""
    found = set()
    for package in COMPONENTS.iterdir():
        if not package.is_dir() or package.name.startswith(("_", ".")):
            continue
        for folder in package.iterdir():
            if folder.is_dir() and not folder.name.startswith(("_", ".")) and any(
                    f.suffix in CONFIG_SUFFIXES and f.is_file() for f in folder.iterdir()):
                found.add(folder.resolve())
    return tuple(sorted(found))


def allowed_config_roots(data_roots: list[Path] | None = None) -> list[Path]:
    """Folders a config file a parameter names may lie in: the bundled config folders,
    RETRAIN_CONFIG_ROOTS and the data roots (RETRAIN_ALLOWED_DATA_ROOTS)."""
    data_roots = allowed_roots() if data_roots is None else data_roots
    out: list[Path] = []
    for root in (*bundled_config_roots(), *_setting_roots("config_roots"), *data_roots):
        if root not in out:
            out.append(root)
    return out


def _inside(path: Path, roots) -> bool:
    return any(path == r or r in path.parents for r in roots)


def check(span: dt.date, *, raw_root: str | None, config: str | None, config_param: str,
          today: dt.date | None = None, max_future_days: int | None = None,
          roots: list[Path] | None = None,
          config_roots: list[Path] | None = None) -> list[str]:
    """Every problem of the run's inputs (empty: fine). `roots`: the data roots (default
    RETRAIN_ALLOWED_DATA_ROOTS); `config_roots`: the folders a config may lie in (default
    `allowed_config_roots(roots)`). Paths are resolved (symlinks followed) before the roots are
    checked, and a config outside them is refused before it is looked at."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    if max_future_days is None:
        from retrain.common.settings import settings
        max_future_days = settings().max_future_days
    roots = allowed_roots() if roots is None else roots
    cfg_roots = allowed_config_roots(roots) if config_roots is None else config_roots
    problems = []
    if span > today + dt.timedelta(days=max_future_days):
        problems.append(f"span {span} is in the future (today is {today}; at most "
                        f"{max_future_days} day(s) ahead, RETRAIN_MAX_FUTURE_DAYS)")
    for name, value, must_be_file in (("raw_root", raw_root, False),
                                      (config_param, config, True)):
        if not value:
            continue
        if not must_be_file and value.startswith(URL_SCHEMES):
            continue
        path = Path(value)
        if not path.is_absolute():
            problems.append(f"{name} {value!r} is a relative path: give an absolute one")
            continue
        resolved = path.resolve()
        via = f" (it resolves to {resolved})" if str(resolved) != os.path.normpath(value) else ""
        if must_be_file and not _inside(resolved, cfg_roots):
            problems.append(
                f"{name} {value!r}{via} is outside the allowed config folders "
                f"{[str(r) for r in cfg_roots]}: put the file in one of them, or add its "
                f"folder to {CONFIG_ROOTS_ENV} (a deployment setting)")
        elif not must_be_file and roots and not _inside(resolved, roots):
            problems.append(f"{name} {value!r}{via} is outside the allowed data roots "
                            f"{[str(r) for r in roots]} ({DATA_ROOTS_ENV})")
        elif must_be_file and not resolved.is_file():
            problems.append(f"{name} {value!r} does not exist or is not a file")
        elif not must_be_file and not resolved.is_dir():
            problems.append(f"{name} {value!r} is not a folder")
    return problems


# ------------------------------------------------------- messages that never echo a file

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")


def is_word(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= NAME_CAP and bool(_WORD.match(value))


HIDDEN_KEY = "<a key that is not a short name, not shown>"


def key_text(key: Any) -> str:
    """A key of the user's file as a message names it: bare if it is a short word (a
    schema word: letters, digits, `_ . -`, at most NAME_CAP characters), else not at all.
    Why not even cut short: a shadow line `root:$6$<hash>:19000:0:99999:7:::` ends in a
    colon, so YAML reads the whole line, hash included, as a key."""
    if is_word(key):
        return key
    if isinstance(key, (bool, int, float)) and abs(key) < 10 ** 6:
        return repr(key)
    return HIDDEN_KEY


def word_text(value: Any) -> str:
    """A name or a choice the config uses (a column, a feature, a label, a kind) as a
    message may show it: its repr if it is a short word (letters, digits, `_ . -`, at most
    NAME_CAP characters), else only what it is: `<a string that is not a short name>`."""
    if is_word(value):
        return repr(value)
    return "<a string that is not a short name>" if isinstance(value, str) and value \
        else f"<{what(value)}>"


def words_text(values) -> str:
    """Several names, each as `word_text` shows it."""
    return "[" + ", ".join(word_text(v) for v in values) + "]"


def what(value: Any) -> str:
    """What a value is, never what it says: 'a string', 'a list of 3 item(s)', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def number_text(value: Any) -> str:
    """A number as a bound's message shows it (a number of the right type out of its
    range), anything else only as what it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return what(value)


def _where(mark) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def max_config_bytes() -> int:
    """RETRAIN_MAX_CONFIG_BYTES: the largest config file read (a ConfigError names a bad value)."""
    from retrain.common.settings import settings
    return settings().max_config_bytes


def check_config_size(size: int, source: str, what_file: str) -> None:
    """Refuse a config of `size` bytes over the limit, naming it, its size and the limit."""
    if size <= MIN_CONFIG_BYTES_LIMIT:
        return
    limit = max_config_bytes()
    if size > limit:
        raise ConfigError(f"{what_file} {source or '(text)'} is {size:,} bytes: over the "
                          f"{limit:,}-byte limit for a config ({CONFIG_BYTES_ENV}); it is "
                          "not read")


def parse_config_text(text: str, source: str, what_file: str, *, as_json: bool = False) -> Any:
    """YAML (or, with as_json, JSON) text -> data. A syntax error names the file, the line
    and the column, never the text around them; `what_file` heads the message. Text over
    RETRAIN_MAX_CONFIG_BYTES is refused before parsing."""
    name = source or "(text)"
    if len(text) > MIN_CONFIG_BYTES_LIMIT // 4:     # UTF-8: at most 4 bytes a character
        check_config_size(len(text.encode("utf-8", "surrogatepass")), source, what_file)
    if as_json:
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{what_file} {name} is not valid JSON (line {e.lineno}, "
                              f"column {e.colno})") from None
        except (ValueError, RecursionError) as e:
            raise ConfigError(f"{what_file} {name} is not valid JSON "
                              f"({type(e).__name__})") from None
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        raise ConfigError(f"{what_file} {name} is not valid YAML/JSON"
                          f"{_where(e.problem_mark or e.context_mark)}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{what_file} {name} is not valid YAML/JSON "
                          f"({type(e).__name__})") from None
    except (ValueError, TypeError, RecursionError) as e:   # e.g. a date like 2026-13-45
        raise ConfigError(f"{what_file} {name} is not valid YAML/JSON: a value cannot be "
                          f"read ({type(e).__name__})") from None


def read_config_file(path: str | Path, what_file: str, *, as_json: bool | None = None) -> Any:
    """A YAML/JSON config file -> data (None for an empty file). Every error names the
    file (and for a syntax error the line and column) and nothing of what it holds.
    `as_json`: None parses `.json` files as JSON, anything else as YAML. Only a regular
    file is read, and only up to RETRAIN_MAX_CONFIG_BYTES (checked on the open file, so a
    file that grows after the check is refused too)."""
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer; it is refused below.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigError(f"{what_file} {p} cannot be read ({type(e).__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what_file} {p} is not a regular file; it is not read")
        check_config_size(info.st_size, str(p), what_file)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            # Small files never import the settings; a file that grows past what was
            # checked is read only up to the limit, then refused.
            limit = MIN_CONFIG_BYTES_LIMIT
            raw = f.read(limit + 1)
            if len(raw) > limit:
                limit = max_config_bytes()
                raw += f.read(limit + 1 - len(raw))
    except OSError as e:
        raise ConfigError(f"{what_file} {p} cannot be read ({type(e).__name__})") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise ConfigError(f"{what_file} {p} grew past the {limit:,}-byte limit for a config "
                          f"({CONFIG_BYTES_ENV}) while it was read; it is not read")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what_file} {p} is not UTF-8 text") from None
    if as_json is None:
        as_json = p.suffix == ".json"
    return parse_config_text(text, str(p), what_file, as_json=as_json)
