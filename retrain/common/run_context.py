"""What a DAG run is about, pinned once by its first task, and what a spec builder answers.

`RunContext` is built by the factory's first task (`resolve_span`) and travels to every later
task as plain JSON (XCom shows it as a dict); each task turns it back into the dataclass, so
every folder of the run (its span, run folder, quarantine, history) is derived in one place
instead of being spelled out per task, per builder and per test. The campaign and the tests
build it the same way (`RunContext.create`).

`Built` is a spec builder's typed answer: the step's spec plus what the factory must know
about it for lineage and the window (does it read the published model, which days does it
leave out), so the factory never inspects a spec's keys or values to find out. A builder
may still return a plain dict: it then reads nothing beyond its stage's inputs and can leave
no day out. Stdlib only: both the factory and the family builders import it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Any

from retrain.common import paths


# Written into the run's folder by the first task, so the folder (and the UI's Retrain tab)
# says which day the run is about, and why, before any step has run.
CONTEXT_FILE = "run_context.json"


@dataclasses.dataclass(frozen=True)
class RunContext:
    family: str
    span: str                      # YYYY-MM-DD: the day this run trains up to
    home: str                      # the artifact root
    run_id: str
    raw_root: str                  # folder (or URL) holding the family's dt= partitions
    config: str = ""               # the family's config file, resolved ("" = bundled)
    shadow: bool = False           # a shadow backfill: everything but the publish
    span_reason: str = ""          # why this day (a manual run may take the newest delivered)
    beam_args: tuple[str, ...] = ()  # runner flags of every Beam job of the run ((): direct)

    @classmethod
    def create(cls, family: str, span: dt.date | str, home: str | os.PathLike, run_id: str,
               raw_root: str | os.PathLike | None = None, config: str = "",
               shadow: bool = False, span_reason: str = "",
               beam_args: tuple[str, ...] | list[str] = ()) -> RunContext:
        span = span.isoformat() if isinstance(span, dt.date) else str(span)
        raw = str(raw_root) if raw_root else str(paths.default_raw_root(home, family))
        return cls(family=family, span=span, home=str(home), run_id=run_id, raw_root=raw,
                   config=config, shadow=bool(shadow), span_reason=span_reason,
                   beam_args=tuple(beam_args))

    @classmethod
    def from_xcom(cls, data: RunContext | dict[str, Any]) -> RunContext:
        if isinstance(data, RunContext):
            return data
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        fields["beam_args"] = tuple(fields.get("beam_args") or ())   # JSON gives a list
        return cls(**fields)

    def with_beam_args(self, spec: dict) -> dict:
        """A Beam step's spec with the run's runner flags (unchanged when there are none,
        so the step keeps its own default)."""
        return {**spec, "beam_args": list(self.beam_args)} if self.beam_args else spec

    def to_xcom(self) -> dict[str, Any]:
        """The fields and the derived folders (the UI's XCom view shows where things are)."""
        return {**dataclasses.asdict(self), "span_dir": self.span_dir, "run_dir": self.run_dir,
                "quarantine_dir": self.quarantine_dir}

    def for_day(self, day: str) -> RunContext:
        """The same run about another day of its window (an older day validated by it)."""
        return dataclasses.replace(self, span=day)

    def partition(self, day: str) -> str:
        return paths.partition(self.raw_root, day)

    @property
    def span_dir(self) -> str:
        return paths.partition(self.raw_root, self.span)

    @property
    def run_dir(self) -> str:
        return str(paths.run_dir(Path(self.home), self.family,
                                 dt.date.fromisoformat(self.span), self.run_id))

    @property
    def quarantine_dir(self) -> str:
        return f"{self.home}/quarantine/{self.family}"

    @property
    def history_root(self) -> str:
        """Where every run of the family keeps its per-day records (validations, lineage)."""
        return f"{self.home}/runs/{self.family}"


@dataclasses.dataclass(frozen=True)
class Built:
    spec: dict[str, Any]
    reads_published: bool = False          # the spec reads the serving model (a lineage input)
    left_out: tuple[str, ...] | None = None  # window days the spec skips; None: it cannot skip

    @classmethod
    def of(cls, answer: Built | dict[str, Any]) -> Built:
        return answer if isinstance(answer, Built) else cls(spec=dict(answer))
