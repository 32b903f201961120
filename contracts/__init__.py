"""Contracts shared by every layer: block hashing (the router and the engines must agree) and the replica-stats record. Imports nothing from this project."""
