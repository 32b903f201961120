"""The ``cluster:`` config section (defined in ``cluster/cluster_settings.py``, beside the rest
of the config, so that ``cluster/config.py`` does not import this package)."""

from cluster.cluster_settings import ClusterSection, NodeType

__all__ = ["ClusterSection", "NodeType"]
