"""Reconcilers: apply what the model computes, one ordered list of named steps per kind.

They talk to Kubernetes through :class:`~strom_operator.reconcilers.kube.KubeApi` and to the Strom
cluster through :class:`~strom_operator.reconcilers.cluster.ClusterAdmin`; they know nothing of kopf
(the handlers translate their outcomes into kopf's retries, events and status).
"""
