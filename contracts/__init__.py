"""Records that cross process boundaries. The bottom of the import graph: nothing here
imports another llmfleet package."""
