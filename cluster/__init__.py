"""Cluster: configuration, the CLI, app wiring and the OpenAI ingress."""
