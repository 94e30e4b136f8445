"""Small optimized GPU modules, written as XLA prints them, for the module reader's tests.

`gpu_module()` is a scheduled module of one while loop (a counter to `bound`, its trip count in
its backend config) and one cuBLAS GEMM, 2x64x16 by 2x16x32 (131,072 FLOPs); each keyword swaps
one part for a hostile one. `call_chain()` is a module whose computations each call the next twice.
"""

from __future__ import annotations

GEMM_CONFIG = (
    '{"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"dot_dimension_numbers":'
    '{"lhs_batch_dimensions":["0"],"lhs_contracting_dimensions":[CONTRACTING],'
    '"rhs_batch_dimensions":["0"],"rhs_contracting_dimensions":["1"]}}}'
)
GEMM_FLOPS = 2 * (2 * 64 * 32) * 16


def gpu_module(
    *,
    header: str = "",
    trips: str = "4",
    bound: str = "4",
    body: str = "body",
    lhs: str = "f32[2,64,16]",
    contracting: str = '"2"',
    gemm_config: str | None = None,
    extra: str = "",
    groups: str | None = None,
    partitions: str | None = None,
    loop: bool = True,
) -> str:
    """The module's text, with the given parts swapped in."""
    config = gemm_config if gemm_config is not None else GEMM_CONFIG.replace("CONTRACTING", contracting)
    parts = f", num_partitions={partitions}" if partitions is not None else ""
    reduce = ""
    if groups is not None:
        reduce = (
            f"  %ar = f32[8]{{0}} all-reduce(%x.0), channel_id=1, replica_groups={groups}, "
            "use_global_device_ids=true, to_apply=%sum\n"
        )
    looped = (
        "  %zero = s32[] constant(0)\n  %init = (s32[], f32[8]{0}) tuple(%zero, %x.0)\n"
        f"  %loop = (s32[], f32[8]{{0}}) while(%init), condition=%cond, body=%{body}, "
        f'backend_config={{"known_trip_count":{{"n":"{trips}"}}}}\n'
    )
    layout = "{(f32[2,64,16]{2,1,0}, f32[2,16,32]{2,1,0}, f32[8]{0})->f32[2,64,32]{2,1,0}}"
    gemm = (
        "  %gemm = (f32[2,64,32]{2,1,0}, s8[1024]{0}) custom-call(%a, %b), "
        f'custom_call_target="__cublas$lt$matmul", backend_config={config}'
    )
    return f"""HloModule jit_f, is_scheduled=true{parts}, entry_computation_layout={layout}{header}

%sum (a.2: f32[], b.2: f32[]) -> f32[] {{
  %a.2 = f32[] parameter(0)
  %b.2 = f32[] parameter(1)
  ROOT %s.2 = f32[] add(%a.2, %b.2)
}}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %p = (s32[], f32[8]{{0}}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8]{{0}} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[8]{{0}} add(%x, %x)
  ROOT %t = (s32[], f32[8]{{0}}) tuple(%next, %y)
}}

%cond (p.1: (s32[], f32[8])) -> pred[] {{
  %p.1 = (s32[], f32[8]{{0}}) parameter(0)
  %i.1 = s32[] get-tuple-element(%p.1), index=0
  %n = s32[] constant({bound})
  ROOT %lt = pred[] compare(%i.1, %n), direction=LT
}}

ENTRY %main (a: f32[2,64,16], b: f32[2,16,32], x.0: f32[8]) -> f32[2,64,32] {{
  %a = {lhs}{{2,1,0}} parameter(0)
  %b = f32[2,16,32]{{2,1,0}} parameter(1)
  %x.0 = f32[8]{{0}} parameter(2)
{reduce}{looped if loop else ""}{gemm}
{extra}  ROOT %r = f32[2,64,32]{{2,1,0}} get-tuple-element(%gemm), index=0
}}
"""


def call_chain(depth: int, fanout: int = 2) -> str:
    """A module whose computation k calls computation k+1 `fanout` times (`call`), `depth` deep: a
    walk that follows every call path visits the last one fanout**depth times."""
    lines = [
        "HloModule jit_chain, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[8]{0}}",
        "",
        f"%c{depth} (p{depth}: f32[8]) -> f32[8] {{",
        f"  %p{depth} = f32[8]{{0}} parameter(0)",
        f"  ROOT %r{depth} = f32[8]{{0}} add(%p{depth}, %p{depth})",
        "}",
        "",
    ]
    for k in range(depth - 1, -1, -1):
        entry = "ENTRY " if k == 0 else ""
        lines += [f"{entry}%c{k} (p{k}: f32[8]) -> f32[8] {{", f"  %p{k} = f32[8]{{0}} parameter(0)"]
        previous = f"%p{k}"
        for j in range(fanout):
            lines.append(f"  %k{k}.{j} = f32[8]{{0}} call({previous}), to_apply=%c{k + 1}")
            previous = f"%k{k}.{j}"
        lines += [f"  ROOT %r{k} = f32[8]{{0}} add({previous}, %p{k})", "}", ""]
    return "\n".join(lines)
