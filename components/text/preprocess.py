"""Step wrapper around the text preprocessing Beam job (`beam_jobs.preprocess_text`).

The job stays a standalone Beam program with the canonical `run(argv)`; this spec turns a
typed request into its argv (plus runner options from configuration). The output layout
is `components.text.formats`.
"""
from __future__ import annotations

import dataclasses
import sys

from retrain.common.step import main

@dataclasses.dataclass
class TextPreprocessSpec:
    raw_root: str                # folder holding dt=YYYY-MM-DD text partitions
    span: str                    # newest day of the window, YYYY-MM-DD
    output_dir: str
    window_days: int = 3
    eval_percent: int = 20
    text_config: str = ""        # the family config file; "": the bundled reviews
    exclude_spans: list[str] = dataclasses.field(default_factory=list)  # days left out
    beam_args: list[str] = dataclasses.field(default_factory=lambda: ["--runner=DirectRunner"])


def to_argv(spec: TextPreprocessSpec) -> list[str]:
    return ["--raw-root", spec.raw_root, "--span", spec.span, "--output-dir", spec.output_dir,
            "--window-days", str(spec.window_days), "--eval-percent", str(spec.eval_percent),
            "--text-config", spec.text_config,
            *(["--exclude-spans", ",".join(spec.exclude_spans)] if spec.exclude_spans else []),
            *spec.beam_args]


def run(spec: TextPreprocessSpec) -> dict:
    """Normalize, deduplicate and split the window's texts; write TFRecord shards."""
    from beam_jobs import preprocess_text
    return preprocess_text.run(to_argv(spec))


if __name__ == "__main__":
    sys.exit(main(TextPreprocessSpec, run))
