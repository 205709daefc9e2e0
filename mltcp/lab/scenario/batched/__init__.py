"""The batched backends' side of the models: plans grouped into lanes of numpy arrays
(:mod:`lanes`), run on the fluid engine (:mod:`fluid`) or the DCQCN model
(:mod:`dcqcn`, its jobs moved by :mod:`jobphases`), traces out.  The engines themselves
(:mod:`mltcp.lab.models`) know nothing of plans or traces."""
