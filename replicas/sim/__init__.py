"""Simulated vLLM-V1-like engine: paged KV + prefix cache, step scheduler, cost model."""
