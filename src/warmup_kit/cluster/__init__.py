"""An emulated cluster on one machine (Linux network namespaces, root).

:class:`Cluster` builds nodes joined by rate-limited links and runs jobs on
them; ``python -m warmup_kit.cluster up|down|status`` does it from a shell.
"""
from warmup_kit.cluster.core import Cluster, Node
from warmup_kit.cluster.netns import ClusterUnavailable, why_unavailable

__all__ = ["Cluster", "ClusterUnavailable", "Node", "why_unavailable"]
