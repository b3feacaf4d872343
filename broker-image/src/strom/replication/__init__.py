"""Data replication: followers pull from leaders (ReplicaFetch), ISR, high watermark, acks=all.

The broker tells :class:`~strom.replication.manager.ReplicaManager` what the metadata log says
about each partition it hosts (:class:`~strom.replication.state.PartitionView`); the manager makes
this broker the partition's leader or follower, runs the follower fetchers, keeps the ISR (through
the ``AlterIsr`` callback, which proposes a partition-epoch-checked change to the controller
quorum) and moves the high watermark.
"""
