"""A fetching client's side of its fetch session with one broker (Kafka's
``FetchSessionHandler``): a follower's with a leader (``ReplicaFetch``,
:class:`~strom.replication.fetcher.ReplicaFetcher`) and a consumer's with a partition leader
(``Fetch``, :class:`~strom.client.fetcher.ConsumerCore`).

The client remembers what the broker's session holds for each partition (fetch offset, epoch
of the last fetched record, leader epoch; a consumer sends -1 for both epochs) and, per
request, names only the partitions whose figures differ now, and those to forget. It only
re-checks partitions that may have moved (*touched*: answered in the last response, added,
given a new epoch, delayed or undelayed), so building a request costs what changed, not the
partitions followed (a consumer touches every partition it fetches: which ones it may fetch
changes with its prefetch buffers, pauses, seeks and back-offs).

Any doubt starts over with a full fetch (every partition, session epoch 0): the first request, a
failed call (the leader may have restarted), a session error in the answer, or a leader that
answered without a session (session id 0: it keeps none). A call the follower interrupted
(partitions moved to this leader during its long-poll) is retried instead: the next request
carries the same epoch and names again what the interrupted one named or forgot, and the leader
tells again what it answered to it (:mod:`strom.replication.sessions`), so thousands of
partitions moving at once cost no full fetch each.

The retry of an interrupted call is the follower's (the leader's session cache,
:mod:`strom.replication.sessions`, answers it again); a consumer starts over instead (the
consumer-session cache, :mod:`strom.broker.fetch_sessions`, follows Kafka's rules).

Pure state, no I/O and no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

TopicPartition = tuple[str, int]
Key = tuple[int, int, int]
"""(fetch offset, last fetched epoch, leader epoch): what the leader's session holds."""
_MAX_EPOCH = 2**31 - 1
_UNKNOWN: Key = (-2, -2, -2)
"""What the leader holds after a request it may or may not have applied: matches no position."""


class FetcherSession:
    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = 0
        """The epoch of the next request: 0 is a full fetch."""
        self.sent: dict[TopicPartition, Key] = {}
        """Each partition as the leader's session holds it (after the last request)."""
        self._touched: dict[TopicPartition, None] = {}
        self._last: list[TopicPartition] = []
        """Partitions the last incremental request named or forgot."""

    @property
    def full(self) -> bool:
        return self.epoch == 0

    def touch(self, tp: TopicPartition) -> None:
        """``tp`` may have moved: compare it with what the leader holds in the next request."""
        self._touched[tp] = None

    def reset(self) -> None:
        """Start over: the next request is a full fetch (a new session replaces this one)."""
        self.epoch = 0
        self._touched.clear()
        self._last = []

    def interrupted(self) -> None:
        """The last request's answer will never arrive: retry it (same epoch), naming again
        what it named or forgot (a full fetch is simply sent again)."""
        for tp in self._last:
            self.sent[tp] = _UNKNOWN  # named again if followed, else forgotten again
            self._touched[tp] = None
        self._last = []

    def request(self, partitions: Iterable[TopicPartition],
                key_of: Callable[[TopicPartition], Key | None]
                ) -> tuple[list[tuple[TopicPartition, Key]], list[TopicPartition]]:
        """(partitions to name with their figures, partitions to forget) for the next request.

        ``partitions`` are every followed partition (read only for a full fetch); ``key_of``
        gives a partition's figures now, or None to leave it out (delayed, not followed)."""
        if self.full:
            self._touched.clear()
            self.sent = {}
            named = []
            for tp in partitions:
                key = key_of(tp)
                if key is not None:
                    named.append((tp, key))
                    self.sent[tp] = key
            return named, []
        named, forgotten = [], []
        for tp in self._touched:
            key = key_of(tp)
            if key is None:
                if self.sent.pop(tp, None) is not None:
                    forgotten.append(tp)
            elif self.sent.get(tp) != key:
                named.append((tp, key))
                self.sent[tp] = key
        self._touched.clear()
        self._last = [tp for tp, _ in named] + forgotten
        return named, forgotten

    def answered(self, session_id: int, error_code: int) -> None:
        """The leader answered the last request with ``session_id`` (0: none) and, at the top
        level, ``error_code`` (a session error: start over)."""
        if error_code or session_id == 0:
            self.session_id = 0
            self.reset()
            return
        self._last = []
        if self.full:
            self.session_id = session_id
            self.epoch = 1
        elif session_id != self.session_id:  # not the session we asked in: start over
            self.session_id = 0
            self.reset()
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
