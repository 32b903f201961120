"""JSON schemas llmfleet keeps for the files it renders (package data)."""
