"""Step wrapper around the Beam job, so Airflow launches it like every other step.

The job itself (`beam_jobs.preprocess_ctr`) stays a standalone Beam program with the
canonical `run(argv)`; this spec only turns a typed request into its argv, adding any
runner options (e.g. `--runner=FlinkRunner --flink_master=...`) from configuration.
"""
from __future__ import annotations

import dataclasses
import sys

from retrain.common.step import main

@dataclasses.dataclass
class PreprocessSpec:
    raw_root: str                # folder holding dt=YYYY-MM-DD partitions
    span: str                    # newest day of the window, YYYY-MM-DD
    output_dir: str
    window_days: int = 3
    eval_percent: int = 20
    # The window's validation slice for early stopping (features.VALIDATION_PERCENT; 0: none).
    validation_percent: int = 10
    analysis_cache_dir: str = ""  # reuse tf.Transform analysis of unchanged day parts
    feature_config: str = ""      # YAML/JSON feature config; "" = the generated logs' config
    exclude_spans: list[str] = dataclasses.field(default_factory=list)  # days left out
    beam_args: list[str] = dataclasses.field(default_factory=lambda: ["--runner=DirectRunner"])


def to_argv(spec: PreprocessSpec) -> list[str]:
    return ["--raw-root", spec.raw_root, "--span", spec.span, "--output-dir", spec.output_dir,
            "--window-days", str(spec.window_days), "--eval-percent", str(spec.eval_percent),
            "--validation-percent", str(spec.validation_percent),
            *(["--analysis-cache-dir", spec.analysis_cache_dir] if spec.analysis_cache_dir else []),
            *(["--feature-config", spec.feature_config] if spec.feature_config else []),
            *(["--exclude-spans", ",".join(spec.exclude_spans)] if spec.exclude_spans else []),
            *spec.beam_args]


def run(spec: PreprocessSpec) -> dict:
    """Run the Beam + tf.Transform job for the span window; return its summary."""
    from beam_jobs import preprocess_ctr
    return preprocess_ctr.run(to_argv(spec))


if __name__ == "__main__":
    sys.exit(main(PreprocessSpec, run))
