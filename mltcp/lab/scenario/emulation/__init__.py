"""The emulated testbed: hosts in network namespaces, real kernel TCP, the real datapath."""
