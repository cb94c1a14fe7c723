"""What a corpus reads of each memory, worked out once per memory, not per snapshot.

Every snapshot of a scope (:class:`~sidecar.memory.corpus.corpus.Corpus`) reads its
memories: their BM25 tokens, whom each is about, whether it tells a time. A write
makes a new snapshot, and a long conversation turn costs about a tenth of a
millisecond to tokenise: reading every memory again for each snapshot made a
10k-memory user's first query after a reload cost seconds. :class:`FeatureMemo`
keeps those values per memory (by id, for the text they were read from) for the
corpus cache's lifetime, bounded like the cache's rows, so a new snapshot reads
only the memories it has not seen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter, eq, is_, itemgetter
from typing import Any, cast, overload

from sidecar.memory.records.records import MemoryRecord

#: A value per memory, read from its record: the memo keeps it under a name.
Reader = Callable[[MemoryRecord], Any]


class MemoryFeatures:
    """The values read from one version of one memory (its text). ``record``: the
    last record found to have this text (records are immutable: the same object
    has it still), so a snapshot of the rows read before checks each by identity
    without reading its text again."""

    __slots__ = ("content", "excerpt", "record", "user_id", "values")

    def __init__(self, record: MemoryRecord) -> None:
        self.user_id = record.user_id
        self.content = record.content
        self.excerpt = record.excerpt
        self.record = record
        self.values: dict[str, Any] = {}

    def value(self, name: str, record: MemoryRecord, read: Reader) -> Any:
        """``read(record)``, read once (``record`` has this text)."""
        values = self.values
        try:
            return values[name]
        except KeyError:
            value = values[name] = read(record)
            return value

    def reads(self, record: MemoryRecord) -> bool:
        """Whether these values were read from ``record``'s text."""
        # Identity first: the same strings are most often the same objects.
        return (self.content is record.content and self.excerpt is record.excerpt) or (
            self.content == record.content and self.excerpt == record.excerpt
        )


_VALUES = attrgetter("values")
_ID, _TEXT, _RECORD = attrgetter("id"), attrgetter("content", "excerpt"), attrgetter("record")


def kept_values(entries: Sequence[MemoryFeatures], name: str) -> list[Any] | None:
    """Each entry's value ``name`` when every one has it (one C-level pass: a
    snapshot of memories read before), else None (read them one by one)."""
    try:
        return list(map(itemgetter(name), map(_VALUES, entries)))
    except KeyError:
        return None


class KeptEntries(Sequence[MemoryFeatures]):
    """A snapshot's memo entries, one per memory, whose values are gathered into
    columns, every name at once, the first time a column of them is asked.

    Reading one value of every entry follows each entry to its table and each
    table to the value; with thousands of memories those reads miss the
    processor's caches, and a pass per value (a term id, a vector, a cue of each
    memory) repeated them for each of the dozen values a cold snapshot's first
    query reads. One pass reads each table once. ``skip``: names not gathered
    (values no snapshot reads whole)."""

    __slots__ = ("_columns", "_entries", "_skip")

    def __init__(self, entries: tuple[MemoryFeatures, ...], skip: frozenset[str]) -> None:
        self._entries = entries
        self._skip = skip
        self._columns: dict[str, list[Any]] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> MemoryFeatures: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[MemoryFeatures]: ...

    def __getitem__(self, index: int | slice) -> MemoryFeatures | Sequence[MemoryFeatures]:
        return self._entries[index]

    def column(self, name: str) -> list[Any] | None:
        """Every entry's value ``name`` when each has it, else None (as
        :func:`kept_values`). A gathered column is handed over once (a snapshot
        keeps what it builds of it); asked again, it is read by a pass."""
        columns = self._columns
        if columns is None:
            columns = self._columns = gathered(self._entries, self._skip)
        found = columns.pop(name, None)
        return found if found is not None else kept_values(self._entries, name)


#: Entries gathered a block at a time: their values' tuples, turned into columns,
#: stay in the processor's cache (one turn over every entry's tuple misses it once
#: per value, as a pass per value did).
_GATHER_BLOCK = 256


def gathered(entries: Sequence[MemoryFeatures], skip: frozenset[str]) -> dict[str, list[Any]]:
    """By name, every entry's value, in one pass over the entries: the names the
    first entry holds, less ``skip``; none when an entry lacks one of them (its
    values are then read name by name)."""
    if not entries:
        return {}
    names = tuple(name for name in entries[0].values if name not in skip)
    if len(names) < 2:  # one name: itemgetter gives the value, not a tuple
        return {}
    get = itemgetter(*names)
    columns: list[list[Any]] = [[] for _ in names]
    try:
        for begin in range(0, len(entries), _GATHER_BLOCK):
            block = list(map(get, map(_VALUES, entries[begin : begin + _GATHER_BLOCK])))
            for column, values in zip(columns, zip(*block, strict=True), strict=True):
                column.extend(values)
    except KeyError:
        return {}
    return dict(zip(names, columns, strict=True))


class FeatureMemo:
    """Per memory id, the values read from its current text; past ``capacity``
    memories, those of the memory read first go (it is read again when a snapshot
    needs it: keeping the order of use would cost a move per value read, a third
    of reading a kept value)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._memories: dict[str, MemoryFeatures] = {}
        #: Term ids for every BM25 index built with this memo: a memory's tokens
        #: are looked up once. It holds words of the memories read, so it goes
        #: whenever a user is forgotten (a new one replaces it; indexes built on
        #: the old one keep theirs).
        self.vocabulary: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._memories)

    def features(self, record: MemoryRecord) -> MemoryFeatures:
        """What was read of ``record``'s text so far (new, empty, for a memory or
        text not seen). A snapshot keeps the ones of its memories, so each of its
        reads is a dictionary lookup (:meth:`Corpus.read
        <sidecar.memory.corpus.corpus.Corpus.read>`)."""
        memories = self._memories
        features = memories.get(record.id)
        if features is not None and features.record is not record:
            if features.reads(record):
                features.record = record  # a new version of the row, the same text
            else:
                features = None
        if features is None:
            features = MemoryFeatures(record)
            memories.pop(record.id, None)  # a new text goes last
            memories[record.id] = features
            if len(memories) > self._capacity:
                del memories[next(iter(memories))]
        return features

    def known(self, record: MemoryRecord) -> MemoryFeatures | None:
        """What was read of ``record``'s text, if the memo holds it (nothing added)."""
        features = self._memories.get(record.id)
        return features if features is not None and features.reads(record) else None

    def features_of(self, records: Sequence[MemoryRecord]) -> tuple[MemoryFeatures, ...]:
        """:meth:`features` of each record: C-level passes when every record's
        entry is there and read from its text (a snapshot of memories read before,
        or the same rows loaded again), else one by one."""
        # None where a memory was not read yet: its attribute read below raises.
        found = cast(list[MemoryFeatures], list(map(self._memories.get, map(_ID, records))))
        try:
            # The very records read before (the usual snapshot): their texts
            # are not read again.
            if all(map(is_, map(_RECORD, found), records)):
                return tuple(found)
            # Else one pass over both, each pair of texts compared by identity
            # first; new versions of rows (the same text) are then the ones kept.
            if all(map(eq, map(_TEXT, found), map(_TEXT, records))):
                for entry, record in zip(found, records, strict=True):
                    entry.record = record
                return tuple(found)
        except AttributeError:  # one not read yet (None)
            pass
        return tuple(map(self.features, records))

    def value(self, name: str, record: MemoryRecord, read: Reader) -> Any:
        """``read(record)``, read once per version of the memory's text (``read``
        must depend on the text alone, and be the only reader named ``name``)."""
        return self.features(record).value(name, record, read)

    def drop(self, ids: list[str]) -> None:
        """Forget what was read of these memories (deleted ones)."""
        for memory_id in ids:
            self._memories.pop(memory_id, None)

    def forget_user(self, user_id: str) -> int:
        """Forget what was read of every memory ``user_id`` owns (how many), and
        the shared vocabulary with every memory's term ids (it holds their words):
        the next snapshots read their memories again."""
        owned = sum(1 for f in self._memories.values() if f.user_id == user_id)
        self.clear()
        return owned

    def clear(self) -> None:
        self._memories.clear()
        self.vocabulary = {}


class MemoEntries(Sequence[MemoryFeatures]):
    """The memo's entry of each of ``records``, looked up when read (the few rows
    an update reads: new ones)."""

    __slots__ = ("_memo", "_records")

    def __init__(self, memo: FeatureMemo, records: Sequence[MemoryRecord]) -> None:
        self._memo = memo
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> MemoryFeatures: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[MemoryFeatures]: ...

    def __getitem__(self, index: int | slice) -> MemoryFeatures | Sequence[MemoryFeatures]:
        if isinstance(index, slice):
            return self._memo.features_of(self._records[index])
        return self._memo.features(self._records[index])
