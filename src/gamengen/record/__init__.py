"""Recording play into a trajectory store: policies and the (parallel, resumable) recorder."""
