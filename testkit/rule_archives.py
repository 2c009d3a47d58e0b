"""Rule archives for tests: the fixture ruleset packed as ET Open does, and broken variants,
served by a real local HTTP server whose behaviour a test can change."""

from __future__ import annotations

import io
import tarfile
import zipfile

from aiohttp import web

from testkit import FIXTURES
from testkit.corpus import CORPUS_ARCHIVE
from testkit.database import settings_for

FIXTURE_RULES = FIXTURES / "ruleset"


def fixture_members(extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    members = {f"rules/{p.name}": p.read_bytes() for p in sorted(FIXTURE_RULES.iterdir())}
    return {**members, **(extra or {})}


def make_zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def make_tar_gz(members: dict[str, bytes], symlink: tuple[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(symlink[0])
            info.type = tarfile.SYMTYPE
            info.linkname = symlink[1]
            archive.addfile(info)
    return buffer.getvalue()


def zip_with_symlink(members: dict[str, bytes], name: str, target: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        info = zipfile.ZipInfo(name)
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, target)
    return buffer.getvalue()


class RuleFeed:
    """A local HTTP server publishing /version.txt and /archive.zip (or .tar.gz)."""

    def __init__(self) -> None:
        self.version = b"1001\n"
        self.archive = make_zip(fixture_members())
        self.version_status = 200
        self.die_after_bytes: int | None = None  # close the connection mid-download
        self.archive_requests = 0
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/version.txt", self._version)
        app.router.add_get("/archive.zip", self._archive)
        app.router.add_get("/archive.tar.gz", self._archive)
        return app

    async def _version(self, request: web.Request) -> web.Response:
        if self.version_status != 200:
            return web.Response(status=self.version_status, text="unavailable")
        return web.Response(body=self.version)

    async def _archive(self, request: web.Request) -> web.StreamResponse:
        self.archive_requests += 1
        response = web.StreamResponse(headers={"Content-Length": str(len(self.archive))})
        await response.prepare(request)
        if self.die_after_bytes is not None:
            await response.write(self.archive[:self.die_after_bytes])
            request.transport.abort()
            return response
        await response.write(self.archive)
        await response.write_eof()
        return response


def ruleset_settings(kind: str, database, tmp_path):
    """Settings whose feed is the fixture ruleset or the ET Open corpus archive."""
    if kind == "corpus":
        archive = CORPUS_ARCHIVE
    else:
        archive = tmp_path / "archive.zip"
        archive.write_bytes(make_zip(fixture_members()))
    (tmp_path / "version.txt").write_text(kind)
    return settings_for(database, tmp_path, RULE_DATA_DIR=str(tmp_path / "rd"),
                        RULE_PREPROCESS_ARCHIVE_URL=archive.as_uri(),
                        RULE_PREPROCESS_VERSION_URL=(tmp_path / "version.txt").as_uri(),
                        RULE_GENERATION_POLL_SECONDS="1",
                        RULE_GENERATION_SAMPLE_COUNT="550" if kind == "corpus" else "6",
                        # The fixture's 6-rule budget holds its fired rules only whole.
                        RULE_GENERATION_FIRED_PERCENT="50" if kind == "corpus" else "100")
