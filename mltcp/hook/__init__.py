"""The training-loop hook: what a training script imports to tell mltcp its iterations.

MLTCP's datapath finds a job's iterations on the wire (bytes against a budget, idle
gaps).  This package gives the ground truth from inside the training loop:

* **records**: one JSON line per iteration and rank (start, communication start and
  end, end, gradient bytes, buckets; CLOCK_MONOTONIC and wall-clock seconds), what the
  lab compares the datapath's count with and builds a real run's trace from
  (:mod:`mltcp.hook.records`);
* **the communication phase** of each iteration: marked by the loop
  (``comm_begin()``/``comm_end()``/``add_bytes()``), or seen by a DDP communication hook
  or FSDP's reduce-scatter (:mod:`mltcp.hook.torch_comm`);
* **an explicit end-of-iteration signal** to the datapath, optional, through the mltcp
  agent's Unix socket, without root (:mod:`mltcp.hook.signalling`).  A failed signal
  never stops training: it is counted in the records.

Only the standard library and :mod:`mltcp.core` are imported here (torch only when a
model is attached), so importing the hook costs nothing.  Two lines activate it from the
environment (``MLTCP_HOOK_OUT``, ``MLTCP_JOB``, ``MLTCP_HOOK_SIGNAL``; see
:mod:`mltcp.hook.env`)::

    from mltcp import hook
    h = hook.from_env(); h.attach_ddp(model)      # after init_process_group and DDP(...)
    for batch in data:
        with h.iteration():
            ...forward, backward, optimizer step...

docs/hook.md has the record format, the signal and the FSDP and CUDA details.
"""

from mltcp.hook.iteration import HookStats, IterationHook, from_env
from mltcp.hook.records import SCHEMA, IterationHookRecord, read_records
from mltcp.hook.signalling import AgentClient, SignalFailed

__all__ = ["SCHEMA", "AgentClient", "HookStats", "IterationHook", "IterationHookRecord",
           "SignalFailed", "from_env", "read_records"]
