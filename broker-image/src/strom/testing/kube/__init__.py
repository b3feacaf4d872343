"""A real single-node Kubernetes for tests and ``./dev kube``: control plane on the host, the
node (containerd, kubelet, kube-proxy, every pod) in a network namespace with no way out.
See :mod:`strom.testing.kube.cluster` for up/down and :mod:`strom.testing.kube.layout` for the
names and address ranges."""
