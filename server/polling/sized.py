"""A shared document in each size routers declare (Router-Capacity, capacity.py), each made
when a router first asks for it: as many as there are sizes, whatever the fleet. A subclass
says which size a header names (`_size`). A document no router asked for in IDLE_SECONDS is
dropped at the next change instead of being rebuilt (a stranger naming every size once
does not make each process rebuild them all at every change for ever); asked again, it is
made again, and its deltas still come from the versions kept in the database."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable, Generic, Hashable, Iterable, TypeVar

from server.polling.shared_document import SharedDocument

Size = TypeVar("Size", bound=Hashable)
Document = TypeVar("Document", bound=SharedDocument)

IDLE_SECONDS = 900.0
SIZES_REMEMBERED = 1024  # headers and the size each names (a poll costs no parse)


class SizedDocuments(ABC, Generic[Size, Document]):
    def __init__(self, make: Callable[[Size], Document]):
        self._make = make
        self._documents: dict[Size, Document] = {}
        self._asked: dict[Size, float] = {}     # size -> when a router last asked (monotonic)
        self._pinned: set[Size] = set()         # sizes the service holds itself: never dropped
        self._sizes: dict[str | None, Size] = {}  # header -> the size it names
        # Changes heard (notifications, starts and stops of listening): a poll after the
        # count grew is answered from what the database held when it grew.
        self.heard = 0

    @abstractmethod
    def _size(self, header: str | None) -> Size:
        """The size a router naming `header` gets; CapacityInvalid when it is malformed."""

    def for_router(self, header: str | None) -> Document:
        """The document for a router naming `header` (Router-Capacity, or None);
        CapacityInvalid when the header is malformed."""
        if header in self._sizes:
            size = self._sizes[header]
        else:
            size = self._size(header)
            if len(self._sizes) >= SIZES_REMEMBERED:  # headers a stranger makes up
                self._sizes.clear()
            self._sizes[header] = size
        self._asked[size] = time.monotonic()
        return self._document(size)

    def sized(self, size: Size) -> Document:
        """The document of `size`, held by the service itself: kept, asked or not."""
        self._pinned.add(size)
        return self._document(size)

    def sizes(self) -> Iterable[Size]:
        """The sizes held now."""
        return list(self._documents)

    def _document(self, size: Size) -> Document:
        if size not in self._documents:
            self._documents[size] = self._make(size)
        return self._documents[size]

    def changed(self, payload: str = "") -> None:
        self.heard += 1
        self._drop_idle()
        for document in list(self._documents.values()):
            document.changed(payload)

    def _drop_idle(self) -> None:
        idle_since = time.monotonic() - IDLE_SECONDS
        for size in list(self._documents):
            if size not in self._pinned and self._asked.get(size, 0.0) < idle_since:
                del self._documents[size]
                self._asked.pop(size, None)
