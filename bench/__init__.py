"""Load generation and SLA reports for any OpenAI-compatible endpoint."""
