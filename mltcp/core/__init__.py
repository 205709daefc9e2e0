"""The shared model: F, the iteration tracker, budgets, units, validation.

Pure Python (standard library only at import), so every layer can use it: the host
datapath renders it into BPF maps, the ns-3 classes mirror it in C++, the DCQCN tuner
maps F onto NIC knobs, and the lab's models compute with it.  Nothing here touches the
kernel, a NIC or a file.
"""
