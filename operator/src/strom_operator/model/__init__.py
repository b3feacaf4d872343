"""The operator's model: typed CRD specs, desired manifests and plans, with no Kubernetes I/O.

Everything here is a pure function of its arguments (Strimzi's "model" layer): the reconcilers ask
the model what the world should look like and then make it so.  Import-linter enforces that this
package imports neither kopf nor the Kubernetes client.
"""
