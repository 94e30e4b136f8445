"""The constant an operand carries: through copies, asynchronous copies, bitcasts, tuples and the
loop-invariant elements of while loops (into a loop's body, and out of a loop's results).

XLA hoists a loop body's constants out of the loop (the TPU compiler does for a scanned layer's
kernel operands): inside the body the value is element i of the loop's parameter, and the while's
operand tuple holds the constant at element i. No JAX import: tested on strings.
"""

from __future__ import annotations

import re

from shardcli.analysis.hlo.module import Computation, HloModuleText, Instruction

_PASS = frozenset({"copy", "bitcast", "copy-start", "copy-done", "reshape"})
_INDEX_RE = re.compile(r"\bindex=(?P<i>\d{1,18})(?!\d)")
_BODY_RE = re.compile(r"\bbody=%(?P<name>[\w.\-]+)")
_STEPS = 64  # instructions followed at most


Callers = dict[str, list[tuple[Computation, Instruction]]]


def while_callers(module: HloModuleText) -> Callers:
    """Each while body's callers: body name -> [(the computation holding the while, the while)]
    (XLA may share one body between loops whose bodies were the same)."""
    callers: Callers = {}
    for comp in module.computations.values():
        for inst in comp.instructions.values():
            body = _BODY_RE.search(inst.attributes) if inst.opcode == "while" else None
            if body is not None:
                callers.setdefault(body.group("name"), []).append((comp, inst))
    return callers


def constant_of(
    module: HloModuleText,
    comp: Computation,
    name: str,
    callers: Callers | None = None,
) -> Instruction | None:
    """The constant instruction whose value `name` (in `comp`) is, or None where it is computed.

    A loop parameter's element is followed to the while's operand only where the body passes it on
    unchanged (its root's element i is that same element): a value the loop updates is no constant.
    A body that several loops run gives a constant only where every loop hands it the same one.
    """
    callers = while_callers(module) if callers is None else callers
    return _follow(module, comp, name, (), callers, _STEPS)


def _follow(
    module: HloModuleText,
    comp: Computation,
    name: str,
    path: tuple[int, ...],
    callers: Callers,
    steps: int,
) -> Instruction | None:
    """The constant at tuple element `path` (outermost first) of `name`."""
    for step in range(steps):
        inst = comp.instructions.get(name)
        if inst is None:
            return None
        if inst.opcode == "constant":
            return None if path else inst
        if inst.opcode in _PASS and inst.operands:
            name = inst.operands[0]
        elif inst.opcode == "get-tuple-element" and inst.operands:
            index = _INDEX_RE.search(inst.attributes)
            if index is None:
                return None
            name, path = inst.operands[0], (int(index.group("i")), *path)
        elif inst.opcode == "tuple" and path:
            if path[0] >= len(inst.operands):
                return None
            name, path = inst.operands[path[0]], path[1:]
        elif inst.opcode == "while" and path and inst.operands:
            # a loop's result element is its operand's where the body passes it on
            body = _BODY_RE.search(inst.attributes)
            looped = module.computations.get(body.group("name")) if body else None
            if looped is None or not _passed_on(looped, path[0]):
                return None
            name = inst.operands[0]
        elif inst.opcode == "parameter" and path and comp.name in callers:
            if not _passed_on(comp, path[0]):
                return None
            found = [
                _follow(module, caller, loop.operands[0], path, callers, steps - step - 1)
                if loop.operands
                else None
                for caller, loop in callers[comp.name]
            ]
            first = found[0]
            same = first is not None and all(f is not None and _same(f, first) for f in found)
            return first if same else None
        else:
            return None
    return None


def _same(a: Instruction, b: Instruction) -> bool:
    """Whether two constants hold the same value as far as the text shows (an elided one only
    where it is the same instruction)."""
    return a.name == b.name or (a.literal == b.literal and "..." not in a.literal)


def _passed_on(body: Computation, index: int) -> bool:
    """Whether the loop body's root returns its parameter's element `index` unchanged."""
    root = body.instructions.get(body.root or "")
    if root is None or root.opcode != "tuple" or index >= len(root.operands):
        return False
    element = body.instructions.get(root.operands[index])
    if element is None or element.opcode != "get-tuple-element" or not element.operands:
        return False
    source = body.instructions.get(element.operands[0])
    found = _INDEX_RE.search(element.attributes)
    same = found is not None and int(found.group("i")) == index
    return source is not None and source.opcode == "parameter" and same


def integer_values(literal: str) -> list[int] | None:
    """The integers of a printed constant's literal (`{ { 1, 0 }, { 2, 1 } }`), or None where XLA
    elided them (`{...}`) or the literal is not integers."""
    if "..." in literal:
        return None
    text = literal.replace("{", " ").replace("}", " ").replace(",", " ").split()
    try:
        return [int(v) for v in text]
    except ValueError:
        return None
