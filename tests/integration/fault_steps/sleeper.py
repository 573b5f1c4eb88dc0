"""A step that starts a child of its own and then sleeps: what a Beam or training step
does, for the test that kills the task under it (test_task_death.py)."""
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

from retrain.common.step import main


@dataclasses.dataclass
class Spec:
    pid_file: str
    seconds: float = 120.0


def run(spec: Spec) -> dict:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(spec.pid_file).write_text(f"{__import__('os').getpid()} {child.pid}")
    time.sleep(spec.seconds)
    return {"done": True}


if __name__ == "__main__":
    sys.exit(main(Spec, run))
