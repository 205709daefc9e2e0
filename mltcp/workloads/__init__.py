"""Training workloads that carry real collective traffic (PyTorch; the ``torch`` extra).

``ddp``: data-parallel training of real model architectures on synthetic data, run under
``torchrun``; what the ``hosts`` backend starts on each host.
"""
