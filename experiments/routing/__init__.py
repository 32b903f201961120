"""Router comparison: our policies against Ray Serve's routers, virtual time and live (``make bench-router``)."""
