"""Batching and chunked-prefill studies on one simulated engine (``make bench-batching``)."""
