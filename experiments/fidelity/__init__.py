"""Trust in the load generator (``make bench-fidelity``)."""
