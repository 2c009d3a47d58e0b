"""A shared document in each size routers declare (Router-Capacity, capacity.py), each made
when a router first asks for it: as many as there are sizes, whatever the fleet. A subclass
says which size a header names (`_size`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Generic, Hashable, TypeVar

from server.polling.shared_document import SharedDocument

Size = TypeVar("Size", bound=Hashable)
Document = TypeVar("Document", bound=SharedDocument)


class SizedDocuments(ABC, Generic[Size, Document]):
    def __init__(self, make: Callable[[Size], Document]):
        self._make = make
        self._documents: dict[Size, Document] = {}

    @abstractmethod
    def _size(self, header: str | None) -> Size:
        """The size a router naming `header` gets; CapacityInvalid when it is malformed."""

    def for_router(self, header: str | None) -> Document:
        """The document for a router naming `header` (Router-Capacity, or None);
        CapacityInvalid when the header is malformed."""
        return self.sized(self._size(header))

    def sized(self, size: Size) -> Document:
        if size not in self._documents:
            self._documents[size] = self._make(size)
        return self._documents[size]

    def changed(self, payload: str = "") -> None:
        for document in list(self._documents.values()):
            document.changed(payload)
