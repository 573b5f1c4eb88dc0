"""The shape every step shares: a stdlib dataclass spec, a `run(spec) -> dict` function
and a `python -m components.<step>` entry point that takes the spec as JSON.

The same entry point runs a step in a local subprocess (the default for Airflow tasks,
so TensorFlow and Beam never load into the scheduler or the DAG processor), in a
container, or in a KubernetesPodOperator: only the launcher changes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, TypeVar

from retrain.common.errors import full_disk_error, kind_of
from retrain.common.paths import output_dir_of

S = TypeVar("S")
log = logging.getLogger("retrain.step")


class SpecTypeError(TypeError, ValueError):
    """A spec field whose value is not of its declared type: named, the value never shown."""


def spec_from_dict(cls: type[S], data: dict[str, Any]) -> S:
    """The spec from its JSON form: unknown fields refused, each value checked against its
    field's annotation, so a wrong type fails here naming the field, not deep in the step."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(names)}")
    check_types(cls, data)
    return cls(**data)


def check_types(cls: type, data: dict[str, Any]) -> None:
    """pydantic's strict JSON rules (an int is no string and a string no int; a list may
    fill a tuple, an int a float) on `data` as JSON; values are left as they are."""
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(cls).validate_json(json.dumps(data, default=str), strict=True)
    except ValidationError as e:
        problems = [f"{'.'.join(str(p) for p in err['loc']) or '(spec)'}: {err['msg']}"
                    for err in e.errors(include_url=False, include_input=False)]
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise SpecTypeError(f"{cls.__name__}: " + "; ".join(problems[:5]) + more) from None


def spec_to_dict(spec) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def drop_known_lines(logger: str, *fragments: str) -> None:
    """Keep `logger` from emitting a record that contains one of `fragments`: a
    dependency's warning about its own internals that no user can act on (each caller
    names the line and why it is benign), so a task log's WARNING lines stay meaningful."""
    logging.getLogger(logger).addFilter(
        lambda record: not any(f in record.getMessage() for f in fragments))


def main(spec_cls: type[S], run: Callable[[S], dict], argv: list[str] | None = None,
         description: str | None = None) -> int:
    """Parse `--spec JSON|@file`, run the step, write its result JSON.

    On failure the result file holds {"error": "...", "error_kind": "bad_data"|"transient"}
    so a launcher can surface the step's own message (for example the failed expectations)
    instead of a bare exit code, and decide on retries by kind, never by the message.
    """
    parser = argparse.ArgumentParser(description=description or (run.__doc__ or "").strip())
    parser.add_argument("--spec", required=True,
                        help=f"{spec_cls.__name__} as JSON, or @path to a JSON file")
    parser.add_argument("--result-file", help="write the result JSON here (default: stdout)")
    args = parser.parse_args(argv)
    if args.result_file and not _replaceable_result(Path(args.result_file)):
        parser.error(f"--result-file {args.result_file} exists and is not a step's result: "
                     "refusing to overwrite it (give a new path)")
    _end_with_the_task()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    text = Path(args.spec[1:]).read_text() if args.spec.startswith("@") else args.spec
    spec = None
    try:
        spec = spec_from_dict(spec_cls, json.loads(text))
        result = run(spec)
    except Exception as e:  # noqa: BLE001 - reported, then re-raised as exit code 1
        traceback.print_exc()
        error = f"{type(e).__name__}: {e}"
        full = full_disk_error(e, output_dir_of(dataclasses.asdict(spec))
                               if dataclasses.is_dataclass(spec) else None)
        if full is not None:
            error = full
            log.error("%s", error)
        try:
            _emit({"error": error, "error_kind": kind_of(e)}, args.result_file)
        except OSError:   # the result file is on the full disk too: the log says it
            log.error("cannot write the result file %s: %s", args.result_file, error)
        return 1
    _emit(result, args.result_file)
    return 0


def _end_with_the_task() -> None:
    """Launched by a task (`retrain.orchestration.launch`), this step leads its own process
    group: if the task dies (the kernel's parent-death SIGTERM, or the parent pid changing,
    checked every second) the whole group goes, Beam workers and other children included,
    so nothing keeps writing into a dead run's folder."""
    parent = os.environ.pop("RETRAIN_STEP_PARENT_PID", None)   # not for grandchildren
    if not parent or os.getppid() != int(parent) or os.getpgrp() != os.getpid():
        return         # run by hand, by another launcher, or not leading its own group

    def end_group(*_args) -> None:
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, end_group)

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(1.0)
        end_group()

    threading.Thread(target=watch, name="retrain-parent-watch", daemon=True).start()


def _replaceable_result(path: Path) -> bool:
    """A result file may be new, or an earlier result (a JSON object) a retry replaces;
    never a link or another file (`--result-file /etc/passwd` run by hand)."""
    if not os.path.lexists(path):
        return True
    if path.is_symlink() or not path.is_file():
        return False
    try:
        return isinstance(json.loads(path.read_bytes()), dict)
    except (OSError, ValueError):
        return False


def _emit(obj: dict, path: str | None) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    if path:
        Path(path).write_text(text + "\n")
    else:
        print(text)
