"""The controller quorum: a Raft group of 1 or 3 voters that owns the cluster metadata log.

The core is pure: ``raft`` is a sans-I/O state machine (events in, actions out), ``raftlog`` the
durable log it is persisted to, ``metadata`` the replicated state machine (the metadata image) and
``placement`` decides where new replicas go, and ``decisions`` holds the controller's choices
(fencing, elections, reassignment steps, controlled shutdown) as pure functions of the image. The
I/O sits around it: ``driver`` is the one asyncio
task that owns a ``RaftNode`` and carries out its actions in order (persist before send),
``transport`` sends peer messages over gRPC, ``quorum_server`` serves the ``Quorum`` service and
``quorum_client`` proposes commands to whichever node leads, and ``active`` is the controller
logic that runs on the Raft leader (broker sessions and heartbeats, fencing, leader elections,
reassignment completion, preferred-leader rebalancing). Brokers embed all of this (combined mode);
``python -m strom.controller`` runs a dedicated controller process.
"""
