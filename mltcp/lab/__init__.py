"""The researchers' lab: scenario -> plan -> backend -> trace -> metrics -> report.

A scenario file (:mod:`scenario`) is resolved once into plans (:mod:`plan`), a
centralized schedule may shift them (:mod:`schedule`, :mod:`cassini`), a backend from
the registry (:mod:`backends`) runs them and writes the common trace (:mod:`trace`),
and :mod:`metrics` and :mod:`report` turn traces into the comparison.  :mod:`runner`
and :mod:`sweep` drive that pipeline.  Engines live beside it: the flow-level models
(:mod:`models`), the emulated testbed (:mod:`emulation`) and ns-3 (:mod:`ns3`).
"""
