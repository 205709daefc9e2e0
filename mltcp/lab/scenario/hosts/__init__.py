"""The ``hosts`` backend's machinery: real training hosts reached over SSH.

``inventory`` (the hosts file), ``ssh`` (one shared OpenSSH connection per host),
``remote`` (what the backend asks each host: facts, doctor, its own mltcp as JSON).
"""
