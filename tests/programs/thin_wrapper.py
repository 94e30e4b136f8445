"""A thin script over a model in another of the user's files, as people write one to try a model:
every collective is the model's, and its line is in the model's file, not in this one.

    shardcli inspect tests/programs/thin_wrapper.py:train_step \\
        --inputs tests/programs/thin_wrapper.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

from typing import Any

import equinox_scanned as model


def train_step(*args: Any) -> Any:
    return model.train_step(*args)


def inputs(mesh: Any) -> tuple[Any, ...]:
    return model.inputs(mesh)
