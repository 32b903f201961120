"""Comparison studies (not packaged): one folder per study, each run by its ``make`` target."""
