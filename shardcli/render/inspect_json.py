"""`shardcli inspect --format json` (and `shardcli.inspect`'s `json()`): the report as one document,
its keys named in `results.bodies`."""

from __future__ import annotations

from typing import Any

from shardcli.analysis.findings import Finding, finding_text
from shardcli.analysis.fixes import Figures, Fix
from shardcli.analysis.summary import CollectiveGroup, group_collectives
from shardcli.program.inspect import ArrayFact, InspectResult
from shardcli.program.step_run import Donation
from shardcli.render import jsonout
from shardcli.render.program import (
    hardware_json,
    model_json,
    program_json,
    step_time_json,
    verdict_json,
)
from shardcli.results import bodies


def array_json(fact: ArrayFact) -> dict[str, Any]:
    return bodies.INSPECT_ARRAY(
        name=fact.name,
        dtype=fact.dtype,
        shape=list(fact.shape),
        spec=jsonout.spec_json(fact.entries),
        bytes=fact.bytes_global,
        bytes_per_device=fact.bytes_per_device,
        replication=fact.layout.replication,
    )


def group_json(g: CollectiveGroup) -> dict[str, Any]:
    return bodies.INSPECT_COLLECTIVE_GROUP(
        kind=g.kind,
        mesh_axes=list(g.mesh_axes) if g.mesh_axes is not None else None,
        source=g.source,
        op=g.op,
        count=g.count,
        runs=g.runs,
        runs_known=g.runs_known,
        sent_bytes=g.sent_bytes,
        result_bytes=g.result_bytes,
        role=g.role,
        exposed_s=g.exposed_s,
        hidden_s=g.hidden_s,
    )


def finding_json(f: Finding) -> dict[str, Any]:
    return bodies.FINDING(
        kind=f.kind,
        message=finding_text(f),
        count=f.count,
        paths=list(f.paths),
        source=f.source,
        fix=fix_json(f.fix) if f.fix is not None else None,
    )


def fix_json(fix: Fix) -> dict[str, Any]:
    return bodies.FIX(
        change=fix.change.what,
        arguments=[{"path": name, "spec": jsonout.spec_json(entries)} for name, entries in fix.change.specs],
        jax=list(fix.change.jax_lines()),
        command=fix.command,
        before=figures_json(fix.before),
        checked=figures_json(fix.checked),
    )


def figures_json(f: Figures) -> dict[str, Any]:
    return bodies.FIX_FIGURES(
        total_bytes=f.total_bytes,
        argument_bytes=f.argument_bytes,
        temp_bytes=f.temp_bytes,
        collectives=f.collectives,
        sent_bytes=f.sent_bytes,
        step_s=f.step_s,
    )


def inspect_json(result: InspectResult) -> dict[str, Any]:
    hw = result.hardware
    return jsonout.document(
        "inspect",
        result.session,
        {
            "target": result.target,
            "compile_target": result.session.runtime.target,
            "compile_options": compile_options_json(result),
            "module": module_json(result),
            "arguments": [array_json(a) for a in result.arguments],
            "results": [array_json(r) for r in result.results],
            "program": program_json(result.analysis),
            "model": model_json(result.model),
            "hardware": hardware_json(hw),
            "fit": verdict_json(result.fit),
            "step_time": step_time_json(result.step),
            "collective_groups": [
                group_json(g)
                for g in group_collectives(
                    result.analysis.collectives if result.analysis else (),
                    result.step.exposure if result.step is not None else (),
                )
            ],
            "findings": [finding_json(f) for f in result.findings],
            "lower_s": result.lower_s,
            "compile_s": result.compile_s,
            "timing": jsonout.timing_json(result.timing),
            "donation": donation_json(result.donation),
        },
    )


def module_json(result: InspectResult) -> dict[str, Any] | None:
    m = result.module
    if m is None:
        return None
    return bodies.INSPECT_MODULE(
        path=m.path,
        platform=m.platform,
        partitions=m.partitions,
        argument_count=m.argument_count,
        argument_bytes_per_device=m.argument_bytes,
    )


def compile_options_json(result: InspectResult) -> dict[str, Any] | None:
    """What the compile changed from JAX's defaults ({} for none); None for a module read from a file."""
    if result.module is not None:
        return None
    from shardcli.analysis.target import compiler_options
    from shardcli.hardware.targets import parse_target

    name = result.session.runtime.target
    return (compiler_options(parse_target(name)) if name else None) or {}


def donation_json(d: Donation | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return bodies.DONATION(
        method=d.method,
        donated_arrays=d.donated,
        fed_back_arrays=d.fed_back,
        fed_back_by=d.written_back_by if d.fed_back else None,
        copied_arrays=d.copied,
    )
