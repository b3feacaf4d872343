"""Consumer groups (coordinator, membership, committed offsets): the consumer-groups issue.

Empty until then; the package exists so the layering contract in pyproject.toml is checked.
"""
