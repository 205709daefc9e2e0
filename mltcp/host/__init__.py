"""What runs on a training host: the eBPF datapath and its control plane.

Build and load the congestion modules (:mod:`build`, :mod:`libbpf`, :mod:`datapath`),
their maps (:mod:`maps`), jobs and their classification (:mod:`jobs`), the agent,
telemetry and doctor, and the RoCE tuner (:mod:`mltcp.host.dcqcn`).  Never imports
:mod:`mltcp.lab`, and never numpy or matplotlib: a host needs neither to run MLTCP.
"""
