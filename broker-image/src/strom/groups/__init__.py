"""Consumer groups: which member reads which partition, and where each group has got to.

Everything here is pure -- no asyncio, no gRPC, no sockets -- so the subtle parts of Kafka's group
protocol are tested as plain functions and state machines (DESIGN § 7, h11 style):

- ``assignors``: range, roundrobin, cooperative-sticky (Kafka's algorithms, run by the leader).
- ``membership``: one group's Join/Sync/Heartbeat/Leave state machine as its coordinator sees it;
  events and time in, responses and actions out.
- ``offsets``: the ``__consumer_offsets`` record layout, replay, expiry, ``partition_for_group``.
- ``lag``: log end minus committed, per partition and in total.

The broker owns one driver task per coordinated partition that feeds these and does the I/O.
"""
