"""Reading compiled HLO text: computations, instructions, who calls whom, and loop trip counts.

The one place that reads the structure of XLA's text (`compiled.as_text()`), for what JAX's own
analyses do not give: which computations a loop runs and how many times. `program_analysis` builds
the frozen analysis on top of it. No JAX import: everything here is tested on strings.

Trip counts: the CPU and GPU compilers write `"known_trip_count":{"n":"8"}` into a while's
backend config; the TPU compiler (libtpu 0.0.52) writes none, so the count is read the way XLA's
own loop analysis reads it: the condition compares a counter in the loop's tuple with a bound
(`counter < 8`), the counter starts at a constant (the while's operand) and the body adds a constant
to it each trip. With jax_enable_x64 on, libtpu splits a 64-bit counter into two u32 halves
(`hi < 0 or (hi == 0 and lo < 8)`): the low half is read as the counter where the high one starts at 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

_HEADER_RE = re.compile(r"^(?P<entry>ENTRY )?%?(?P<name>[\w.\-]+) \(.*\{\s*$")
_NAME_RE = re.compile(r"^\s*(?P<root>ROOT )?%?(?P<name>[\w.\-]+) = ")
_OPCODE_RE = re.compile(r"\s*(?P<op>[a-z][\w\-]*)\(")
_OPERAND_NAME_RE = re.compile(r"%([\w.\-]+)")
_CALLEE_RE = re.compile(
    r"\b(?P<kind>body|condition|to_apply|calls|select|scatter|true_computation|false_computation)=%(?P<name>[\w.\-]+)"
)
_BRANCHES_RE = re.compile(r"\b(?:branch_computations|called_computations)=\{(?P<names>[^}]*)\}")
_TRIP_RE = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d+)"\}')
_INDEX_RE = re.compile(r"\bindex=(?P<i>\d+)")
_DIRECTION_RE = re.compile(r"\bdirection=(?P<d>[A-Z]+)")
_CONSTANT_RE = re.compile(r"^-?\d+$")
# Ops that pass a scalar through unchanged, followed when looking for a constant or a tuple element.
_PASS_THROUGH = ("copy", "bitcast", "convert", "reshape")


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction: `%name = shape opcode(operands), attributes`."""

    name: str
    shape: str
    opcode: str
    operands: tuple[str, ...]  # operand instruction names; a constant's literal is `literal`
    literal: str
    attributes: str
    is_root: bool


@dataclass
class Computation:
    """One computation of the module: its header line, its instructions and its raw text."""

    name: str
    is_entry: bool
    text: list[str] = field(default_factory=list)
    instructions: dict[str, Instruction] = field(default_factory=dict)
    root: str | None = None


@dataclass(frozen=True)
class Loop:
    """One while loop: the instruction, the computations it runs, and its trip count where known."""

    name: str
    computation: str  # the computation holding the while
    body: str
    condition: str
    trips: int | None
    op_name: str | None
    source_frame: int | None


@dataclass
class HloModuleText:
    """The parsed module: its prologue (the header and source tables) and its computations."""

    prologue: list[str]
    computations: dict[str, Computation]
    entry: str

    def callees(self, name: str) -> Iterator[tuple[str, str]]:
        """(kind, callee) for every computation `name` calls: body, condition, calls, to_apply..."""
        for inst in self.computations[name].instructions.values():
            yield from instruction_callees(inst)

    def reachable(self, start: str) -> list[str]:
        """`start` and every computation it calls, directly or not, in the module's order."""
        seen = {start}
        todo = [start]
        while todo:
            for _, callee in self.callees(todo.pop()):
                if callee in self.computations and callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
        return [name for name in self.computations if name in seen]

    def loops(self) -> list[Loop]:
        """Every while instruction of the module, with its trip count where it can be read."""
        found = []
        for comp in self.computations.values():
            for inst in comp.instructions.values():
                if inst.opcode != "while":
                    continue
                body = re.search(r"\bbody=%([\w.\-]+)", inst.attributes)
                cond = re.search(r"\bcondition=%([\w.\-]+)", inst.attributes)
                if body is None or cond is None:
                    continue
                op_name = re.search(r'op_name="([^"]*)"', inst.attributes)
                frame = re.search(r"stack_frame_id=(\d+)", inst.attributes)
                found.append(
                    Loop(
                        name=inst.name,
                        computation=comp.name,
                        body=body.group(1),
                        condition=cond.group(1),
                        trips=self.trip_count(comp, inst, body.group(1), cond.group(1)),
                        op_name=op_name.group(1) if op_name else None,
                        source_frame=int(frame.group(1)) if frame else None,
                    )
                )
        return found

    def trip_count(self, comp: Computation, loop: Instruction, body: str, cond: str) -> int | None:
        """The compiler's `known_trip_count`, else the counted-loop pattern; None where neither."""
        known = _TRIP_RE.search(loop.attributes)
        if known is not None:
            return int(known.group("n"))
        if body not in self.computations or cond not in self.computations or not loop.operands:
            return None
        init_tuple = comp.instructions.get(loop.operands[0])
        if init_tuple is None or init_tuple.opcode != "tuple":
            return None
        bound = self._bound(self.computations[cond]) or self._wide_bound(comp, init_tuple, cond)
        if bound is None:
            return None
        index, direction, bound_value = bound
        if index >= len(init_tuple.operands):
            return None
        start = _constant(comp, init_tuple.operands[index])
        limit: int | None
        if isinstance(bound_value, str):  # the bound is another element of the loop's tuple
            at = int(bound_value)
            limit = _constant(comp, init_tuple.operands[at]) if at < len(init_tuple.operands) else None
        else:
            limit = bound_value
        step = self._step(self.computations[body], index)
        if start is None or limit is None or step is None:
            return None
        return _trips(start, limit, step, direction)

    def _bound(self, cond: Computation) -> tuple[int, str, int | str] | None:
        """(counter's tuple index, direction as `counter OP bound`, the bound or its tuple index)."""
        root = cond.instructions.get(cond.root or "")
        if root is None:
            return None
        where, compare = cond, root
        args: list[str | None] = list(root.operands)
        if root.opcode == "fusion":  # the compare inside a fused computation: map its parameters back
            called = re.search(r"\bcalls=%([\w.\-]+)", root.attributes)
            fused = self.computations.get(called.group(1)) if called else None
            inner = fused.instructions.get(fused.root or "") if fused else None
            if fused is None or inner is None or inner.opcode != "compare":
                return None
            args = [_fused_argument(fused, name, root.operands) for name in inner.operands]
            compare = inner
        if compare.opcode != "compare" or len(args) != 2 or any(a is None for a in args):
            return None
        direction = _DIRECTION_RE.search(compare.attributes)
        if direction is None:
            return None
        sides = []
        for arg in args:
            assert arg is not None
            index = _tuple_index(where, arg)
            value = _constant(where, arg)
            sides.append((index, value))
        (li, lv), (ri, rv) = sides
        d = direction.group("d")
        if li is not None and (rv is not None or ri is not None):
            return li, d, rv if rv is not None else str(ri)
        if ri is not None and (lv is not None or li is not None):
            flipped = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(d, d)
            return ri, flipped, lv if lv is not None else str(li)
        return None

    def _wide_bound(
        self, comp: Computation, init_tuple: Instruction, cond: str
    ) -> tuple[int, str, int] | None:
        """The bound of a 64-bit counter the TPU compiler split into two u32 halves (jax_enable_x64 on):
        `hi < 0 or (hi == 0 and lo < N)`. Where the high half starts at 0 and N fits the low half,
        the high half stays 0 and the low half is the counter: (its index, direction, N)."""
        where = self.computations[cond]
        root = where.instructions.get(where.root or "")
        if root is None or root.opcode != "or":
            return None
        sides: list[tuple[int, str, int]] = []
        for inst in where.instructions.values():
            if inst.opcode != "compare":
                continue
            direction = _DIRECTION_RE.search(inst.attributes)
            a, b = (inst.operands + ("", ""))[:2]
            index = _tuple_index(where, _through(where, a, "bitcast-convert"))
            value = _constant(where, b)
            if direction is None or index is None or value is None:
                return None
            sides.append((index, direction.group("d"), value))
        high = {i for i, d, v in sides if d == "EQ" and v == 0}
        low = [(i, d, v) for i, d, v in sides if i not in high]
        if len(high) != 1 or len(low) != 1 or low[0][1] not in ("LT", "LE") or not 0 <= low[0][2] < 2**31:
            return None
        if any(d not in ("EQ", "LT") or v != 0 for i, d, v in sides if i in high):
            return None
        (hi,) = high
        if hi >= len(init_tuple.operands) or _constant(comp, init_tuple.operands[hi]) != 0:
            return None
        return low[0]

    def _step(self, body: Computation, index: int) -> int | None:
        """What the body adds to tuple element `index` each trip (a constant), or None."""
        root = body.instructions.get(body.root or "")
        if root is None or root.opcode != "tuple" or index >= len(root.operands):
            return None
        update = _follow(body, root.operands[index])
        if update is None or update.opcode not in ("add", "subtract") or len(update.operands) != 2:
            return None
        a, b = update.operands
        if _tuple_index(body, a) == index and _constant(body, b) is not None:
            step = _constant(body, b)
        elif update.opcode == "add" and _tuple_index(body, b) == index and _constant(body, a) is not None:
            step = _constant(body, a)
        else:
            return None
        assert step is not None
        return -step if update.opcode == "subtract" else step

    def module_of(self, entry: str) -> str:
        """HLO text of a module whose entry computation is `entry`, with everything it calls."""
        head = ["HloModule " + entry.replace("%", "")]
        body: list[str] = []
        for name in self.reachable(entry):
            lines = list(self.computations[name].text)
            header = lines[0].removeprefix("ENTRY ")
            lines[0] = ("ENTRY " + header) if name == entry else header
            body.extend([*lines, ""])
        return "\n".join(head + self.prologue[1:] + body)


# HLO element types under NumPy's names, for the dtypes of dots.
NUMPY_NAMES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "s8": "int8",
    "u8": "uint8",
    "s32": "int32",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


# Bytes per element of each HLO element type.
ELEMENT_BYTES = {
    "pred": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
}
_ARRAY_RE = re.compile(r"(?<![\w])([a-z][a-z0-9]*)\[([0-9,]*)\]")
Array = tuple[str, tuple[int, ...]]  # an HLO array type: ("bf16", (1024, 2048))


def array_types(shape: str) -> list[Array]:
    """Every array type in an HLO type (`f32[4,8]{1,0}`, or a tuple of them), in order."""
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY_RE.findall(shape)]


def array_bytes(array: Array) -> int:
    """Bytes of one array type (0 for an element type the table does not know)."""
    return math.prod(array[1]) * ELEMENT_BYTES.get(array[0], 0)


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO type: an array (`f32[4,8]{1,0}`) or a tuple of them."""
    return sum(array_bytes(a) for a in array_types(shape))


def dot_dtype(module: HloModuleText) -> str | None:
    """The dtype most of the program's matrix maths runs in: the left operands' element type of its
    dots and convolutions, weighted by their result sizes (NumPy's name); None without any."""
    weights: dict[str, int] = {}
    for comp in module.computations.values():
        for inst in comp.instructions.values():
            if inst.opcode not in ("dot", "convolution") or not inst.operands:
                continue
            lhs = comp.instructions.get(inst.operands[0])
            kind = re.match(r"\(?([a-z0-9]+)\[", lhs.shape) if lhs is not None else None
            size = re.match(r"[a-z0-9]+\[([0-9,]*)\]", inst.shape)
            if kind is None or size is None:
                continue
            elements = math.prod(int(d) for d in size.group(1).split(",") if d)
            weights[kind.group(1)] = weights.get(kind.group(1), 0) + elements
    if not weights:
        return None
    most = max(weights, key=lambda k: weights[k])
    return NUMPY_NAMES.get(most, most)


def _follow(comp: Computation, name: str) -> Instruction | None:
    """The instruction `name`, through copies and bitcasts."""
    inst = comp.instructions.get(name)
    for _ in range(16):
        if inst is None or inst.opcode not in _PASS_THROUGH or not inst.operands:
            return inst
        inst = comp.instructions.get(inst.operands[0])
    return inst


def _through(comp: Computation, name: str, opcode: str) -> str:
    """`name`, or its operand where `name` is an `opcode`."""
    inst = comp.instructions.get(name)
    return inst.operands[0] if inst is not None and inst.opcode == opcode and inst.operands else name


def _constant(comp: Computation, name: str) -> int | None:
    inst = _follow(comp, name)
    if inst is None or inst.opcode != "constant" or not _CONSTANT_RE.match(inst.literal.strip()):
        return None
    return int(inst.literal.strip())


def _tuple_index(comp: Computation, name: str) -> int | None:
    """i where `name` is element i of the computation's (tuple) parameter."""
    inst = _follow(comp, name)
    if inst is None or inst.opcode != "get-tuple-element" or not inst.operands:
        return None
    source = comp.instructions.get(inst.operands[0])
    if source is None or source.opcode != "parameter":
        return None
    index = _INDEX_RE.search(inst.attributes)
    return int(index.group("i")) if index else None


def _fused_argument(fused: Computation, name: str, outer: tuple[str, ...]) -> str | None:
    """The caller's operand that fused parameter `name` stands for."""
    inst = fused.instructions.get(name)
    if inst is None or inst.opcode != "parameter" or not _CONSTANT_RE.match(inst.literal.strip()):
        return None
    i = int(inst.literal.strip())
    return outer[i] if i < len(outer) else None


def _trips(start: int, limit: int, step: int, direction: str) -> int | None:
    """How many times `counter OP limit` holds, the counter going from `start` by `step`."""
    if step == 0:
        return None
    if direction == "LT" and step > 0:
        return max(0, math.ceil((limit - start) / step))
    if direction == "LE" and step > 0:
        return max(0, (limit - start) // step + 1)
    if direction == "GT" and step < 0:
        return max(0, math.ceil((start - limit) / -step))
    if direction == "GE" and step < 0:
        return max(0, (start - limit) // -step + 1)
    if direction == "NE" and (limit - start) % step == 0 and (limit - start) // step >= 0:
        return (limit - start) // step
    return None


def instruction_callees(inst: Instruction) -> Iterator[tuple[str, str]]:
    """(kind, callee) for every computation one instruction calls: body, condition, calls, branch..."""
    for match in _CALLEE_RE.finditer(inst.attributes):
        yield match.group("kind"), match.group("name")
    for branches in _BRANCHES_RE.finditer(inst.attributes):
        for callee in branches.group("names").split(","):
            if callee.strip():
                yield "branch", callee.strip().lstrip("%")


def parse_module(hlo_text: str) -> HloModuleText:
    """Split compiled HLO text into its computations and instructions."""
    prologue: list[str] = []
    computations: dict[str, Computation] = {}
    entry = ""
    current: Computation | None = None
    for line in hlo_text.splitlines():
        header = _HEADER_RE.match(line)
        if header is not None:
            current = Computation(
                name=header.group("name"), is_entry=bool(header.group("entry")), text=[line]
            )
            computations[current.name] = current
            if current.is_entry:
                entry = current.name
            continue
        if current is None:
            prologue.append(line)
            continue
        current.text.append(line)
        if line.startswith("}"):
            current = None
            continue
        inst = parse_instruction(line)
        if inst is not None:
            current.instructions[inst.name] = inst
            if inst.is_root:
                current.root = inst.name
    return HloModuleText(prologue=prologue, computations=computations, entry=entry)


def parse_instruction(line: str) -> Instruction | None:
    """`%name = shape opcode(operands), attributes` as an Instruction; None for other lines."""
    head = _NAME_RE.match(line)
    if head is None:
        return None
    rest = line[head.end() :]
    shape_end = _shape_end(rest)
    op = _OPCODE_RE.match(rest, shape_end)
    if op is None:
        return None
    start = op.end()
    depth = 1
    i = start
    while i < len(rest) and depth:
        depth += {"(": 1, ")": -1}.get(rest[i], 0)
        i += 1
    inside = rest[start : i - 1]
    return Instruction(
        name=head.group("name"),
        shape=rest[:shape_end],
        opcode=op.group("op"),
        operands=tuple(_OPERAND_NAME_RE.findall(inside)),
        literal=inside,
        attributes=rest[i:],
        is_root=bool(head.group("root")),
    )


def _shape_end(text: str) -> int:
    """Where the result type at the start of `text` ends: brackets, braces and parens balanced."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == " " and depth == 0:
            return i
    return len(text)


def source_table(hlo_text: str, user_files: tuple[str, ...] = ()) -> dict[int, str]:
    """stack_frame_id -> "file:line", from the module's FileNames/FileLocations/StackFrames: of
    each frame's call chain, the line `pick_source` picks (the user's, not a library's)."""
    return {k: stack[0] for k, stack in stack_table(hlo_text, user_files).items()}


def stack_table(hlo_text: str, user_files: tuple[str, ...] = ()) -> dict[int, tuple[str, ...]]:
    """stack_frame_id -> the user's frames of its call chain ("file:line", innermost first; see
    `user_stack`), read from the module's FileNames/FileLocations/StackFrames."""
    sections: dict[str, dict[int, str]] = {}
    current = None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = stripped
            sections[current] = {}
            continue
        if current is None:
            continue
        head, _, rest = stripped.partition(" ")
        if not head.isdigit():
            current = None
            continue
        sections[current][int(head)] = rest
    files = {k: v.strip('"') for k, v in sections.get("FileNames", {}).items()}
    locations = {}
    for k, v in sections.get("FileLocations", {}).items():
        file_id = re.search(r"file_name_id=(\d+)", v)
        line_no = re.search(r"\bline=(\d+)", v)
        if file_id and line_no:
            locations[k] = f"{files.get(int(file_id.group(1)), '?')}:{line_no.group(1)}"
    frames: dict[int, tuple[int | None, int]] = {}  # id -> (location, parent id; 0: none)
    for k, v in sections.get("StackFrames", {}).items():
        place = re.search(r"file_location_id=(\d+)", v)
        up = re.search(r"parent_frame_id=(\d+)", v)
        frames[k] = (int(place.group(1)) if place else None, int(up.group(1)) if up else 0)
    # XLA prints a parent as its id + 1 (the outermost frame, 1, names "parent 1"); a printer that
    # writes the id itself gives the outermost frame parent 0.
    shift = 1 if frames.get(1, (None, 0))[1] == 1 else 0
    picked = {}
    for k in frames:
        chain: list[str] = []
        at, seen = k, set[int]()
        while at in frames and at not in seen:
            seen.add(at)
            location_id, parent_id = frames[at]
            if location_id in locations:
                chain.append(locations[location_id])
            at = parent_id - shift
        stack = user_stack(chain, user_files)
        if stack:
            picked[k] = stack
    return picked


def pick_source(chain: Sequence[str], user_files: tuple[str, ...] = ()) -> str | None:
    """The line a collective is blamed on: the innermost of `user_stack`, or None."""
    stack = user_stack(chain, user_files)
    return stack[0] if stack else None


def user_stack(chain: Sequence[str], user_files: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Of a call chain ("file:line", innermost first): the user's frames, innermost first, each
    once (a transformation re-enters the same lines), else the innermost frame alone. The user's
    files are `user_files` (files, or package folders, wherever they are) and every file outside
    installed packages (site-packages, the standard library): a thin script that calls a model in
    the user's other files is blamed for no collective its model makes.
    Only the frames inside shardcli's own count (a playground program is shardcli's, not the user's;
    what calls shardcli is the command line), and never a frame of no file (`<string>`)."""
    import os
    import sysconfig

    # The frames inside the first of shardcli's own: those outside it are shardcli and the command
    # line's machinery (typer, runpy); "<string>" and "<frozen ...>" have no file to point at.
    inner = []
    for source in chain:
        if _shardcli_file(source.rpartition(":")[0]):
            break
        if not source.startswith("<"):
            inner.append(source)
    chain = inner
    if not chain:  # only shardcli's own frames (the playground's programs): no line of the user's
        return ()
    stdlib = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
    roots = tuple(os.path.abspath(r) for r in user_files)

    def file_of(source: str) -> str:
        return os.path.abspath(source.rpartition(":")[0])

    def library(source: str) -> bool:
        parts = file_of(source).split(os.sep)
        return "site-packages" in parts or "dist-packages" in parts or file_of(source).startswith(stdlib)

    def users(source: str) -> bool:
        path = file_of(source)
        return any(path == r or path.startswith(r + os.sep) for r in roots) or not library(source)

    return tuple(dict.fromkeys([s for s in chain if users(s)] or chain[:1]))


# --- a module's text as a file: what it is and what it was compiled for -----------------------------

# What each compiler writes that the others do not (checked on jax 0.10-0.12 texts): the GPU's library
# calls and its backend config's fields; the TPU's tiled layouts (`{1,0:T(8,128)(2,1)}`) and memory
# spaces; the CPU's fusion config (`__ynn_fusion`, `outer_dimension_partitions`) and oneDNN calls.
PLATFORM_MARKS = {
    "cuda": ("__cublas$", "__cudnn$", "__triton", '"operation_queue_id"', '"force_earliest_schedule"'),
    "tpu": (":T(", "tpu_custom_call"),
    "cpu": ('"outer_dimension_partitions"', "__ynn_fusion", "__onednn$"),
}
_PARTITIONS_RE = re.compile(r"\bnum_partitions=(?P<n>\d+)")
_ENTRY_LAYOUT_RE = re.compile(r"entry_computation_layout=\{\((?P<params>.*?)\)->(?P<results>.*?)\}(?:, |$)")


def module_platform(hlo_text: str) -> str | None:
    """The platform whose compiler wrote the optimized module ("cuda", "tpu" or "cpu"), from marks
    only one of them writes; None where the text carries none (or marks of several)."""
    found = [p for p, marks in PLATFORM_MARKS.items() if any(m in hlo_text for m in marks)]
    return found[0] if len(found) == 1 else None


def module_partitions(hlo_text: str) -> int:
    """How many devices the module was partitioned over (`num_partitions`; 1 where the header has none)."""
    header = hlo_text.lstrip().split("\n", 1)[0]
    found = _PARTITIONS_RE.search(header)
    return int(found.group("n")) if found else 1


def module_problem(hlo_text: str) -> str | None:
    """Why the text is no optimized HLO module (one clause), or None where it is one."""
    head = hlo_text.lstrip()[:200]
    if head.startswith("module @") or head.startswith("#loc"):
        return "it is StableHLO (lowered.as_text()), before XLA compiled it"
    if not head.startswith("HloModule "):
        return "its first line does not start with 'HloModule'"
    header = hlo_text.lstrip().split("\n", 1)[0]
    if "is_scheduled=true" not in header:
        return "it is HLO before XLA's optimizations (no is_scheduled=true in its header)"
    if "ENTRY " not in hlo_text:
        return "it has no ENTRY computation"
    return None


def entry_array_counts(hlo_text: str) -> tuple[int, int]:
    """(arrays the entry computation takes, arrays it returns), from the header's
    `entry_computation_layout`; (0, 0) where the header has none."""
    header = hlo_text.lstrip().split("\n", 1)[0]
    found = _ENTRY_LAYOUT_RE.search(header)
    if found is None:
        return 0, 0
    taken = array_types(re.sub(r"\{[^{}]*\}", "", found.group("params")))
    returned = array_types(re.sub(r"\{[^{}]*\}", "", found.group("results")))
    return len(taken), len(returned)


def entry_parameter_bytes(hlo_text: str) -> tuple[int, int]:
    """(how many arrays the entry computation takes, their bytes per device), from the header's
    `entry_computation_layout` (the shapes after partitioning)."""
    header = hlo_text.lstrip().split("\n", 1)[0]
    found = _ENTRY_LAYOUT_RE.search(header)
    if found is None:
        return 0, 0
    arrays = array_types(re.sub(r"\{[^{}]*\}", "", found.group("params")))
    total = sum(array_bytes(a) for a in arrays)
    return len(arrays), total


def _shardcli_file(path: str) -> bool:
    """Whether `path` is one of shardcli's own modules: in this package's folder, or in another copy
    of it (a compile cache keeps the paths of the checkout that first compiled a program)."""
    import os

    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.abspath(path)
    if path.startswith(own + os.sep):
        return True
    head, sep, rest = path.rpartition(os.sep + "shardcli" + os.sep)
    return bool(sep) and os.path.isfile(os.path.join(own, rest))
