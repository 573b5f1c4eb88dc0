"""The reliability campaign's parts (`bench/reliability.py` runs it; docs/reliability.md).

    harness    the fixture, run context and specs, outcomes, Case / CaseEnv, shared editors
    raw_data   broken raw days of both families
    inputs     DAG params, run inputs (resolve_span), step specs, family configs
    registry   a broken registry read by the CLI, the push task, the evaluate step
    custody    hand-offs, races, secrets, a full disk, a killed scheduler
    hostile    hostile records and gzip bombs
    special    hostile use, round 2, data side: FIFOs and symlinks in a day, too many
               parts, a config too big to read, empty and one-class data, the window policy
    ops        hostile use, round 2, operator side: bad settings, published files changed,
               a <script> in served pages, the admin password, the cluster's listeners,
               record text in a refusal
    runner     one case run and judged
    kills      random SIGKILLs and the rerun after them
    main       the case list, the command line, the counts and the results file
"""
import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
