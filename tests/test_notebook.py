"""examples/quickstart.ipynb runs in a real Jupyter kernel and shows the pictures and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

nbformat = pytest.importorskip("nbformat", reason="the notebook extra: pip install -e '.[notebook]'")
nbclient = pytest.importorskip("nbclient", reason="the notebook extra: pip install -e '.[notebook]'")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return data.get("text/plain", "") + data.get("text/html", "")


def test_the_quickstart_notebook_runs_and_shows_the_picture_and_the_report():
    nb = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    )
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not any(o.get("output_type") == "error" for o in c.outputs) for c in code)
    show, report, facts = ("".join(_text(o) for o in c.outputs) for c in code[1:4])
    assert "x: spec data,model" in show and "dev 7" in show  # the picture, every device in it
    for text in ("arguments and results", "collectives the compiler inserted", "all-reduce", "mlp.py"):
        assert text in report, text
    assert any("text/html" in o.get("data", {}) for o in code[2].outputs)  # rich's Jupyter face
    assert "no classic sharding mistakes found" in facts and "MemoryUse(argument_bytes=" in facts
