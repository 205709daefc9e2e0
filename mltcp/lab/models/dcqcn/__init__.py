"""The DCQCN model: what the RoCE tuner does to training jobs, without a NIC.

* :mod:`~mltcp.lab.models.dcqcn.params` -- what it runs with (the knob table's values,
  switch marking);
* :mod:`~mltcp.lab.models.dcqcn.model` -- DCQCN's reaction/notification points and ECN
  switches, stepped;
* :mod:`~mltcp.lab.models.dcqcn.longflows` -- long-lived flows on one link (fairness,
  fixed F);
* :mod:`~mltcp.lab.scenario.batched.dcqcn` -- training jobs on it: the ``dcqcn`` backend.

F reaches the model only through the tuner's own policy (:mod:`mltcp.core.dcqcn`);
``rdma/README.md`` is the user's guide.
"""
