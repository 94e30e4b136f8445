"""`shardcli model`: the model's shape, its sharding annotations and logical-axis rules, checked before JAX.

The model is the two-layer MLP of Flax's sharding guide: `relu(x @ W1 + b1) @ W2`, with `depth`
inputs, hidden units and outputs. Every array of it has a *role* per dimension:

- `batch`: the rows of the inputs, activations and outputs;
- `hidden`: W1's columns, b1, W2's rows, and the activations' columns;
- `embed`: W1's rows and W2's columns (the model's input and output width).

Without `--rules` the annotations name mesh axes directly, as the guide does: W1 `(None, model)`,
W2 `(model, None)`, activations `(data, model)`, where `data` and `model` are the mesh's first and
second axis. With `--rules batch=data,hidden=model,embed=None` the annotations carry the logical
names (W1 `('embed', 'hidden')`) and the rules map each one to a mesh axis (or to none: replicated).

Everything here is pure Python; the Flax code lives in `shardcli/training/` (`model`, `model.train`,
`model.reference`, `model.checkpoint`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError, WrongResultError
from shardcli.specs.files import read_json
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions

LOGICAL_AXES = ("batch", "hidden", "embed")
REPLICATED = "None"
# (name, roles of its dims): the parameters as Flax names them.
PARAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dot1.kernel", ("embed", "hidden")),
    ("dot1.bias", ("hidden",)),
    ("w2", ("hidden", "embed")),
)
ACTIVATION = ("batch", "hidden")  # the sharding constraint between the two layers
OUTPUT = ("batch", "embed")  # what the compiler should give the output
INPUT = ("batch", None)  # inputs and targets: rows split over the batch axis, columns whole
DEFAULT_AXES = ("data", "model")
METADATA_FILE = "shardcli-model.json"
STATE_DIR = "state"
# Present while a run writes the folder; left behind by one that was killed (SIGKILL, a power cut)
# or could not clean up: the checkpoint is then incomplete.
LOCK_FILE = ".shardcli-writing"


def incomplete_text(folder: str) -> str:
    """Why a folder holding the lock file is no checkpoint to restore or to write into."""
    return (
        f"{folder}: the checkpoint is incomplete: a run was writing it and did not finish "
        f"({LOCK_FILE} is still there); delete the folder and train again"
    )


def _writer_alive(folder: str) -> bool:
    """Whether the process named in the folder's lock file is still running (another writer)."""
    try:
        with open(os.path.join(folder, LOCK_FILE), encoding="ascii") as f:
            pid = int(f.read().strip() or "0")
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, but another user's
    return True


METADATA_FORMAT = "shardcli-model/1"
FLOAT_BYTES = 4  # the model is float32


@dataclass(frozen=True)
class Annotations:
    """How the model's arrays are annotated, and the mesh axis each role resolves to.

    `rules` is None when the annotations name mesh axes directly (then `data` and `model` are the
    mesh's first two axes); otherwise it maps every logical name to a mesh axis or None.
    """

    mesh: MeshSpec
    rules: tuple[tuple[str, str | None], ...] | None = None

    def mesh_axis(self, role: str | None) -> str | None:
        """The mesh axis a role's dimension is split over, or None (replicated)."""
        if role is None:
            return None
        if self.rules is not None:
            return dict(self.rules)[role]
        return {"batch": self.mesh.axes[0], "hidden": self.mesh.axes[1], "embed": None}[role]

    def annotation(self, roles: tuple[str | None, ...]) -> tuple[str | None, ...]:
        """What the array is annotated with: logical names under rules, mesh axes otherwise."""
        if self.rules is not None:
            return roles
        return self.resolved(roles)

    def resolved(self, roles: tuple[str | None, ...]) -> tuple[str | None, ...]:
        """The PartitionSpec entries the annotation resolves to."""
        return tuple(self.mesh_axis(r) for r in roles)

    def split(self, role: str) -> int:
        """How many ways a dimension of this role is split."""
        axis = self.mesh_axis(role)
        return 1 if axis is None else self.mesh.axis_sizes[axis]


def spec_text(entries: tuple[str | None, ...]) -> str:
    """`(None, 'model')` written the way PartitionSpec prints."""
    return (
        "("
        + ", ".join("None" if e is None else repr(e) for e in entries)
        + ("," if len(entries) == 1 else "")
        + ")"
    )


def parse_rules(text: str, mesh: MeshSpec) -> tuple[tuple[str, str | None], ...]:
    """`batch=data,hidden=model,embed=None` -> ((batch, data), (hidden, model), (embed, None)).

    A logical name left out is replicated (None); the result lists all three in a fixed order.

    Raises:
        ShardcliError: a malformed entry, an unknown logical name or mesh axis, a name given twice.
    """
    valid_axes = ", ".join([*mesh.axes, REPLICATED])
    given: dict[str, str | None] = {}
    for entry in text.split(","):
        name, sep, axis = (part.strip() for part in entry.partition("="))
        if not sep or not name or not axis:
            raise ShardcliError(
                f"--rules entry {entry.strip()!r} is not NAME=AXIS; write e.g. "
                "--rules batch=data,hidden=model,embed=None"
            )
        if name not in LOGICAL_AXES:
            raise ShardcliError(
                f"--rules names {name!r}, which the model does not use; its logical axes are "
                f"{', '.join(LOGICAL_AXES)}"
            )
        if name in given:
            raise ShardcliError(f"--rules gives {name!r} twice; give each logical axis once")
        if axis != REPLICATED and axis not in mesh.axes:
            raise ShardcliError(
                f"--rules maps {name} to {axis!r}, which is not an axis of the mesh; choose one of "
                f"{valid_axes}"
            )
        given[name] = None if axis == REPLICATED else axis
    return tuple((name, given.get(name)) for name in LOGICAL_AXES)


def make_annotations(mesh: MeshSpec, rules: str | None) -> Annotations:
    """The annotations for this mesh, through `--rules` when given.

    Raises:
        ShardcliError: rules that do not parse, or no rules on a mesh without two axes.
    """
    if rules is not None:
        return Annotations(mesh, parse_rules(rules, mesh))
    if len(mesh.axes) != 2:
        raise ShardcliError(
            f"the model's default annotations need a 2-axis mesh (data x model), not {mesh.describe()}; "
            "give e.g. --mesh 2x4 --axes data,model, or map the logical axes with --rules"
        )
    return Annotations(mesh)


def check_layout(
    ann: Annotations, depth: int, batch: int, sizes: tuple[str, str] = ("--depth", "--batch")
) -> None:
    """Every array of the model can be laid out on the mesh as annotated.

    Raises:
        ShardcliError: a mesh axis used twice in one array, or a dimension it does not divide.
    """
    arrays = [*PARAMS, ("activations", ACTIVATION), ("outputs", OUTPUT)]
    for name, roles in arrays:
        axes = [a for a in ann.resolved(roles) if a is not None]
        if len(axes) != len(set(axes)):
            raise ShardcliError(
                f"{name} {roles} would use mesh axis {axes[0]!r} for two of its dimensions; map "
                "those logical axes to different mesh axes (or None) in --rules"
            )
    depth_name, batch_name = sizes
    for name, value, role in (
        (depth_name, depth, "hidden"),
        (depth_name, depth, "embed"),
        (batch_name, batch, "batch"),
    ):
        ways = ann.split(role)
        if value % ways:
            fix = (
                f"give a multiple of {ways}"
                if name.startswith("--")
                else f"give a mesh whose {ann.mesh_axis(role)!r} axis divides {value}"
            )
            raise ShardcliError(
                f"{name} {value} does not split over mesh axis {ann.mesh_axis(role)!r} ({ways} devices), "
                f"which the {role} dimension uses; {fix}"
            )


@dataclass(frozen=True)
class TrainRequest:
    """`shardcli model train`."""

    mesh: MeshSpec
    depth: int = 1024
    batch: int = 8
    steps: int = 5
    learning_rate: float = 5e-3
    rules: str | None = None
    checkpoint: str | None = None
    seed: int = 0
    options: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class RestoreRequest:
    """`shardcli model restore DIR`."""

    folder: str
    mesh: MeshSpec
    depth: int | None = None  # must equal the checkpoint's when given
    rules: str | None = None
    options: RunOptions = field(default_factory=RunOptions)


MAX_SEED = 2**32 - 1


def check_sizes(
    depth: int,
    batch: int,
    steps: int | None = None,
    learning_rate: float | None = None,
    seed: int | None = None,
) -> None:
    """Raises: ShardcliError for a size that cannot train."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ShardcliError(f"--seed {seed} is not valid; give a number from 0 to {MAX_SEED}")
    for flag, value in (("--depth", depth), ("--batch", batch)):
        if value < 1:
            raise ShardcliError(f"{flag} {value} is not valid; give a positive number")
    if steps is not None and steps < 2:
        raise ShardcliError(
            f"--steps {steps} is not valid; give at least 2, so that the loss can be seen to go down"
        )
    if learning_rate is not None and not (learning_rate > 0 and math.isfinite(learning_rate)):
        raise ShardcliError(f"--lr {learning_rate} is not valid; give a positive learning rate such as 5e-3")


def train_state_bytes(depth: int) -> int:
    """Bytes of the parameters (W1, b1, W2), float32; adam keeps two more copies."""
    return (2 * depth * depth + depth) * FLOAT_BYTES


def memory_need(ann: Annotations, depth: int, batch: int) -> tuple[int, int]:
    """(bytes on the busiest device, bytes on all devices) of a training run, estimated.

    Parameters, adam's two moments, the gradients and the step's temporaries: five copies of the
    parameters, each split over the model axis and replicated over the rest; plus activations,
    and (in the total) the host's float64 copies of the parameters that NumPy checks with.
    """
    params = train_state_bytes(depth)
    shard = params // max(ann.split("hidden") * ann.split("embed"), 1)
    per_device = 5 * shard + 4 * batch * depth * FLOAT_BYTES // ann.split("batch")
    reference = 4 * params  # float64 NumPy copies of the first and last parameters, to check against
    return per_device, per_device * ann.mesh.size + reference


def check_checkpoint_target(folder: str) -> str:
    """Where `--checkpoint` will write: a new or empty folder whose parent exists. Returns its absolute path.

    Raises:
        ShardcliError: a folder that already holds files (nothing is overwritten), or a parent
            that is missing or cannot be written.
    """
    from shardcli.specs.runs import check_writable_folder

    if not folder.strip():
        raise ShardcliError(
            f"--checkpoint {folder!r} names no folder (an empty path would write into the current "
            "one); give a new or empty folder, e.g. --checkpoint ck"
        )
    path = os.path.abspath(folder)
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise ShardcliError(
                f"--checkpoint {folder}: is a file (or a broken link); give a new or empty folder"
            )
        if os.path.lexists(os.path.join(path, LOCK_FILE)):
            if _writer_alive(path):
                raise ShardcliError(
                    f"--checkpoint {folder}: another run is writing a checkpoint into this folder; give "
                    "another folder"
                )
            raise ShardcliError("--checkpoint " + incomplete_text(folder))
        if os.listdir(path):
            raise ShardcliError(
                f"--checkpoint {folder}: the folder is not empty and nothing is overwritten; give a new "
                "or empty folder"
            )
        check_writable_folder(path, f"--checkpoint {folder}")
        return path
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ShardcliError(f"--checkpoint {folder}: the folder {parent} does not exist; create it first")
    check_writable_folder(parent, f"--checkpoint {folder}")
    return path


@dataclass(frozen=True)
class SavedModel:
    """What `shardcli-model.json` records next to the orbax state."""

    depth: int
    batch: int
    seed: int
    steps: int
    learning_rate: float
    mesh: MeshSpec
    rules: tuple[tuple[str, str | None], ...] | None
    digests: dict[str, str]  # array path -> digest of its values
    final_loss: float
    # file of the state (relative path) -> (size, SHA-256); None in metadata written before it
    files: dict[str, tuple[int, str]] | None = None

    def to_json(self) -> dict:
        files = None if self.files is None else {k: [n, d] for k, (n, d) in self.files.items()}
        return {
            "format": METADATA_FORMAT,
            "depth": self.depth,
            "batch": self.batch,
            "seed": self.seed,
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "mesh": {"shape": list(self.mesh.shape), "axes": list(self.mesh.axes)},
            "rules": None if self.rules is None else {k: v for k, v in self.rules},
            "digests": self.digests,
            "final_loss": self.final_loss,
        } | ({} if files is None else {"files": files})


def _files(raw: object) -> dict[str, tuple[int, str]] | None:
    """The metadata's record of the state's files; raises ValueError on anything but that record."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("'files' is not an object")
    files = {}
    for name, entry in raw.items():
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or type(entry[0]) is not int
            or entry[0] < 0
            or not isinstance(entry[1], str)
            or ".." in name.split("/")
            or name.startswith("/")
        ):
            raise ValueError(f"'files' has {name!r} as {entry!r}; each entry should be [size, sha256]")
        files[name] = (entry[0], entry[1])
    return files


def read_checkpoint(folder: str) -> SavedModel:
    """The metadata of a checkpoint folder `shardcli model train --checkpoint` wrote.

    Raises:
        ShardcliError: a missing folder, one that is not such a checkpoint, or unreadable metadata.
    """
    path = os.path.abspath(folder)
    if not os.path.exists(path):
        raise ShardcliError(f"checkpoint folder {folder} does not exist")
    if not os.path.isdir(path):
        raise ShardcliError(
            f"checkpoint {folder} is a file, not a folder; give the folder --checkpoint wrote"
        )
    if os.path.lexists(os.path.join(path, LOCK_FILE)):
        raise WrongResultError(incomplete_text(folder))
    meta_path = os.path.join(path, METADATA_FILE)
    if not os.path.isfile(meta_path) or not os.path.isdir(os.path.join(path, STATE_DIR)):
        raise ShardcliError(
            f"{folder} is not a shardcli model checkpoint (it needs {METADATA_FILE} and {STATE_DIR}/); "
            "give the folder `shardcli model train --checkpoint DIR` wrote"
        )
    try:
        raw = read_json(meta_path)
        if not isinstance(raw, dict):
            raise ValueError(f"it holds {type(raw).__name__}, not an object")
        if raw.get("format") != METADATA_FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {METADATA_FORMAT!r}")
        rules = raw["rules"]
        saved = SavedModel(
            depth=_whole(raw["depth"], "depth"),
            batch=_whole(raw["batch"], "batch"),
            seed=_whole(raw["seed"], "seed"),
            steps=_whole(raw["steps"], "steps"),
            learning_rate=float(raw["learning_rate"]),
            mesh=MeshSpec(
                tuple(_whole(n, "mesh shape") for n in raw["mesh"]["shape"]), tuple(raw["mesh"]["axes"])
            ),
            rules=None if rules is None else tuple((k, rules[k]) for k in LOGICAL_AXES),
            digests={str(k): str(v) for k, v in raw["digests"].items()},
            final_loss=float(raw["final_loss"]),
            files=_files(raw.get("files")),
        )
        check_sizes(saved.depth, saved.batch, saved.steps, saved.learning_rate, saved.seed)
        shape, axes = saved.mesh.shape, saved.mesh.axes
        if not shape or len(shape) != len(axes) or min(shape) < 1:
            raise ValueError(f"mesh {list(shape)} with axes {list(axes)}")
        return saved
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, ShardcliError) as error:
        reason = f"no {error.args[0]!r} entry" if isinstance(error, KeyError) else str(error)
        reason = reason.removeprefix(f"{meta_path} ")  # read_json's message names the file too
        raise ShardcliError(f"{meta_path} cannot be read as shardcli model metadata ({reason})") from error


def _whole(value: object, name: str) -> int:
    """A whole number as the metadata holds it (JSON's true is no depth, 1.5 no batch).

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {value!r} is not a whole number")
    return value


def check_restore_depth(saved: SavedModel, depth: int | None) -> None:
    """Raises: ShardcliError when --depth disagrees with the checkpoint."""
    if depth is not None and depth != saved.depth:
        raise ShardcliError(
            f"the checkpoint was saved with --depth {saved.depth}, not {depth}; give --depth {saved.depth} "
            "or leave --depth out"
        )


MODEL_PACKAGES = ("flax", "optax", "orbax.checkpoint")


def require_model_extra() -> None:
    """Raises: ShardcliError naming the `model` extra when flax, optax or orbax-checkpoint is missing."""
    import importlib.util

    missing = []
    for name in MODEL_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise ShardcliError(
            f"shardcli model needs {', '.join(missing)}, from the model extra; install it with "
            "pip install 'shardcli[model]' (or pip install -e '.[model]' in a clone)"
        )


def default_axes(mesh: str) -> str | None:
    """data,model for a 2-D mesh; otherwise the usual names.

    Raises:
        ShardcliError: a mesh shape that does not parse.
    """
    from shardcli.specs.meshes import parse_mesh_shape

    return ",".join(DEFAULT_AXES) if len(parse_mesh_shape(mesh)) == 2 else None


def validate_train(request: TrainRequest) -> tuple[Annotations, str | None]:
    """Every check of `model train` that needs no devices: the annotations and the checkpoint's path.

    Raises:
        ShardcliError: bad sizes or rules, a layout the mesh cannot hold, a checkpoint folder
            that would be overwritten.
    """
    check_sizes(request.depth, request.batch, request.steps, request.learning_rate, request.seed)
    ann = make_annotations(request.mesh, request.rules)
    check_layout(ann, request.depth, request.batch)
    target = check_checkpoint_target(request.checkpoint) if request.checkpoint is not None else None
    return ann, target


def validate_restore(request: RestoreRequest) -> tuple[SavedModel, Annotations]:
    """Every check of `model restore` that needs no devices: the checkpoint's metadata and the annotations.

    Raises:
        ShardcliError: a folder that is not a checkpoint, a --depth that differs from it, rules or
            a mesh the saved model cannot be laid out on.
    """
    saved = read_checkpoint(request.folder)
    check_restore_depth(saved, request.depth)
    ann = make_annotations(request.mesh, request.rules)
    check_layout(ann, saved.depth, saved.batch, ("the checkpoint's depth", "the checkpoint's batch"))
    return saved, ann
