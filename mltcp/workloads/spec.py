"""What the DDP workload runs: its models' names and sizes and its flags, checked.

The definitions live in :mod:`mltcp.core.workload` (torch-free, standard library only),
so that the scenario checks a job's ``workload`` table by these very rules when it is
read, not the hosts after SSH and torchrun; this module is the workload's name for them.
``--help`` and a bad flag answer at once, without PyTorch: one line naming the flag and
the fix (exit 2).
"""

from __future__ import annotations

from mltcp.core.workload import (
    BACKENDS,
    CNNS,
    MAX_RANK_MEMORY_BYTES,
    MAX_START_AHEAD_S,
    MAX_WORKERS,
    MODELS,
    PRESETS,
    PROG,
    RESNETS,
    TRANSFORMER,
    VGGS,
    ModelSpec,
    RunSpec,
    TransformerSize,
    check_memory,
    fail,
    go_moment,
    memory_bytes,
    parameters,
    parse,
    parser,
    start_time,
)

__all__ = ["BACKENDS", "CNNS", "MAX_RANK_MEMORY_BYTES", "MAX_START_AHEAD_S", "MAX_WORKERS",
           "MODELS", "PRESETS", "PROG", "RESNETS", "TRANSFORMER", "VGGS", "ModelSpec",
           "RunSpec", "TransformerSize", "check_memory", "fail", "go_moment", "memory_bytes",
           "parameters", "parse", "parser", "start_time"]
