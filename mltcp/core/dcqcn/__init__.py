"""What F means for a RoCE NIC: the DCQCN knob table and the policy that scales it.

Shared by the host's tuner (:mod:`mltcp.host.dcqcn`), which writes the knobs, and the
lab's DCQCN model (:mod:`mltcp.lab.models.dcqcn`), which runs with them.
"""
