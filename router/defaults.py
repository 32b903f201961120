"""What llmfleet routes with unless told otherwise (``routing.policy``, ``llmfleet sim``).

Its own module, importing nothing: ``cluster.config`` reads it, and ``llmfleet status`` /
``down`` load the config without paying for the policies ``router.registry`` builds."""

DEFAULT_POLICY = "prefix"
