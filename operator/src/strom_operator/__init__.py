"""Strom Kubernetes operator."""
