"""Where a CTR training run starts from: its own last checkpoint, a published model, or nothing.

Why a module of its own: a retried task must resume exactly where the killed one saved
(parameters, optimizer state, step), and a new day's run may start from the published
model's learned parameters (warm start) but never from files that differ from what was
published. Both are decided once, before the first step, here; the loop
(`components.ctr.train_loop`) only saves. Reads `<checkpoint_dir>` and a SavedModel's
`variables/`; removes only the `*_temp` folders a cut-short save left.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from components.ctr.model import named_variables
from components.ctr.train_export import SERVING_DIR
from components.ctr.train_loop import Trainable
from retrain.common.step import drop_known_lines

log = logging.getLogger("retrain.ps_train")


Vocabularies = dict[str, tuple[str, int, "int | None"]]


def restore(trainable: Trainable, ckpt_dir: Path, warm_start_from: str | None,
            vocabularies: Vocabularies | None = None) -> tuple[int, str | None]:
    """Attach a checkpoint manager to `trainable`, then resume from its newest checkpoint
    or warm-start from `warm_start_from`: (resumed-from step, warm-start path or None).
    `vocabularies`: vocabulary field -> (today's vocabulary file, OOV buckets, new-id row or
    None), whose rows a warm start maps by value (components.ctr.warm_vocab)."""
    import tensorflow as tf
    # For variables on several devices (the parameter servers) TensorFlow's
    # `MultiDeviceSaver.save` defines a new tf.function on every call, so from the fifth
    # checkpoint on each save "triggered tf.function retracing": by design, nothing to do.
    drop_known_lines("tensorflow", "MultiDeviceSaver.save")
    ckpt = tf.train.Checkpoint(model=trainable.net, optimizer=trainable.optimizer,
                               step=trainable.step_var)
    manager = trainable.manager = tf.train.CheckpointManager(ckpt, str(ckpt_dir), max_to_keep=2)
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        resumed_from = int(trainable.step_var.numpy())
        log.info("resumed from %s at step %d", manager.latest_checkpoint, resumed_from)
        return resumed_from, None
    if warm_start_from:
        return 0, warm_start(trainable.net, warm_start_from, vocabularies)
    return 0, None


def warm_start(net, warm_start_from: str,
               vocabularies: Vocabularies | None = None) -> str:
    """Load only the learned parameters of a published model: today's counts, optimizer
    state and step start anew, and rows of IDs it never saw keep their initial values;
    a vocabulary field's rows follow their values, not their positions."""
    import tensorflow as tf

    from components.ctr.warm_vocab import VocabularyRemap
    path = warm_start_path(warm_start_from)
    remap = VocabularyRemap(net.params, vocabularies or {})
    view = tf.Module()              # the export's object path: root.model.params
    view.model = tf.Module()
    view.model.params = net.params
    saved = [k for k in tf.train.load_checkpoint(path).get_variable_to_shape_map()
             if k.startswith("model/params/") and k.endswith("VARIABLE_VALUE")]
    wanted = [n for n, _ in named_variables(net) if not n.startswith("count/")]
    if len(saved) != len(wanted):
        raise ValueError(f"warm_start_from={warm_start_from}: it holds {len(saved)} "
                         f"model parameters, this model has {len(wanted)}: incompatible")
    tf.train.Checkpoint(root=view).restore(path).expect_partial()
    remap.apply(Path(path).parent.parent)    # <saved model>/variables/variables
    log.info("warm start from %s", path)
    return path


def warm_start_path(path: str) -> str:
    """The variables checkpoint inside a SavedModel (or an artifact dir holding one); a
    published version whose files differ from its recorded digests is refused."""
    from retrain.common.registry import verify_model_dir

    verify_model_dir(path)   # the published model: its files as published (ModelTampered)
    p = Path(path)
    for cand in (p, p / SERVING_DIR):
        if (cand / "variables" / "variables.index").exists():
            return str(cand / "variables" / "variables")
    raise FileNotFoundError(f"warm_start_from={path}: no SavedModel variables found "
                            f"(looked for variables/variables.index in it and in {SERVING_DIR}/)")


def drop_partial_checkpoints(directory: Path) -> list[str]:
    """Remove the `*_temp` folders a save cut short leaves (a full disk, a kill between
    write and rename); complete checkpoints stay, so a retry resumes from the last one."""
    dropped = []
    if Path(directory).is_dir():
        for tmp in sorted(Path(directory).rglob("*_temp")):
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
                dropped.append(str(tmp))
    return dropped
