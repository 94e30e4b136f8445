"""Checkpoints of `shardcli model`: the trained state saved with orbax, and `shardcli model restore`.

Orbax writes the sharded train state; `shardcli-model.json` beside it records the model's sizes
and a digest of every array. Restoring reads straight into the shardings the annotations give on
the (possibly different) mesh, from abstract shapes only, and compares the digests.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np

from shardcli.analysis.report import Check, spec_of
from shardcli.errors import ShardcliError
from shardcli.runtime.session import Session, open_session
from shardcli.specs.model import (
    METADATA_FILE,
    STATE_DIR,
    Annotations,
    RestoreRequest,
    SavedModel,
    TrainRequest,
    validate_restore,
)
from shardcli.tile_math import normalize_index
from shardcli.training.model.folder import FileRecord, record_files, verify_files
from shardcli.training.model.mlp import (
    ModelResult,
    abstract_state,
    check_memory,
    evaluate,
    param_rows,
    prepare_batch,
    sharding_checks,
    state_leaves,
)
from shardcli.training.model.reference import host_params, loss_check, output_checks, reference

MAX_REASON = 240  # characters of orbax's reason in a one-line error
DIGEST_MULTIPLIER = 0x9E3779B97F4A7C15  # spreads positions over 64 bits (Fibonacci hashing)


def digest(array: Any) -> str:
    """A digest of an array's values that does not depend on how it is sharded.

    The sum, modulo 2**64, of every element's bit pattern times a hash of its row-major position.
    Each block is read from the device that holds it (replicas once), so no whole copy is made;
    equal arrays give equal digests on any mesh, and a changed or moved element changes it.
    """
    shape = tuple(array.shape)
    uint = np.dtype(f"uint{8 * array.dtype.itemsize}")
    strides = [int(np.prod(shape[k + 1 :], dtype=np.int64)) for k in range(len(shape))]
    total = 0
    for shard in array.addressable_shards:
        if shard.replica_id != 0:
            continue
        bounds = normalize_index(shard.index, shape)
        flat = np.zeros((), dtype=np.uint64)
        for axis, ((lo, hi), stride) in enumerate(zip(bounds, strides, strict=True)):
            index = np.arange(lo, hi, dtype=np.uint64) * np.uint64(stride)
            flat = np.expand_dims(flat, -1) + index.reshape((1,) * axis + (-1,))
        weights = flat * np.uint64(DIGEST_MULTIPLIER) + np.uint64(1)
        bits = np.ascontiguousarray(np.asarray(shard.data)).view(uint).astype(np.uint64)
        total = (total + int(np.sum(bits * weights, dtype=np.uint64))) % 2**64
    return f"{total:016x}"


def _digests(state: Any) -> dict[str, str]:
    return {path: digest(array) for path, array in state_leaves(state)}


def write_error_text(error: BaseException) -> str:
    """A failed write in a few words: `No space left on device` for tensorstore's paragraph that
    ends in `[os_error_code='28']`, the OS's words for an OSError, else the first line."""
    import re

    code = getattr(error, "errno", None)
    found = re.search(r"os_error_code='(\d+)'", str(error))
    if found:
        code = int(found.group(1))
    if isinstance(code, int) and code > 0:
        return os.strerror(code)
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def save_checkpoint(
    target: str, state: Any, request: TrainRequest, session: Session, ann: Annotations, final: float
) -> dict[str, str]:
    import logging

    import orbax.checkpoint as ocp

    _quiet_late_reads()  # a failed save's writes still in flight report "Event loop is closed" too
    absl = logging.getLogger("absl")
    # orbax's notes about OCDBT (not used here), and the traceback each of its writer threads logs
    # when a write fails (a full disk: over a hundred lines); the failure itself is raised here.
    level = absl.level
    absl.setLevel(logging.CRITICAL)  # setLevel, not .level: it clears the logger's cache
    state_path = os.path.join(target, STATE_DIR)
    # one folder per array (not OCDBT's shared data files), so a damaged file names its array
    checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler(use_ocdbt=False))
    try:
        checkpointer.save(state_path, state)
    except (OSError, ValueError) as error:
        raise ShardcliError(
            f"--checkpoint {request.checkpoint}: saving failed after training ({write_error_text(error)}); "
            "nothing was kept"
        ) from None
    finally:
        checkpointer.close()
        absl.setLevel(max(level, logging.ERROR))
    saved = SavedModel(
        depth=request.depth,
        batch=request.batch,
        seed=request.seed,
        steps=request.steps,
        learning_rate=request.learning_rate,
        mesh=session.spec,
        rules=ann.rules,
        digests=_digests(state),
        final_loss=final,
        files={name: (r.size, r.sha256) for name, r in record_files(state_path).items()},
    )
    meta_path = os.path.join(target, METADATA_FILE)
    try:
        with open(meta_path + ".tmp", "w", encoding="utf-8") as f:  # whole, or not there at all
            json.dump(saved.to_json(), f, indent=2)
            f.write("\n")
        os.replace(meta_path + ".tmp", meta_path)
    except OSError as error:
        raise ShardcliError(
            f"--checkpoint {request.checkpoint}: saving failed after training ({write_error_text(error)}); "
            "nothing was kept"
        ) from None
    return {"folder": target, "state": state_path, "metadata": meta_path}


def run_restore(request: RestoreRequest) -> ModelResult:
    """Restore a checkpoint straight into the annotated shardings on this mesh and verify it.

    Raises:
        ShardcliError: a missing folder, one that is not a checkpoint, a --depth that differs from
            the checkpoint's, a mesh or rules the model cannot be laid out on, or a state orbax
            cannot read; nothing is written.
    """
    saved, ann = validate_restore(request)

    session = open_session(request.mesh, request.options)
    mesh, platform = session.mesh, session.runtime.platform
    check_memory(session, ann, saved.depth, saved.batch)
    graphdef, abstract, shardings = abstract_state(saved.depth, ann, saved.seed, saved.learning_rate, mesh)
    folder = os.path.abspath(request.folder)
    state_path = os.path.join(folder, STATE_DIR)
    state = _read_state(request.folder, state_path, saved, abstract, shardings)

    rows = param_rows(state, ann, mesh)
    checks = sharding_checks(state, rows, ann, mesh)
    digests = _digests(state)
    checks.append(_digest_check(saved.digests, digests))
    with jax.set_mesh(mesh):
        x_host, y_host, x, y = prepare_batch(mesh, saved.depth, saved.batch, saved.seed, ann)
        out, final, forward_ops = evaluate(graphdef, state, x, y)
    ref = reference(host_params(state), x_host, platform)
    checks.extend(output_checks(out, mesh, ann, ref, y_host, final))
    checks.append(
        loss_check(
            "the loss at save time is the restored model's",
            saved.final_loss,
            ref,
            y_host,
            label="NumPy on the restored values",
        )
    )
    return ModelResult(
        session=session,
        action="restore",
        depth=saved.depth,
        batch=saved.batch,
        annotations=ann,
        params=rows,
        state_arrays=len(digests),
        compile_s={},
        compile_cached={},
        steps=(),
        final_loss=final,
        output_spec=spec_of(out),
        collectives={"forward": forward_ops},
        checkpoint={"folder": folder, "state": state_path, "metadata": os.path.join(folder, METADATA_FILE)},
        saved_mesh=saved.mesh.describe(),
        checks=tuple(checks),
    )


def _read_state(folder: str, state_path: str, saved: SavedModel, abstract: Any, shardings: Any) -> Any:
    """The saved state, read into `shardings` from the abstract state's shapes, after every file
    of it is checked against the record in the metadata (where there is one).

    Raises:
        ShardcliError: a file missing or changed, or a state orbax cannot read into this model.
    """
    target = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    if saved.files is not None:  # metadata from before the record: orbax alone reads it
        records = {name: FileRecord(size, sha) for name, (size, sha) in saved.files.items()}
        verify_files(folder, state_path, records)
    return _orbax_restore(state_path, target, folder)


def _digest_check(saved: dict[str, str], digests: dict[str, str]) -> Check:
    """The restored arrays' digests against those saved with them."""
    differ = [p for p, d in digests.items() if saved.get(p) != d]
    missing = sorted(set(saved) - set(digests))
    return Check(
        "the restored values equal the saved ones",
        not differ and not missing,
        f"digests of {len(digests)} arrays"
        + (f"; differ: {', '.join(differ)}" if differ else "")
        + (f"; not restored: {', '.join(missing)}" if missing else ""),
    )


def _orbax_restore(state_path: str, target: Any, folder: str) -> Any:
    """Read the state into `target`'s shardings, after checking it holds the arrays the model needs.

    Raises:
        ShardcliError: a state with other arrays or shapes than the model's, or one orbax cannot read.
    """
    import logging

    import orbax.checkpoint as ocp

    _quiet_late_reads()
    # orbax logs a warning through absl when it cannot read the metadata; the error says it once
    logging.getLogger("absl").setLevel(logging.ERROR)
    checkpointer = ocp.StandardCheckpointer()
    try:
        _check_saved_arrays(checkpointer.metadata(state_path), target, folder)
        return checkpointer.restore(state_path, target)
    except (ValueError, KeyError, TypeError, FileNotFoundError, OSError) as error:
        text = str(error).strip()
        first = text.splitlines()[0].split(" [tensorstore_spec")[0] if text else type(error).__name__
        if len(first) > MAX_REASON:
            first = first[: MAX_REASON - 3] + "..."
        raise ShardcliError(
            f"{folder}: the saved state does not restore into this model ({first})"
        ) from error
    finally:
        checkpointer.close()


def _check_saved_arrays(metadata: Any, target: Any, folder: str) -> None:
    """Raises: ShardcliError when the saved arrays' names or shapes differ from the model's."""
    tree = getattr(metadata, "item_metadata", metadata)
    saved = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        saved[".".join(k for k in keys if k != "value")] = tuple(getattr(leaf, "shape", ()) or ())
    if not saved:
        raise ShardcliError(f"{folder}: orbax finds no arrays in the saved state; the checkpoint is damaged")
    wanted = {path: tuple(a.shape) for path, a in state_leaves(target)}
    missing = sorted(set(wanted) - set(saved))
    extra = sorted(set(saved) - set(wanted))
    if missing or extra:
        raise ShardcliError(
            f"{folder}: the saved state does not hold this model's arrays (missing: "
            f"{', '.join(missing) or 'none'}; not the model's: {', '.join(extra) or 'none'})"
        )
    for name, shape in wanted.items():
        if saved[name] != shape:
            raise ShardcliError(
                f"{folder}: the saved state holds {name} with shape {saved[name]}, but the model needs "
                f"{shape}; the state does not match its shardcli-model.json"
            )


def _quiet_late_reads() -> None:
    """When a restore fails, tensorstore still finishes the reads it had started and hands each
    result to orbax's event loop, which is closed by then; each hand-off reports "Event loop is
    closed" with a traceback, as an unraisable exception or from its thread. They add nothing to
    the error already reported, so those (and only those) are dropped."""
    import sys
    import threading

    def closed_loop(value: BaseException | None) -> bool:
        return isinstance(value, RuntimeError) and str(value) == "Event loop is closed"

    previous_unraisable, previous_thread = sys.unraisablehook, threading.excepthook

    def unraisable(info: Any) -> None:
        if not closed_loop(info.exc_value):
            previous_unraisable(info)

    def thread(args: Any) -> None:
        if not closed_loop(args.exc_value):
            previous_thread(args)

    sys.unraisablehook, threading.excepthook = unraisable, thread
