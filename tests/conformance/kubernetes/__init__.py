"""Kubernetes checks (GC-K8S), run from the controller with kubectl."""
