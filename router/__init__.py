"""Request routing: pure policies, the prefix index, and the Ray Serve RequestRouter adapter."""
