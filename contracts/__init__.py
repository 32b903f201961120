"""Records and rules that cross layers and processes: block hashing (router and engines
must agree) and the replica-stats record. The bottom of the import graph: nothing here
imports another llmfleet package."""
