"""ns-3 at packet level: the MLTCP TCP classes (C++) and one worker process per run."""
