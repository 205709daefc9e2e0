"""Training workloads that carry real collective traffic (PyTorch: the ``torch`` extra).

``ddp``: data-parallel training of real architectures (:mod:`.models`) on synthetic data
under ``torchrun``, every iteration marked by :mod:`mltcp.hook`; ``spec`` its flags
(torch-free), ``transport`` how its gradients travel (TCP, always); ``torchrun`` is
torchrun whose Ctrl-C is one line, not its traceback.  This layer imports
the hook, :mod:`mltcp.core` and torch, never the host datapath, the lab or the CLI.
"""
