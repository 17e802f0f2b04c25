"""The ``cluster`` section of a recipe and of serve.yaml: where the Ray cluster is, and which of its nodes run a
gateway node. Unset (the default), everything runs in this process, as before."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class RayConfig(_Strict):
    address: str | None = None
    """``auto`` (the cluster this machine belongs to), ``ray://host:10001`` (Ray Client), ``host:6379``, or None: no
    cluster, one process as before."""
    namespace: str = "polar"
    """The Ray namespace the node actors live in."""


class NodeSelection(_Strict):
    resource: str = "polar_node"
    """One gateway node per alive Ray node that advertises this custom resource (``ray start --resources
    '{"polar_node": 1}'``); each node actor takes one unit of it."""
    max_nodes: int | None = Field(default=None, ge=1)
    """Use at most this many nodes (None: every one that advertises the resource, also those that join later)."""
    poll_interval: float = Field(default=5.0, gt=0)
    """Seconds between two looks for nodes that joined (Ray tells of deaths at once, of joins only when asked)."""
    start_timeout: float = Field(default=1800.0, gt=0)
    """Seconds a node actor may take to start its engine, gateway and images before it is left out."""
    node_dir: str | None = None
    """Where each node keeps its capture records, logs and artifacts, on its own disk (None: the run directory's
    ``nodes/<node id>``, created at the same path on every machine)."""


class ClusterConfig(_Strict):
    ray: RayConfig = Field(default_factory=RayConfig)
    """Where the Ray cluster is."""
    nodes: NodeSelection = Field(default_factory=NodeSelection)
    """Which of its nodes run a gateway node, and how they are watched."""

    @property
    def enabled(self) -> bool:
        return self.ray.address is not None
