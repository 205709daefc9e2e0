"""The engines both lab wings drive, which know neither plans nor clusters: the fluid
model's event engine (:mod:`fluid_engine`: flows on links, max-min or F-weighted
rates, the jobs' phases) and the DCQCN model (:mod:`dcqcn`).  The scenario wing feeds
them plans as lanes (:mod:`mltcp.lab.scenario.batched`); the cluster wing builds the
fluid engine's state from placed jobs (:mod:`mltcp.lab.cluster.engine.gpu_jobs`)."""
