"""The ``hosts`` backend's machinery: real training hosts reached over SSH.

``inventory`` (the hosts file), ``ssh`` (one shared OpenSSH connection per host).
"""
