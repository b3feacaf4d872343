"""The controller quorum: a Raft group of 1 or 3 voters that owns the cluster metadata log.

The modules here are pure: ``raft`` is a sans-I/O state machine (events in, actions out),
``raftlog`` is the durable log it is persisted to, ``metadata`` is the replicated state machine
(the metadata image), and ``placement`` decides where new replicas go. A driver task (wired to
gRPC elsewhere) owns one ``RaftNode`` and carries out the actions it returns.
"""
