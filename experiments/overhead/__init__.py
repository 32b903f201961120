"""Overhead against bare vLLM and the replica-count choice (``make bench-overhead``, ``make bench-replicas``)."""
