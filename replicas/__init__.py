"""Replicas: the engine protocol, the vLLM and simulated engines, and the Serve replica."""
