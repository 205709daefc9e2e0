"""The cluster simulator's parts: a GPU cluster's fabric (:mod:`fabric`), jobs placed on
its GPUs and their traffic (:mod:`jobs`), placement policies (:mod:`placement`) and the
loop of arrivals, queue and engine (:mod:`sim`).
The flow-level engine underneath is the fluid model's (:mod:`mltcp.lab.models.fluid_engine`).
"""
