"""gRPC glue shared by the broker and the client: Strom errors as gRPC statuses, services
registered from handler tables, ReplicaFetch with hand-framed records.

``strom.protocol`` holds what is on the wire (messages, record batches, error codes) without any
transport; this package binds it to ``grpc``, below the client and the broker.
"""
