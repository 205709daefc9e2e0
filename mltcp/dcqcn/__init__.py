"""MLTCP for RoCE: scale the NIC's DCQCN rate increase by F(bytes_ratio).

RDMA NICs run DCQCN in firmware, out of reach of eBPF, so MLTCP reaches them through
their configuration knobs, rewritten at iteration granularity. One module per job:

* :mod:`~mltcp.dcqcn.knobs` -- the knob table (units, ranges, defaults, sources);
* :mod:`~mltcp.dcqcn.backends` -- MLNX_OFED sysfs, upstream mlx5 debugfs, dry run;
* :mod:`~mltcp.dcqcn.counters` -- the RDMA transmit byte counter;
* :mod:`~mltcp.dcqcn.policy` -- F to knob values (rates or timer mode, presets);
* :mod:`~mltcp.dcqcn.snapshot` -- the on-disk snapshot and the restore;
* :mod:`~mltcp.dcqcn.tuner` -- the polling loop on :class:`mltcp.iteration.IterationTracker`;
* :mod:`~mltcp.dcqcn.commands` -- ``mltcp dcqcn ...``.

And the DCQCN model that checks what the tuner does, without a NIC:

* :mod:`~mltcp.dcqcn.modelparams` -- what it runs with (the knob table's values, switch marking);
* :mod:`~mltcp.dcqcn.model` -- DCQCN's reaction/notification points and ECN switches, stepped;
* :mod:`~mltcp.dcqcn.longflows` -- long-lived flows on one link (fairness, fixed F);
* :mod:`~mltcp.dcqcn.simulate` -- training jobs on it: the ``dcqcn`` backend.

``rdma/README.md`` is the user's guide.
"""
