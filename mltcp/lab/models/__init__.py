"""Flow-level engines: the fluid model and the DCQCN model, runs advancing as lanes."""
