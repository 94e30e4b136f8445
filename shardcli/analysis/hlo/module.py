"""Reading compiled HLO text: computations, instructions and who calls whom.

The one place that reads the structure of XLA's text (`compiled.as_text()`), for what JAX's own
analyses do not give. Beside it: `hlo.trips` (while loops and their trip counts), `hlo.arrays`
(element and array types, their bytes), `hlo.sources` (the source lines of the module's stack
frames) and `hlo.header` (what a module's text says of itself). `program` builds the frozen
analysis on top of them. No JAX import: everything here is tested on strings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError

_HEADER_RE = re.compile(r"^(?P<entry>ENTRY )?%?(?P<name>[\w.\-]+) \(.*\{\s*$")
_NAME_RE = re.compile(r"^\s*(?P<root>ROOT )?%?(?P<name>[\w.\-]+) = ")
_OPCODE_RE = re.compile(r"\s*(?P<op>[a-z][\w\-]*)\(")
_OPERAND_NAME_RE = re.compile(r"%([\w.\-]+)")
_CALLEE_RE = re.compile(
    r"\b(?P<kind>body|condition|to_apply|calls|select|scatter|true_computation|false_computation)=%(?P<name>[\w.\-]+)"
)
# What runs a computation as a whole: a while's body, a fusion's or call's computation, a reduction's.
_RUNS_RE = re.compile(r"\b(?:body|calls|to_apply)=%(?P<name>[\w.\-]+)")
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')  # a quoted string, escapes and all
_BRANCHES_RE = re.compile(r"\b(?:branch_computations|called_computations)=\{(?P<names>[^}]*)\}")


class ModuleTextError(ShardcliError):
    """A text no XLA compiler writes: a call of a computation the module does not define, a
    computation that calls itself, a number past XLA's int64 (the message says which, one clause)."""


# XLA's sizes, counts and element counts are int64: a text with more is not one XLA wrote.
INT64_MAX = 2**63 - 1


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

    @functools.cached_property
    def callees(self) -> tuple[tuple[str, str], ...]:
        """(kind, callee) for every computation this instruction calls (`instruction_callees`),
        read from its attributes once (the call graph's walks ask for each many times)."""
        found = [(m.group("kind"), m.group("name")) for m in _CALLEE_RE.finditer(self.attributes)]
        for branches in _BRANCHES_RE.finditer(self.attributes):
            for callee in branches.group("names").split(","):
                if callee.strip():
                    found.append(("branch", callee.strip().lstrip("%")))
        return tuple(found)


@dataclass
class Computation:
    """One computation of the module: its header line, its instructions and its raw text."""

    name: str
    is_entry: bool
    text: list[str] = field(default_factory=list)
    instructions: dict[str, Instruction] = field(default_factory=dict)
    root: str | None = None


@dataclass
class HloModuleText:
    """The parsed module: its prologue (the header and source tables) and its computations."""

    prologue: list[str]
    computations: dict[str, Computation]
    entry: str
    _sites: dict[str, list[tuple[str, Instruction]]] | None = field(default=None, repr=False, compare=False)
    _order: list[str] | None = field(default=None, repr=False, compare=False)

    def callees(self, name: str) -> Iterator[tuple[str, str]]:
        """(kind, callee) for every computation `name` calls: body, condition, calls, to_apply..."""
        comp = self.computations.get(name)
        for inst in comp.instructions.values() if comp is not None else ():
            yield from instruction_callees(inst)

    def call_order(self) -> list[str]:
        """The entry and every computation it calls, callers before callees (each once).

        Raises:
            ModuleTextError: an instruction calls a computation the module does not define, or a
                computation calls itself (directly or through others): XLA writes neither.
        """
        if not self.entry:
            return []
        if self._order is None:
            self._order = self._call_order()
        return list(self._order)

    def _call_order(self) -> list[str]:
        edges: dict[str, list[str]] = {}
        todo = [self.entry]
        while todo:
            name = todo.pop()
            if name in edges:
                continue
            edges[name] = []
            for inst in self.computations[name].instructions.values():
                for _, callee in instruction_callees(inst):
                    if callee not in self.computations:
                        raise ModuleTextError(
                            f"%{inst.name} calls %{callee}, which the module does not define"
                        )
                    edges[name].append(callee)
                    todo.append(callee)
        waiting = dict.fromkeys(edges, 0)
        for callees in edges.values():
            for callee in callees:
                waiting[callee] += 1
        ready = [name for name, count in waiting.items() if count == 0]
        order: list[str] = []
        while ready:
            name = ready.pop()
            order.append(name)
            for callee in edges[name]:
                waiting[callee] -= 1
                if waiting[callee] == 0:
                    ready.append(callee)
        if len(order) < len(edges):
            looped = next(name for name, count in waiting.items() if count > 0)
            raise ModuleTextError(f"computation %{looped} calls itself (directly or through others)")
        return order

    def call_sites(self, callee: str) -> list[tuple[str, Instruction]]:
        """(computation, instruction) of each while (as its body), fusion or call that runs `callee`,
        from an index of the whole module made at the first question (a module of thousands of
        instructions is asked once for each collective's operand chain)."""
        if self._sites is None:
            self._sites = {}
            for comp in self.computations.values():
                for inst in comp.instructions.values():
                    if inst.opcode in ("while", "fusion", "call"):
                        for name in dict.fromkeys(
                            m.group("name") for m in _RUNS_RE.finditer(inst.attributes)
                        ):
                            self._sites.setdefault(name, []).append((comp.name, inst))
        return self._sites.get(callee, [])

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


def instruction_callees(inst: Instruction) -> Iterator[tuple[str, str]]:
    """(kind, callee) for every computation one instruction calls: body, condition, calls, branch..."""
    return iter(inst.callees)


def parse_module(hlo_text: str) -> HloModuleText:
    """Split compiled HLO text into its computations and instructions.

    An instruction whose brackets a line leaves open goes on over the next lines (libtpu prints a
    Pallas kernel's `kernel_metadata` over three): they are read as one. Where the next line is
    plainly a new instruction, a header or the computation's end, the open one is read alone.
    """
    prologue: list[str] = []
    computations: dict[str, Computation] = {}
    entry = ""
    current: Computation | None = None
    pending: list[str] = []  # the lines so far of an instruction printed on several
    depth = 0  # the brackets they leave open
    for line in hlo_text.splitlines():
        if pending and (line.strip() == "}" or _NAME_RE.match(line) or _HEADER_RE.match(line)):
            assert current is not None
            _add(current, pending[0])  # never closed: the first line as it stands
            pending = []
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
        if pending:
            pending.append(line)
            depth += _depth(line)
            if depth > 0:
                continue
            line, pending = " ".join(pending), []
        elif line.startswith("}"):
            current = None
            continue
        elif _depth(line) > 0:  # an instruction that goes on below
            pending, depth = [line], _depth(line)
            continue
        _add(current, line)
    if pending and current is not None:
        _add(current, pending[0])
    return HloModuleText(prologue=prologue, computations=computations, entry=entry)


def _add(comp: Computation, line: str) -> None:
    inst = parse_instruction(line)
    if inst is not None:
        comp.instructions[inst.name] = inst
        if inst.is_root:
            comp.root = inst.name


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


def _depth(line: str) -> int:
    """Brackets a line opens and leaves open, outside quoted strings (0 for a whole instruction)."""
    bare = _STRING_RE.sub("", line) if '"' in line else line
    opened = bare.count("{") + bare.count("(") + bare.count("[")
    return opened - bare.count("}") - bare.count(")") - bare.count("]")


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
