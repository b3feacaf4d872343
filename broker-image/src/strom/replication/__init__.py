"""Data replication (followers pull from leaders, ISR, high watermark): the clustered-Strom issue.

Empty until then; the package exists so the layering contract in pyproject.toml is checked.
"""
