"""Pure parsing and validation of flags into frozen specs (no devices, no JAX)."""

from __future__ import annotations

import re

import pytest

from shardcli.errors import ExitCode, ShardcliError
from shardcli.specs.meshes import (
    MeshSpec,
    ShardingSpec,
    check_sharding_fits,
    parse_axes,
    parse_mesh,
    parse_mesh_shape,
    parse_sharding,
    parse_view_dims,
)
from shardcli.specs.runs import parse_choice
from shardcli.specs.values import (
    DTYPES,
    INITS,
    format_bytes,
    parse_bytes,
    parse_dtype,
    parse_init,
    parse_shape,
)

MESH_2X4 = MeshSpec(shape=(2, 4), axes=("data", "model"))
MESH_2X2X2 = MeshSpec(shape=(2, 2, 2), axes=("x", "y", "z"))


def test_shardcli_error_is_bad_input():
    assert ShardcliError("x").exit_code == ExitCode.BAD_INPUT == 2


# --mesh ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("8", (8,), id="1d"),
        pytest.param("2x4", (2, 4), id="2d"),
        pytest.param("2x2x2", (2, 2, 2), id="3d"),
        pytest.param("1", (1,), id="single"),
        pytest.param(" 2x4 ", (2, 4), id="outer-spaces"),
        pytest.param("2X4", (2, 4), id="capital-x"),
        pytest.param("1x1x1x1x1", (1, 1, 1, 1, 1), id="5d"),
    ],
)
def test_parse_mesh_shape(text, expected):
    assert parse_mesh_shape(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "--mesh is empty; give mesh sizes such as 8, 2x4 or 2x2x2", id="empty"),
        pytest.param("   ", "--mesh is empty", id="blank"),
        pytest.param(
            "0",
            "--mesh '0' has a size of 0; every size must be a positive integer (such as 8, 2x4 or 2x2x2)",
            id="zero",
        ),
        pytest.param("2x0", "--mesh '2x0' has a size of 0", id="zero-inner"),
        pytest.param(
            "-1",
            "--mesh '-1' is not valid: mesh sizes are positive integers joined by 'x', "
            "such as 8, 2x4 or 2x2x2",
            id="negative",
        ),
        pytest.param("2x-4", "--mesh '2x-4' is not valid", id="negative-inner"),
        pytest.param("1.5", "--mesh '1.5' is not valid", id="float"),
        pytest.param("2x", "--mesh '2x' is not valid", id="trailing-x"),
        pytest.param("x4", "--mesh 'x4' is not valid", id="leading-x"),
        pytest.param("2xx4", "--mesh '2xx4' is not valid", id="double-x"),
        pytest.param("2,4", "--mesh '2,4' is not valid", id="comma"),
        pytest.param("two", "--mesh 'two' is not valid", id="word"),
        pytest.param("+2", "--mesh '+2' is not valid", id="plus-sign"),
        pytest.param("٣", "--mesh '٣' is not valid", id="non-ascii-digit"),
    ],
)
def test_parse_mesh_shape_errors(text, message):
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_mesh_shape(text)


# --axes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rank", "expected"),
    [
        pytest.param(None, 1, ("x",), id="default-1d"),
        pytest.param(None, 2, ("x", "y"), id="default-2d"),
        pytest.param(None, 3, ("x", "y", "z"), id="default-3d"),
        pytest.param(None, 4, ("x", "y", "z", "w"), id="default-4d"),
        pytest.param("data,model", 2, ("data", "model"), id="named"),
        pytest.param(" data , model ", 2, ("data", "model"), id="spaces"),
        pytest.param("dp", 1, ("dp",), id="one"),
        pytest.param("a_1,_b,C", 3, ("a_1", "_b", "C"), id="identifiers"),
    ],
)
def test_parse_axes(text, rank, expected):
    assert parse_axes(text, rank) == expected


@pytest.mark.parametrize(
    ("text", "rank", "message"),
    [
        pytest.param(
            None,
            5,
            "a 5-D mesh needs --axes with 5 names; default names exist for up to 4 axes (x,y,z,w)",
            id="no-default-for-5d",
        ),
        pytest.param(
            "data",
            2,
            "--axes 'data' names 1 axes but the mesh has 2; give 2 comma-separated names, such as x,y",
            id="too-few",
        ),
        pytest.param("a,b,c", 2, "--axes 'a,b,c' names 3 axes but the mesh has 2", id="too-many"),
        pytest.param(
            "data,data",
            2,
            "--axes 'data,data' names axis 'data' twice; axis names must be unique",
            id="duplicate",
        ),
        pytest.param(
            "1x,y",
            2,
            "--axes name '1x' is not valid; axis names are Python identifiers such as data, model or x",
            id="leading-digit",
        ),
        pytest.param("a-b", 1, "--axes name 'a-b' is not valid", id="dash"),
        pytest.param("x,", 2, "--axes name '' is not valid", id="empty-name"),
        pytest.param("", 1, "--axes name '' is not valid", id="empty"),
        pytest.param("class", 1, "--axes name 'class' is not valid", id="keyword"),
        pytest.param("dätä", 1, "--axes name 'dätä' is not valid", id="non-ascii"),
        pytest.param(
            "_",
            1,
            "--axes name '_' is reserved (--spec uses None and _ for 'not sharded'); pick another name",
            id="reserved-underscore",
        ),
        pytest.param(
            "None,y",
            2,
            "--axes name 'None' is reserved (--spec uses None and _ for 'not sharded'); pick another name",
            id="reserved-None",
        ),
    ],
)
def test_parse_axes_errors(text, rank, message):
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_axes(text, rank)


def test_parse_mesh_combines_shape_and_axes():
    spec = parse_mesh("2x4", "data,model")
    assert spec == MESH_2X4
    assert spec.size == 8
    assert spec.axis_sizes == {"data": 2, "model": 4}
    assert spec.describe() == "2x4 (data=2, model=4)"
    assert parse_mesh("2x2x2", None) == MESH_2X2X2


# --shape, --dtype, --init, choices ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("16", (16,), id="1d"),
        pytest.param("8x8", (8, 8), id="2d"),
        pytest.param("4x8x8", (4, 8, 8), id="3d"),
        pytest.param("100000x100000x100", (100000, 100000, 100), id="huge-is-still-a-shape"),
    ],
)
def test_parse_shape(text, expected):
    assert parse_shape(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "8xjunk",
            "--shape '8xjunk' is not valid: array dims are positive integers joined by 'x', "
            "such as 8x8, 16 or 4x8x8",
            id="junk",
        ),
        pytest.param("8x0", "--shape '8x0' has a size of 0", id="zero"),
        pytest.param("", "--shape is empty; give array dims such as 8x8, 16 or 4x8x8", id="empty"),
        pytest.param("8*8", "--shape '8*8' is not valid", id="star"),
        pytest.param("(8, 8)", "--shape '(8, 8)' is not valid", id="tuple"),
    ],
)
def test_parse_shape_errors(text, message):
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_shape(text)


@pytest.mark.parametrize(
    ("name", "expected", "itemsize"),
    [
        pytest.param("float32", "float32", 4, id="float32"),
        pytest.param("bfloat16", "bfloat16", 2, id="bfloat16"),
        pytest.param("int32", "int32", 4, id="int32"),
        pytest.param(" Float16 ", "float16", 2, id="case-and-spaces"),
        pytest.param("bool", "bool", 1, id="bool"),
    ],
)
def test_parse_dtype(name, expected, itemsize):
    dtype = parse_dtype(name)
    assert dtype is DTYPES[expected]
    assert dtype.itemsize == itemsize


def test_parse_dtype_x64_flags():
    assert parse_dtype("float64").needs_x64
    assert parse_dtype("int64").needs_x64
    assert not parse_dtype("float32").needs_x64


@pytest.mark.parametrize(
    "name",
    [pytest.param("complex64", id="complex"), pytest.param("f32", id="alias"), pytest.param("", id="empty")],
)
def test_parse_dtype_errors(name):
    message = (
        f"--dtype {name!r} is not supported; choose one of float32, bfloat16, float16, float64, "
        "int8, int16, int32, int64, uint8, uint32, bool"
    )
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_dtype(name)


@pytest.mark.parametrize("name", sorted(INITS))
def test_parse_init(name):
    assert parse_init(name) == name


@pytest.mark.parametrize(
    "name",
    [pytest.param("eye", id="unknown"), pytest.param("Arange", id="case"), pytest.param("", id="empty")],
)
def test_parse_init_errors(name):
    message = f"--init {name!r} is not supported; choose one of arange, ones, zeros, random, normal"
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_init(name)


@pytest.mark.parametrize(
    ("n", "long", "short"),
    [
        pytest.param(0, "0 B", "0", id="zero"),
        pytest.param(1536, "1.5 KiB", "1536", id="not-a-whole-unit"),
        pytest.param(4096, "4 KiB", "4K", id="kib"),
        pytest.param(64 * 2**20, "64 MiB", "64M", id="mib"),
        pytest.param(3 * 2**30, "3 GiB", "3G", id="gib"),
        pytest.param(2**41, "2 TiB", "2048G", id="tib"),
    ],
)
def test_format_bytes(n, long, short):
    assert format_bytes(n) == long
    assert format_bytes(n, short=True) == short
    if n:
        assert parse_bytes(short) == n  # the short form is what --size reads


def test_parse_choice():
    assert parse_choice("cpu", "--platform", ("auto", "cpu")) == "cpu"
    with pytest.raises(
        ShardcliError, match=re.escape("--platform 'cuda' is not valid; choose one of auto, cpu")
    ):
        parse_choice("cuda", "--platform", ("auto", "cpu"))


# --spec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "entries", "pspec_args", "described"),
    [
        pytest.param(None, (), (), "P() (replicated)", id="left-out"),
        pytest.param("", (), (), "P() (replicated)", id="empty"),
        pytest.param("  ", (), (), "P() (replicated)", id="blank"),
        pytest.param("data,model", (("data",), ("model",)), ("data", "model"), "data,model", id="2d"),
        pytest.param("data", (("data",),), ("data",), "data", id="first-dim-only"),
        pytest.param("None,model", ((), ("model",)), (None, "model"), "None,model", id="None"),
        pytest.param("_,model", ((), ("model",)), (None, "model"), "None,model", id="underscore"),
        pytest.param("None,None", ((), ()), (None, None), "None,None", id="all-None"),
        pytest.param(
            "data+model,None",
            (("data", "model"), ()),
            (("data", "model"), None),
            "data+model,None",
            id="joined",
        ),
        pytest.param(
            " model + data , _ ",
            (("model", "data"), ()),
            (("model", "data"), None),
            "model+data,None",
            id="joined-reversed-spaces",
        ),
    ],
)
def test_parse_sharding(text, entries, pspec_args, described):
    spec = parse_sharding(text, MESH_2X4)
    assert spec == ShardingSpec(entries=entries)
    assert spec.to_partition_spec_args() == pspec_args
    assert spec.describe() == described


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "foo",
            "--spec 'foo' names mesh axis 'foo', which is not in the mesh; the mesh axes are "
            "data, model (or None for not sharded)",
            id="unknown-axis",
        ),
        pytest.param(
            "data+x", "--spec 'data+x' names mesh axis 'x', which is not in the mesh", id="unknown-in-join"
        ),
        pytest.param("none", "--spec 'none' names mesh axis 'none'", id="lowercase-none"),
        pytest.param("data+", "--spec 'data+' names mesh axis ''", id="dangling-plus"),
        pytest.param(
            "data,data",
            "--spec 'data,data' uses mesh axis 'data' twice (entries 0 and 1); "
            "a mesh axis can shard at most one dim",
            id="axis-twice",
        ),
        pytest.param(
            "data+data",
            "--spec 'data+data' uses mesh axis 'data' twice (entries 0 and 0)",
            id="axis-twice-joined",
        ),
        pytest.param(
            "model,None,data+model",
            "--spec 'model,None,data+model' uses mesh axis 'model' twice (entries 0 and 2)",
            id="axis-twice-far",
        ),
        pytest.param(
            "data,,model",
            "--spec 'data,,model' has an empty entry at position 1; use None (or _) for a dim "
            "that is not sharded",
            id="empty-entry",
        ),
        pytest.param(",data", "--spec ',data' has an empty entry at position 0", id="leading-comma"),
        pytest.param("data,", "--spec 'data,' has an empty entry at position 1", id="trailing-comma"),
    ],
)
def test_parse_sharding_errors(text, message):
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_sharding(text, MESH_2X4)


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        pytest.param(None, (3, 5), id="replicated-any-shape"),
        pytest.param("data,model", (8, 8), id="exact"),
        pytest.param("data,model", (2, 4), id="one-each"),
        pytest.param("data", (2, 7), id="shorter-than-rank"),
        pytest.param("data+model", (8,), id="joined"),
        pytest.param("None,data+model", (3, 16), id="joined-second"),
    ],
)
def test_check_sharding_fits(text, shape):
    check_sharding_fits(parse_sharding(text, MESH_2X4), MESH_2X4, shape)


@pytest.mark.parametrize(
    ("text", "shape", "message"),
    [
        pytest.param(
            "data,model",
            (8,),
            "--spec 'data,model' has 2 entries but the array has rank 1 (--shape 8); give at most 1",
            id="too-long",
        ),
        pytest.param(
            "None,None,None",
            (4, 4),
            "--spec 'None,None,None' has 3 entries but the array has rank 2",
            id="too-long-None",
        ),
        pytest.param(
            "data,model",
            (8, 6),
            "--shape 8x6: dim 1 (6) is not divisible by 4, the size of mesh axis 'model' that --spec "
            "shards it over; use a multiple of 4",
            id="not-divisible",
        ),
        pytest.param(
            "data+model",
            (12,),
            "--shape 12: dim 0 (12) is not divisible by 8, the size of mesh axis 'data+model'",
            id="not-divisible-joined",
        ),
        pytest.param("data", (3, 8), "--shape 3x8: dim 0 (3) is not divisible by 2", id="smaller-than-axis"),
    ],
)
def test_check_sharding_fits_errors(text, shape, message):
    with pytest.raises(ShardcliError, match=re.escape(message)):
        check_sharding_fits(parse_sharding(text, MESH_2X4), MESH_2X4, shape)


# --view-dims ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rank", "expected"),
    [
        pytest.param(None, 3, None, id="left-out"),
        pytest.param("0,2", 3, (0, 2), id="0-2"),
        pytest.param("2,0", 3, (2, 0), id="transposed"),
        pytest.param(" 1 , 0 ", 2, (1, 0), id="spaces"),
    ],
)
def test_parse_view_dims(text, rank, expected):
    assert parse_view_dims(text, rank) == expected


@pytest.mark.parametrize(
    ("text", "rank", "message"),
    [
        pytest.param(
            "0", 3, "--view-dims '0' is not valid; give two array dims as ROW,COL, such as 0,1", id="one-dim"
        ),
        pytest.param("0,1,2", 3, "--view-dims '0,1,2' is not valid", id="three-dims"),
        pytest.param("a,b", 3, "--view-dims 'a,b' is not valid", id="words"),
        pytest.param("-1,0", 3, "--view-dims '-1,0' is not valid", id="negative"),
        pytest.param(
            "1,1", 3, "--view-dims '1,1' must name two different dims below the array's rank 3", id="same"
        ),
        pytest.param(
            "0,3", 3, "--view-dims '0,3' must name two different dims below the array's rank 3", id="too-big"
        ),
        pytest.param(
            "0,1", 1, "--view-dims '0,1' must name two different dims below the array's rank 1", id="rank-1"
        ),
    ],
)
def test_parse_view_dims_errors(text, rank, message):
    with pytest.raises(ShardcliError, match=re.escape(message)):
        parse_view_dims(text, rank)


# --- frozen specs refuse nonsense at construction --------------------------------------------------


def _build(factory):
    from types import SimpleNamespace

    from shardcli.specs import arguments, meshes, runs, values

    return factory(SimpleNamespace(**{**vars(values), **vars(meshes), **vars(runs), **vars(arguments)}))


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        pytest.param(
            lambda s: s.MeshSpec(shape=(2, 4), axes=("x",)),
            "mesh shape (2, 4) has 2 dims but axes ('x',) name 1; give one name per dim",
            id="mesh-axes-short",
        ),
        pytest.param(
            lambda s: s.MeshSpec(shape=(), axes=()),
            "mesh shape () is not valid; give one or more positive sizes, such as (2, 4)",
            id="mesh-empty",
        ),
        pytest.param(
            lambda s: s.MeshSpec(shape=(0, 4), axes=("x", "y")),
            "mesh shape (0, 4) is not valid; give one or more positive sizes, such as (2, 4)",
            id="mesh-zero",
        ),
        pytest.param(
            lambda s: s.MeshSpec(shape=(2, 2), axes=("x", "x")),
            "mesh axes ('x', 'x') name an axis twice; axis names must be unique",
            id="mesh-axis-twice",
        ),
        pytest.param(
            lambda s: s.MeshSpec(shape=(2,), axes=("not valid",)),
            "mesh axis name 'not valid' is not valid; axis names are Python identifiers such as data or x",
            id="mesh-axis-name",
        ),
        pytest.param(
            lambda s: s.MeshSpec(shape=(2,), axes=("None",)),
            "mesh axis name 'None' is not valid; axis names are Python identifiers such as data or x",
            id="mesh-reserved-name",
        ),
        pytest.param(
            lambda s: s.ShardingSpec(entries=("data",)),
            "sharding entries ('data',) are not valid; give one tuple of mesh axis names per array dim, "
            "such as (('data',), ())",
            id="sharding-bare-string",
        ),
        pytest.param(
            lambda s: s.RunOptions(format="yaml"),
            "format 'yaml' is not valid; choose one of table, json, csv",
            id="options-format",
        ),
        pytest.param(
            lambda s: s.RunOptions(platform="cuda"),
            "platform 'cuda' is not valid; choose one of auto, cpu, gpu, tpu",
            id="options-platform",
        ),
        pytest.param(
            lambda s: s.RunOptions(mode="manual"),
            "mode 'manual' is not valid; choose one of auto, explicit",
            id="options-mode",
        ),
        pytest.param(
            lambda s: s.RunOptions(process_timing="min"),
            "process_timing 'min' is not valid; choose one of max, avg",
            id="options-process-timing",
        ),
        pytest.param(
            lambda s: s.RunOptions(malloc="jemalloc"),
            "malloc 'jemalloc' is not valid; choose one of reuse, system",
            id="options-malloc",
        ),
        pytest.param(
            lambda s: s.DistributedSpec(coordinator="h:1", num_processes=2),
            "a multi-process run takes coordinator, num_processes and process_id together "
            "(or none of them, to let JAX detect the cluster)",
            id="distributed-partial",
        ),
        pytest.param(
            lambda s: s.DistributedSpec("h:1", 2, 2),
            "process_id 2 is not valid for 2 processes; give 0 to 1",
            id="distributed-process-id",
        ),
        pytest.param(
            lambda s: s.DistributedSpec("h:1", 0, 0),
            "num_processes 0 is not valid; give at least 1",
            id="distributed-no-processes",
        ),
        pytest.param(
            lambda s: s.DistributedSpec(join_timeout_s=0),
            "join_timeout_s 0 is not valid; give at least 1 second",
            id="distributed-timeout",
        ),
        pytest.param(
            lambda s: s.ArraySpec(shape=(4, -1), dtype=s.DTYPES["float32"]),
            "array shape (4, -1) is not valid; give sizes of 0 or more",
            id="array-negative",
        ),
        pytest.param(
            lambda s: s.ArraySpec(shape=(4,), dtype=s.DTYPES["float32"], init="linspace"),
            "init 'linspace' is not valid; choose one of arange, ones, zeros, random, normal",
            id="array-init",
        ),
        pytest.param(
            lambda s: s.DType("complex64", 8, "complex"),
            "dtype complex64 has kind 'complex'; choose one of float, int, uint, bool",
            id="dtype-kind",
        ),
    ],
)
def test_nonsense_specs_are_refused(factory, message):
    with pytest.raises(ShardcliError) as info:
        _build(factory)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_closed_choices_are_enums_that_read_as_their_words():
    import json

    from shardcli.specs.runs import Format, Malloc, Mode, Platform, ProcessTiming, RunOptions

    options = RunOptions(platform="cpu", mode="explicit", format="json", process_timing="avg", malloc="reuse")
    assert (options.platform, options.mode, options.format) == (Platform.CPU, Mode.EXPLICIT, Format.JSON)
    assert (options.process_timing, options.malloc) == (ProcessTiming.AVG, Malloc.REUSE)
    assert options.format == "json" and f"{options.platform}" == "cpu"
    assert json.dumps({"mode": options.mode}) == '{"mode": "explicit"}'
    assert parse_choice("tpu", "--platform", tuple(Platform)) == "tpu"
    with pytest.raises(
        ShardcliError, match=r"^--platform 'cuda' is not valid; choose one of auto, cpu, gpu, tpu$"
    ):
        parse_choice("cuda", "--platform", tuple(Platform))


def test_a_spec_that_jax_refuses_can_still_be_described():
    """matmul's illegal case shards two dims over one axis: the spec exists so JAX can refuse it."""
    assert ShardingSpec(entries=(("x",), ("x",))).describe() == "x,x"
