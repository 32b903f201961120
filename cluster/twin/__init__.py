"""The virtual-time twin of a fleet (``llmfleet sim``): simulated engines, the real routing and autoscaling policies, on a virtual clock."""
