"""Observability as code: the dashboards, alert rules and Prometheus config generated from the
metric catalogue (``contracts/metrics.py``) and the fleet config, and the operator commands
that render, push and report them."""
