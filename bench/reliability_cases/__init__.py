"""The reliability campaign's parts (`bench/reliability.py` runs it; docs/reliability.md).

    harness    the fixture, run context and specs, outcomes, Case / CaseEnv, shared editors
    raw_data   broken raw days of both families
    inputs     DAG params, run inputs (resolve_span), step specs, family configs
    registry   a broken registry read by the CLI, the push task, the evaluate step
    custody    hand-offs, races, secrets, a full disk, a killed scheduler
    hostile    hostile records and gzip bombs
    round2     hostile use, round 2: special files, many parts, big configs, empty and
               one-class data, settings, published files, served pages, the admin
               password, the window policy, the training cluster's listeners, record text
    runner     one case run and judged
    kills      random SIGKILLs and the rerun after them
    main       the case list, the command line, the counts and the results file
"""
import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
