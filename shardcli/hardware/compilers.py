"""The compilers JAX loads as plugins (libtpu, the CUDA plugin): whether each is installed, and the
native start-up noise they write straight to file descriptor 2, kept off the user's screen.

Below both `shardcli.runtime` (which starts JAX quietly) and `shardcli.analysis.target` (which compiles
for a described topology): each imports it, neither imports the other for it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from shardcli.errors import TRACEBACK_ENV, ShardcliError
from shardcli.hardware.targets import COMPILER_MODULES


@contextlib.contextmanager
def quiet_native_logs() -> Iterator[list[str]]:
    """Keep what libtpu or the CUDA plugin write straight to file descriptor 2 (C++ logging) off the
    user's screen.

    On a host without a TPU libtpu warns that TPU_ACCELERATOR_TYPE and TPU_WORKER_HOSTNAMES are not
    set; without a GPU the CUDA plugin says it found no driver: true, and irrelevant to compiling.
    The lines are kept for the note (and printed as they came with SHARDCLI_TRACEBACK set).
    """
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    python_stderr = sys.stderr
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        # Python's own writes to stderr (a print in the user's traced function, which `guarded`
        # sends there; warnings) still reach the real stderr: only the native lines are kept.
        if _writes_to_fd_2(python_stderr):
            sys.stderr = open(  # noqa: SIM115 - closed in the finally below
                os.dup(saved),
                "w",
                buffering=1,
                encoding=python_stderr.encoding or "utf-8",
                errors="backslashreplace",
            )
        try:
            yield lines
        finally:
            if sys.stderr is not python_stderr:
                sys.stderr.close()
                sys.stderr = python_stderr
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(line for line in sink.read().decode(errors="replace").splitlines() if line.strip())
            if lines and os.environ.get(TRACEBACK_ENV):
                sys.stderr.write("\n".join(lines) + "\n")


def _writes_to_fd_2(stream: object) -> bool:
    try:
        return stream.fileno() == 2  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False  # a test runner's buffer: not descriptor 2, nothing to keep apart


def native_complaint(lines: list[str]) -> list[str]:
    """libtpu's or the CUDA plugin's start-up lines as at most one complaint for the note or error."""
    if not lines:
        return []
    if any("could not determine TPU" in line for line in lines):
        return ["libtpu found no TPU on this host (it could not determine the TPU accelerator type)"]
    if any("Could not find cuda drivers" in line for line in lines):
        return ["the CUDA plugin found no CUDA driver on this host"]
    return [f"at start-up: {lines[0].strip()}"]


def installed_compilers(platform: str) -> tuple[str, ...]:
    """The modules of the compilers for `platform` that are installed (tpu: libtpu; cuda: JAX's CUDA
    12 or CUDA 13 plugin), found without importing them."""
    return tuple(m for m in COMPILER_MODULES[platform] if importlib.util.find_spec(m) is not None)


def compiler_installed(platform: str) -> bool:
    """Whether a compiler for `platform` (tpu: libtpu, cuda: JAX's CUDA 12 or 13 plugin) is installed."""
    return bool(installed_compilers(platform))


def package_version(package: str) -> str:
    """The installed version of `package` (a distribution's name: jaxlib, jax-cuda12-plugin)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:  # a source checkout on sys.path: its own __version__
        module = sys.modules.get(package.replace("-", "_"))
        return str(getattr(module, "__version__", "unknown"))


def compiler_versions(platform: str | None) -> tuple[tuple[str, str], ...]:
    """(package, version) of what compiles a run's programs: jax and jaxlib, then for a TPU or GPU
    (a --target's, or real ones) the installed libtpu or JAX CUDA plugin(s)."""
    kind = {"tpu": "tpu", "gpu": "cuda", "cuda": "cuda"}.get(platform or "")
    plugins = installed_compilers(kind) if kind else ()
    packages = ("jax", "jaxlib", *(m.replace("_", "-") for m in plugins))
    return tuple((p, package_version(p)) for p in packages)


def compiling_versions(platform: str) -> tuple[tuple[str, str], ...]:
    """`compiler_versions`, with only the CUDA plugin JAX loaded where both are installed (the one
    whose `jax_plugins.xla_cudaNN` module started: it compiles a GPU target's programs)."""
    versions = compiler_versions(platform)
    if platform not in ("cuda", "gpu"):
        return versions
    loaded = {f"jax-cuda{n}-plugin" for n in ("12", "13") if f"jax_plugins.xla_cuda{n}" in sys.modules}
    plugins = [(p, v) for p, v in versions[2:] if p in loaded]
    return (*versions[:2], *plugins) if plugins else versions


def _release(version: str) -> tuple[int, ...] | None:
    """A version's dotted numbers (`0.12.0.1` -> (0, 12, 0, 1)), as jaxlib compares a plugin's."""
    found = re.match(r"[0-9]+(?:\.[0-9]+)*", version)
    return tuple(int(x) for x in found.group(0).split(".")) if found else None


def check_cuda_plugin_matches_jaxlib() -> None:
    """Refuse a CUDA plugin of another version than jaxlib, before it compiles anything.

    jaxlib uses a plugin only of its own version (`jaxlib.plugin_support`: "it is not compatible with
    the installed jaxlib version ..., so it will not be used"), yet JAX still loads the plugin's
    compiler (its PJRT package) for a described GPU, and its figures differ from the matching
    version's (examples/mlp.py on gpu-h100:8: XLA's cost 7.47 vs 7.34 MFLOP). A later `pip install`
    of a framework can pull in another version.

    Raises:
        ShardcliError: an installed CUDA plugin (or its PJRT package) whose version is not jaxlib's.
    """
    jaxlib = package_version("jaxlib")
    for module in installed_compilers("cuda"):
        plugin = module.replace("_", "-")
        for package in (plugin, plugin.replace("-plugin", "-pjrt")):
            version = package_version(package)
            if version == "unknown" or _release(version) == _release(jaxlib):
                continue
            raise ShardcliError(
                f"{package} {version} is installed beside jaxlib {jaxlib}: JAX uses a CUDA plugin only of "
                f"jaxlib's version, and a compile with this one gives another compiler's figures; match "
                f'them with pip install "{plugin}=={jaxlib}"'
            )


def check_cuda_plugin_environment(*, gpu: bool) -> None:
    """What the CUDA plugin will read as it starts, checked before it starts (when it is installed).

    Args:
        gpu: the run compiles for a GPU (a --target gpu-..., or real GPUs): its plugin's version
            must be jaxlib's. Its client variables are checked for every run: the plugin reads them
            whenever JAX starts with it installed.

    Raises:
        ShardcliError: a plugin of another version than jaxlib (for a GPU), or a JAX GPU client
            variable the plugin cannot read (one line each).
    """
    if not compiler_installed("cuda"):
        return
    from shardcli.hardware.gpu_memory import check_gpu_client_variables

    if gpu:
        check_cuda_plugin_matches_jaxlib()
    release = _release(package_version("jaxlib")) or ()
    check_gpu_client_variables(os.environ, address_allocator=release >= (0, 12), gpu=gpu)


_CAPABILITY_RE = re.compile(r"cuda_compute_capability\s*\{\s*major:\s*(\d+)(?:\s*minor:\s*(\d+))?")


def compute_capability(spec_text: str) -> tuple[int, int] | None:
    """The CUDA compute capability a GPU description (`gpu_specs/*.txtpb`) gives, e.g. (9, 0)."""
    found = _CAPABILITY_RE.search(spec_text)
    return (int(found.group(1)), int(found.group(2) or 0)) if found else None


def describe_cudnn_for_compile_only(capability: tuple[int, int]) -> bool:
    """Let `jax.nn.dot_product_attention(implementation="cudnn")` trace for a described GPU.

    JAX asks the installed cuDNN for its version, and the first local GPU for its compute capability,
    before it writes cuDNN's fused attention into the program. A compile for a described GPU runs
    with no GPU backend started (a host with no GPU, or one whose own GPUs are not the target's), so
    the capability becomes the described GPU's; where no cuDNN answers, the version becomes the
    cuDNN the CUDA plugin was built against (`cudnn_build_version`). XLA's GPU compiler then
    compiles the same `__cudnn$fmha` kernels it would on the GPU.

    Returns: whether JAX's checks now answer for the described GPU (False: JAX's cuDNN module or
    the plugin's build version is not where this JAX keeps them).
    """
    try:
        from jax._src.cudnn import fused_attention_stablehlo as fused
        from jax._src.lib import cuda_versions
    except ImportError:
        return False
    if cuda_versions is None or not hasattr(fused, "check_cudnn_version"):
        return False
    try:
        cuda_versions.cudnn_get_version()
    except RuntimeError:  # no cuDNN here: the one the plugin was built against
        try:
            built = int(cuda_versions.cudnn_build_version())
        except (AttributeError, RuntimeError, ValueError):
            return False
        fused.check_cudnn_version = lambda: built
    wanted = capability

    def capable(text: str) -> bool:
        return wanted >= tuple(int(x) for x in text.split("."))

    fused.check_compute_capability = capable
    fused.is_cuda_compute_capability_equal = lambda text: wanted == tuple(int(x) for x in text.split("."))
    return True
