"""Autoscaler comparison: TTFT-queue against Ray's and utilization baselines (``make bench-autoscale``)."""
