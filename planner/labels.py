"""Kubernetes API names, labels and taints the program and its checks agree on, each written once."""

LWS_API = "leaderworkerset.x-k8s.io/v1"
"""LeaderWorkerSet API version (kubernetes-sigs/lws)."""
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
"""Set by the LWS controller on every pod of a LeaderWorkerSet."""
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""0 on a group's leader pod."""

ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
"""GKE labels GPU nodes with their accelerator type."""
SPOT_LABEL = "cloud.google.com/gke-spot"
"""GKE labels Spot nodes `true`."""
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
"""GKE labels every node with its pool's name."""
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_TAINT_KEY, GPU_TAINT_VALUE = "nvidia.com/gpu", "present"
"""GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule."""

GKE_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "gmp-system", "gmp-public",
                            "gke-managed-system", "gke-managed-cim", "gke-gmp-system"})
"""Namespaces Kubernetes or GKE create and own; a program that also declares one would fight them over it."""

COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
"""Pods select a ComputeClass with this node label; GKE sets it (and a NoSchedule taint of the same key and value)
on the nodes of the class's auto-created pools, and a hand-made pool joins the class only with both (GKE "About
custom ComputeClasses")."""
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
"""Set by the LWS controller on the leader and every worker of one group, unique per group."""
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"

SPOT_GROUPS_ANNOTATION = "vllm-gke/spot-multi-node"
"""On a ComputeClass: "true" when the stack opted in to Spot rungs for multi-node groups (accelerator.spotMultiNode)."""
