"""Autoscaling: pure scaling policies and the Ray Serve autoscaling adapter."""
