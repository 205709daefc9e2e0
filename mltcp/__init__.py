"""mltcp: congestion control that is aware of distributed ML training.

MLTCP scales a flow's window growth by F(bytes_ratio), the fraction of the job's
per-iteration bytes already sent, so that jobs sharing a link slide their
communication phases apart until they interleave.
"""

__version__ = "0.1.0"
