"""MLTCP for RoCE on a host: tune the NIC's DCQCN rate increase by F(bytes_ratio).

RDMA NICs run DCQCN in firmware, out of reach of eBPF, so MLTCP reaches them through
their configuration knobs, rewritten at iteration granularity:

* :mod:`~mltcp.host.dcqcn.backends` -- MLNX_OFED sysfs, upstream mlx5 debugfs, dry run;
* :mod:`~mltcp.host.dcqcn.counters` -- the RDMA transmit byte counter;
* :mod:`~mltcp.host.dcqcn.snapshot` -- the on-disk snapshot and the restore;
* :mod:`~mltcp.host.dcqcn.tuner` -- the polling loop on the reference iteration tracker.

The knob table and F-to-knob policy are :mod:`mltcp.core.dcqcn`; the command line is
:mod:`mltcp.cli.dcqcn`; ``rdma/`` is the deployment kit and guide.
"""
