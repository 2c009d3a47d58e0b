"""Verify and extract a rule archive (zip or tar.gz) into a staging folder.

Refused, with nothing used: an archive that does not open or is truncated, a member whose path
is absolute or climbs out (`../`), a link, device or other non-regular member, more members
or more unpacked bytes than the limits, a member whose content exceeds its declared size.
Only `.rules` files, `compromised-ips.txt` and `classification.config` are extracted, at the
paths the archive gives them (ET Open's `rules/` prefix is kept).
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterator

KEPT_NAMES = frozenset({"compromised-ips.txt", "classification.config"})
COPY_CHUNK = 1024 * 1024


class ArchiveError(Exception):
    """The archive is unusable or unsafe; the message says why."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_members: int = 10_000
    max_unpacked_bytes: int = 1024 * 1024 * 1024


@dataclass
class Extracted:
    rule_files: list[Path]
    classification: Path | None


# (name, declared size, is a directory, opener of its content)
Member = tuple[str, int, bool, Callable[[], BinaryIO] | None]


def _safe_relative(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or not path.parts or ":" in path.parts[0]:
        raise ArchiveError(f"unsafe member path {name!r} (absolute or outside the folder)")
    return path


def _wanted(path: PurePosixPath) -> bool:
    return path.name.endswith(".rules") or path.name in KEPT_NAMES


def _zip_members(archive: zipfile.ZipFile) -> Iterator[Member]:
    for info in archive.infolist():
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise ArchiveError(f"member {info.filename!r} is a link")
        if info.flag_bits & 0x1:
            raise ArchiveError(f"member {info.filename!r} is encrypted")
        if info.is_dir():
            yield info.filename, 0, True, None
            continue
        if stat.S_IFMT(mode) and not stat.S_ISREG(mode):  # no type bits: a plain file
            raise ArchiveError(f"member {info.filename!r} is not a regular file")
        yield info.filename, info.file_size, False, lambda i=info: archive.open(i)


def _tar_members(archive: tarfile.TarFile) -> Iterator[Member]:
    for member in archive:
        if member.issym() or member.islnk():
            raise ArchiveError(f"member {member.name!r} is a link")
        if member.isdir():
            yield member.name, 0, True, None
            continue
        if not member.isreg():
            raise ArchiveError(f"member {member.name!r} is not a regular file")
        yield member.name, member.size, False, lambda m=member: archive.extractfile(m)


def _copy_bounded(source: BinaryIO, target: Path, declared: int, name: str) -> None:
    written = 0
    with target.open("wb") as out:
        while chunk := source.read(COPY_CHUNK):
            written += len(chunk)
            if written > declared:
                raise ArchiveError(f"member {name!r} is larger than it declares")
            out.write(chunk)


def extract_archive(archive_path: Path, target: Path, limits: ArchiveLimits = ArchiveLimits()) -> Extracted:
    """Extract the wanted members of `archive_path` under `target` (which must be empty)."""
    try:
        with archive_path.open("rb") as probe:
            magic = probe.read(4)
        if not magic:
            raise ArchiveError("the archive is empty (0 bytes)")
        if magic.startswith(b"PK"):
            with zipfile.ZipFile(archive_path) as archive:
                return _extract(_zip_members(archive), target, limits)
        with tarfile.open(archive_path, mode="r:*") as archive:
            return _extract(_tar_members(archive), target, limits)
    except ArchiveError:
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as error:
        # One line: tarfile's message lists every compression it tried, a line each.
        first = (str(error).splitlines() or [type(error).__name__])[0].rstrip(":")
        raise ArchiveError(f"archive is damaged or not a zip/tar.gz: {first}") from None


def _extract(members, target: Path, limits: ArchiveLimits) -> Extracted:
    declared_total, count = 0, 0
    result = Extracted([], None)
    for name, size, is_dir, opener in members:
        count += 1
        if count > limits.max_members:
            raise ArchiveError(f"archive has more than {limits.max_members} members")
        relative = _safe_relative(name)
        declared_total += size
        if declared_total > limits.max_unpacked_bytes:
            raise ArchiveError(f"archive unpacks to more than {limits.max_unpacked_bytes} bytes")
        if is_dir or not _wanted(relative):
            continue
        destination = target.joinpath(*relative.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        with opener() as source:  # opened only when wanted; most members are skipped
            _copy_bounded(source, destination, size, name)
        if relative.name.endswith(".rules"):
            result.rule_files.append(destination)
        elif relative.name == "classification.config":
            result.classification = destination
    if not result.rule_files:
        raise ArchiveError("archive contains no .rules files")
    result.rule_files.sort()
    return result
