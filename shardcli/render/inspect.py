"""Rendering `shardcli inspect` (and `shardcli.inspect`'s report): rich for people, JSON for scripts."""

from __future__ import annotations

import re

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardcli.analysis.arguments import shown_path
from shardcli.analysis.findings import Finding, finding_text
from shardcli.analysis.fixes import Fix
from shardcli.analysis.roles import ROLES
from shardcli.analysis.summary import CollectiveGroup, group_collectives, rank_arguments
from shardcli.program.inspect import InspectResult
from shardcli.program.module import PLATFORM_WORDS
from shardcli.program.step_run import Donation
from shardcli.render import human, jsonout
from shardcli.render.console import format_flops, format_seconds, make_console, prints_here, show_warnings
from shardcli.render.inspect_json import inspect_json
from shardcli.render.layout import Clauses, DataTable
from shardcli.render.program import (
    collective_where,
    collectives_table,
    cost_model_text,
    memory_clauses,
    memory_text,
    step_clauses,
    step_time_text,
    verdict_text,
)
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes

FORMATS = ("table", "json")
# The full view (--wide, -v): pictures for at most this many arguments and results; the table lists
# every one.
MAX_PICTURES = 6
# The first screen: at most this many collective groups, arguments and findings (the full view and
# JSON hold them all).
TOP_GROUPS = 10
TOP_ARGUMENTS = 8
TOP_FINDINGS = 5


def arrays_table(result: InspectResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    # Left out first where narrow: the global bytes, then the copies.
    priorities = {"bytes": 2, "copies": 1}
    for name in ("", "name", "type", "spec", "bytes", "per device", "copies"):
        table.add_column(
            name,
            justify="right" if name in ("bytes", "per device", "copies") else "left",
            priority=priorities.get(name, 0),
        )
    for kind, facts in (("arg", result.arguments), ("result", result.results)):
        for f in facts:
            table.add_row(
                kind,
                shown_path(f.name),
                f"{f.dtype}[{','.join(map(str, f.shape))}]",
                f.spec,
                format_bytes(f.bytes_global),
                format_bytes(f.bytes_per_device),
                str(f.layout.replication),
            )
    return table


def report_renderable(
    result: InspectResult,
    *,
    quiet: bool = False,
    pictures: bool = True,
    verbose: bool = False,
    full: bool = True,
) -> RenderableType:
    """The report as one renderable, the same for the terminal and for Jupyter.

    Args:
        result: what inspect found.
        quiet: no header, no pictures.
        pictures: the full view's pictures of the first arguments' tiles.
        verbose: the header's versions and process count too.
        full: every argument, result and collective (the Python API's report; the CLI's --wide
            and -v). False: the first screen (the CLI's default view): the answer first, then the
            top groups, arguments and findings.
    """
    parts: list[RenderableType] = []
    if not quiet:
        parts.append(human.header(result.session, _header_facts(result), verbose=verbose))
    parts.extend(full_view(result, quiet=quiet, pictures=pictures) if full else first_screen(result))
    return Group(*parts)


def full_view(result: InspectResult, *, quiet: bool, pictures: bool) -> list[RenderableType]:
    """Everything, in order: every argument and result (the first ones' tile pictures), every
    collective, the figures per device, the cost model, then the verdict and every finding."""
    parts: list[RenderableType] = []

    def section(title: str, body: RenderableType) -> None:
        parts.extend([Text(""), Text(title, style="bold underline"), body])

    section("arguments and results", arrays_table(result))
    if pictures and not quiet:
        for f in (*result.arguments, *result.results)[:MAX_PICTURES]:
            if f.shape:
                section(
                    f"{shown_path(f.name)}: {f.dtype}{list(f.shape)}, spec {f.spec}",
                    human.sharding_picture(f.layout),
                )
    a = result.analysis
    if a is not None:
        rows = [(role_label(c.role), c) for c in a.collectives]
        section("collectives the compiler inserted", collectives_table(rows, label="role"))
        section("per device", Group(memory_clauses("memory", a.memory, style=""), _work_clauses(result)))
    if not quiet and result.model is not None:
        section(
            "cost model (roofline, per device)",
            cost_model_text(
                result.model,
                result.hardware,
                "the program",
                flops_known=getattr(result.analysis, "flops", None) is not None,
            ),
        )
    if result.timing is not None:
        section("run on generated inputs", _timing_clauses(result))
    parts.append(Text(""))
    for line in a.missing if a is not None else ():
        parts.append(Text(f"missing: {line}", style="yellow"))
    if result.step is not None:
        parts.append(step_time_text(result.step))
    if result.fit is not None:
        parts.append(verdict_text(result.fit))
    parts.extend(_findings_lines(result, result.findings, full=True))
    return parts


def _header_facts(result: InspectResult) -> dict[str, str]:
    m = result.module
    if m is not None:
        seen = PLATFORM_WORDS.get(m.platform or "", "no mark of its platform")
        return {
            "module": m.path,
            "compiled": f"elsewhere (XLA's optimized HLO for {m.partitions} device(s) of {seen}); read here",
        }
    facts = {
        "program": result.target,
        "compiled": (
            f"from abstract shapes: lowered in {result.lower_s * 1e3:.0f} ms, compiled in "
            f"{result.compile_s * 1e3:.0f} ms; nothing of the arguments' size was allocated"
            if result.analysis is not None
            else f"lowered in {result.lower_s * 1e3:.0f} ms; the TPU compiler refused it as too big"
        ),
    }
    options = compile_options_words(result.session.runtime.target)
    if options is not None:  # an option that changes the figures is on the screen
        facts["options"] = options
    return facts


def compile_options_words(target_name: str | None) -> str | None:
    """The compile options a --target changes from JAX's defaults, with why (a GPU's), or None."""
    from shardcli.analysis.target import compile_options_words as words
    from shardcli.hardware.targets import parse_target

    return words(parse_target(target_name)) if target_name else None


def first_screen(result: InspectResult) -> list[RenderableType]:
    """The answer first, on one screen for any program: memory and the fit, the step time, the
    collectives by cause, the largest arguments, the findings, each cut to its top rows."""
    parts: list[RenderableType] = [Text(""), _answer(result)]
    a = result.analysis
    for line in a.missing if a is not None else ():
        parts.append(Clauses(figure_words(f"missing: {line}"), " ", "yellow"))
    if a is not None:
        groups = group_collectives(a.collectives)
        shown = groups[:TOP_GROUPS]
        title = Clauses(
            [
                f"collectives: {_count(len(a.collectives), 'op')} in {_count(len(groups), 'group')} "
                "(kind, mesh axes, role, line)",
                "by bytes sent",
            ],
            sep=", ",
            style="bold",
        )
        parts.extend([Text(""), title, groups_table(shown)])
        if len(groups) > len(shown):
            rest = groups[len(shown) :]
            parts.append(
                Clauses(
                    [
                        f"and {_count(len(rest), 'more group')}",
                        f"{format_bytes(sum(g.sent_bytes for g in rest))} sent per device",
                        "--wide lists every collective",
                    ],
                    sep="; ",
                    style="dim",
                )
            )
    if result.module is None:
        parts.extend([Text(""), *_arguments_part(result)])
    if result.timing is not None:
        parts.extend([Text(""), Text("run on generated inputs", style="bold"), _timing_clauses(result)])
    parts.append(Text(""))
    shown_findings = result.findings[:TOP_FINDINGS]
    parts.extend(_findings_lines(result, shown_findings))
    if len(result.findings) > len(shown_findings):
        more = len(result.findings) - len(shown_findings)
        parts.append(Text(f"and {_count(more, 'more finding')} (--wide shows them all)", style="yellow"))
    return parts


def figure_words(text: str) -> list[str]:
    """The words of a sentence, a figure kept with the word after it (`768 B`, `4 runs`), so that
    a line breaks between words but never between a figure and its unit."""
    words = text.split(" ")
    out: list[str] = []
    for word in words:
        if out and re.fullmatch(r"[(]?[\d.,]+", out[-1]):
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _answer(result: InspectResult) -> RenderableType:
    """`memory`, `fits` and `step time` lines: what the program needs of each device and how long
    a step would take."""

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    a = result.analysis
    if result.module is not None:
        m = result.module
        grid.add_row(
            "memory",
            Clauses(
                [
                    f"arguments {format_bytes(m.argument_bytes)} per device",
                    _count(m.argument_count, "array"),
                    "temporaries: only a compile knows",
                ],
                sep="; ",
            ),
        )
    elif a is not None:
        grid.add_row("memory", Clauses(memory_text(a.memory).split(", "), sep=", "))
    if result.fit is not None:
        grid.add_row("verdict", verdict_text(result.fit))
    if a is not None and a.kernels.calls and a.flops is not None:
        calls = _count(sum(c.runs for c in a.kernels.calls), "library kernel call")
        kernels = format_flops(a.kernels.flops, "FLOP")
        xla = format_flops(a.xla_flops, "FLOP") if a.xla_flops is not None else "no figure"
        grid.add_row(
            "FLOPs",
            Clauses(
                [
                    f"{format_flops(a.flops, 'FLOP')} per device",
                    f"{kernels} in {calls} ({', '.join(a.kernels.libraries)})",
                    f"XLA's cost analysis: {xla}, without them",
                ],
            ),
        )
    clauses = _step_clauses(result)
    if clauses:
        grid.add_row("step time", Clauses(clauses))
    return grid


def _step_clauses(result: InspectResult) -> list[str]:
    """The step-time estimate with its dominant term first, then its terms; where the device kind
    has no figures, why, and the FLOPs and bytes it would take."""
    a, step = result.analysis, result.step
    if a is None:
        return []
    if step is not None and step.estimate_s is not None:
        clauses = step_clauses(step)
        at_least = "at least " if any("unknown trip" in n for n in step.notes) else ""
        return [at_least + clauses[0], *clauses[1:]]
    flops = format_flops(a.flops, "FLOP") if a.flops is not None else "FLOPs unknown"
    why = (
        step.math.source
        if step is not None
        else f"no figures for {result.session.runtime.device_kind!r}: shardcli calibrate measures them"
    )
    return [f"unknown ({why})", f"{flops} and {format_bytes(a.sent_bytes)} sent per device"]


ACTIONABLE = frozenset(name for name, role in ROLES.items() if role.actionable)


def role_label(role: str | None) -> str:
    """A role as the tables show it (`FSDP gather`); `?` where none was assigned."""
    return ROLES[role].label if role in ROLES else "?"


def groups_table(groups: tuple[CollectiveGroup, ...]) -> RenderableType:
    """One row per group of collectives: kind, mesh axes, how many, how often, what each device
    sends in one step, and the JAX operation and user's line they come from."""
    if not groups:
        return Text("none: every device computes its block from what it holds", style="dim")
    table = DataTable(box=None, header_style="bold")
    for name, priority in (
        ("collective", 0),
        ("mesh axes", 0),
        ("role", 0),
        ("ops", 2),
        ("runs", 3),
        ("sent/device", 0),
        ("from", 1),
    ):
        table.add_column(
            name, justify="right" if name in ("ops", "runs", "sent/device") else "left", priority=priority
        )
    for g in groups:
        table.add_row(
            g.kind,
            g.axes_text,
            Text(role_label(g.role), style="yellow" if g.role in ACTIONABLE else ""),
            f"{g.count:,}",
            f"{g.runs:,}" if g.runs_known else f"{g.runs:,}?",
            format_bytes(g.sent_bytes),
            collective_where(g.op, g.source),
        )
    return table


def _compiled_arguments_clause(result: InspectResult, total: int) -> str:
    """Why the memory line's arguments differ from the leaves' sum, where they differ by over 1%:
    the compiler's layouts pad them to its tiles (a TPU's), or jit left out the ones the program does
    not use."""
    memory = result.analysis.memory if result.analysis is not None else None
    if memory is None or not total or abs(memory.argument_bytes - total) <= total // 100:
        return ""
    why = (
        "the compiler's layouts pad them to its tiles"
        if memory.argument_bytes > total
        else "jit leaves out the arguments the program does not use"
    )
    return f" ({format_bytes(memory.argument_bytes)} as compiled: {why})"


def _arguments_part(result: InspectResult) -> list[RenderableType]:
    """The largest arguments by pytree path with their specs, a line for the rest, one for results."""
    ranking = rank_arguments(result.arguments, TOP_ARGUMENTS)
    title = (
        f"arguments: {_count(ranking.total, 'leaf')}".replace("leafs", "leaves")
        + f", {format_bytes(ranking.total_bytes_per_device)} per device"
        + _compiled_arguments_clause(result, ranking.total_bytes_per_device)
        + "; the largest"
    )
    table = DataTable(box=None, header_style="bold")
    for name, priority in (("argument", 0), ("spec", 0), ("per device", 0), ("type", 1), ("copies", 2)):
        table.add_column(
            name,
            justify="right" if name in ("per device", "copies") else "left",
            priority=priority,
            shorten=human.paths_in_cells if name == "argument" else None,
        )
    for f in ranking.largest:
        table.add_row(
            shown_path(f.name),
            f.spec,
            format_bytes(f.bytes_per_device),
            f"{f.dtype}[{','.join(map(str, f.shape))}]",
            str(f.layout.replication),
        )
    parts: list[RenderableType] = [Text(title, style="bold"), table]
    if ranking.rest:
        parts.append(
            Text(
                f"and {ranking.rest:,} more: "
                f"{format_bytes(ranking.rest_bytes_per_device)} per device (--wide lists them)",
                style="dim",
            )
        )
    if result.results:
        per_device = sum(r.bytes_per_device for r in result.results)
        what = _count(len(result.results), "leaf").replace("leafs", "leaves")
        parts.append(
            Text(f"results: {what}, {format_bytes(per_device)} per device (--wide lists them)", style="dim")
        )
    return parts


def _work_clauses(result: InspectResult) -> RenderableType:
    a = result.analysis
    assert a is not None
    trips = f" (at least: {len(a.unknown_trips)} loop(s) of unknown trips)" if a.unknown_trips else ""
    once = (
        f" (every loop trip; XLA's cost_analysis, each loop once: {a.xla_flops:,.0f})"
        if a.loops and a.xla_flops is not None and a.flops != a.xla_flops and not trips
        else ""
    )
    flops = f"{a.flops:,.0f}{trips or once}" if a.flops is not None else "unknown"
    accessed = format_bytes(a.bytes_accessed) + trips if a.bytes_accessed is not None else "unknown"
    return Clauses(
        [f"FLOPs {flops}", f"bytes accessed {accessed}", f"sent by collectives {format_bytes(a.sent_bytes)}"]
    )


def _timing_clauses(result: InspectResult) -> RenderableType:
    assert result.timing is not None
    s = result.timing.stats
    return Clauses(
        [
            f"compile {human.compile_text(result.timing)}",
            f"p50 {human.format_duration(s.p50)}, min {human.format_duration(s.min)} "
            f"over {len(result.timing.samples)} iterations",
            *(donation_clauses(result.donation) if result.donation is not None else ()),
        ]
    )


def donation_clauses(d: Donation) -> list[str]:
    """How the donated arguments were given to each timed call; nothing where none is donated."""
    clauses = []
    if d.fed_back:
        by = (
            "written back into its objects by nnx.jit"
            if d.written_back_by == "nnx.jit"
            else "fed back from the results of the call before"
        )
        clauses.append(f"{_count(d.fed_back, 'donated array')} {by}, as a training loop does")
    if d.copied:
        clauses.append(f"{_count(d.copied, 'donated array')} copied afresh before each call, untimed")
    unused = d.donated - d.fed_back - d.copied
    if unused:
        clauses.append(f"{_count(unused, 'donated array')} the program does not consume, left as given")
    return clauses


def _findings_lines(
    result: InspectResult, findings: tuple[Finding, ...], *, full: bool = False
) -> list[RenderableType]:
    """One warning per finding (its count where it covers several), each with its checked fix
    (the whole command line in the full view), or that there is none."""
    parts: list[RenderableType] = []
    for finding in findings:
        times = f" x{finding.count}" if finding.count > 1 else ""
        parts.append(
            Clauses(figure_words(f"warning ({finding.kind}){times}: {finding_text(finding)}"), " ", "yellow")
        )
        if finding.fix is not None:
            parts.extend(_fix_lines(finding.fix, full=full))
        elif finding.no_fix is not None and full:
            parts.append(Clauses(figure_words(f"no fix offered: {finding.no_fix}"), " ", "dim", indent=2))
    if not result.findings and result.module is None:
        parts.append(Text("no classic sharding mistakes found", style="green"))
    return parts


def _fix_lines(fix: Fix, *, full: bool) -> list[RenderableType]:
    """`  fix: ...` (the change and its first flag), `  checked by a compile: ...` (before -> after),
    and in the full view the command line that applies it."""
    flags = fix.flags or tuple(f"--spec '{flag}'" for flag in fix.change.spec_flags())
    shown = flags[0] + (f" and {len(flags) - 1} more" if len(flags) > 1 else "")
    lines: list[RenderableType] = [
        Clauses(figure_words(f"fix: {fix.change.what}: {shown}"), " ", "green", indent=2),
        Clauses(["checked by a compile:", *fix_figure_clauses(fix)], " ", "green", indent=2),
    ]
    if full and fix.command is not None:
        lines.append(Clauses(fix.command.split(" "), " ", "green", indent=4))
    elif fix.command is not None:
        lines.append(Text("  --wide or --format json: the command that applies it", style="dim"))
    return lines


def fix_figure_clauses(fix: Fix) -> list[str]:
    """`memory 1.2 MiB -> 400 KiB per device,`, `sent 0 B -> 96 KiB,`, `step 2 us -> 1 us`."""
    a, b = fix.before, fix.checked
    clauses = []
    if not a.fits and b.total_bytes is not None:
        needed = f" (needs {format_bytes(a.total_bytes)})" if a.total_bytes is not None else ""
        clauses.append(f"memory does not fit{needed} -> {format_bytes(b.total_bytes)} per device, fits")
    elif a.total_bytes is not None and b.total_bytes is not None:
        clauses.append(f"memory {format_bytes(a.total_bytes)} -> {format_bytes(b.total_bytes)} per device")
    if (a.sent_bytes, a.collectives) == (b.sent_bytes, b.collectives):
        clauses.append(f"collectives unchanged ({a.collectives}, {format_bytes(a.sent_bytes)} sent)")
    else:
        clauses.append(
            f"sent {format_bytes(a.sent_bytes)} -> {format_bytes(b.sent_bytes)} by "
            f"{a.collectives} -> {b.collectives} collectives"
        )
    if a.reshard_bytes != b.reshard_bytes:
        clauses.append(f"resharded {format_bytes(a.reshard_bytes)} -> {format_bytes(b.reshard_bytes)}")
    if a.step_s is not None and b.step_s is not None:
        clauses.append(f"step {format_seconds(a.step_s)} -> {format_seconds(b.step_s)}")
    return [c + ("," if i < len(clauses) - 1 else "") for i, c in enumerate(clauses)]


def render_inspect(result: InspectResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(inspect_json(result), options)
        return
    console = make_console(options)
    console.print(
        report_renderable(
            result, quiet=options.quiet, verbose=options.verbose, full=options.wide or options.verbose
        )
    )
