"""What arrives at the cluster: the models jobs train (:mod:`catalogue`, every number
with its source) and job traces (:mod:`job_traces`: Poisson or CSV)."""
