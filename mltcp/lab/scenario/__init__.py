"""The scenario wing: scenario -> plan -> schedule -> backend -> trace -> metrics -> report.

A scenario file (:mod:`spec`) is resolved once into plans (:mod:`plan`, on the
topology of :mod:`graph`), a centralized schedule may shift them (:mod:`schedule`:
Cassini's time-shifts), a backend from the registry (:mod:`backends`) runs them and
writes the common trace (:mod:`trace`), and :mod:`metrics` and :mod:`report` turn
traces into the comparison.  :mod:`runner`, :mod:`sweep` and :mod:`demo` drive that
pipeline.  The backends' machinery lives beside it: the batched models' lanes
(:mod:`batched`: plans onto :mod:`mltcp.lab.models`), the emulated testbed
(:mod:`emulation`), ns-3 (:mod:`ns3`) and real hosts (:mod:`hosts`).  Importing this
package imports none of them.
"""
