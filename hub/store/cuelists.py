"""Stored cuelists: every version by content hash, pinned by the runs that use them.

A version is written once with its canonical form and the source it was sent as (HSETNX
while it is listed); the validated model of a version is cached, as a version never
changes.

Deleting a version takes it out of every listing at once (GET answers 404, no new run
may start it), but its document stays readable: it is listed in the deleted set, and
`sweep_deleted` (the leader's scheduler) removes it once no active run is pinned to it (a
new leader resumes such a run from the stored document) and DELETED_KEPT_S have passed
(a start the API had checked and queued just before the delete is served after it: its
run is pinned to the version only once it is written).
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel

from hub.store.layout import HEADER
from protocols.cuelist import Cuelist
from protocols.errors import NotFound
from protocols.keys import Keys
from protocols.recent import Recent
from protocols.transport import Pipeline, Storage


class StoredVersion(BaseModel):
    """One stored version of a cuelist."""

    version: str
    stored_at: float
    cuelist: dict[str, Any] | None  # the canonical form, as JSON
    source: str | None = None  # the text it was submitted as


class StoredCuelist(BaseModel):
    """A cuelist with every version, newest first."""

    name: str
    versions: list[StoredVersion]

    @property
    def latest(self) -> str:
        return self.versions[0].version


CUELISTS_KEPT = 256  # versions kept parsed in memory (see CuelistStore.get)
DELETED_KEPT_S = 600.0  # a deleted version's document is kept at least this long


class CuelistStore:
    def __init__(self, db: Storage, keys: Keys, partitions: int = 1) -> None:
        self.db = db
        self.keys = keys
        self.partitions = partitions  # whose active sets `pinned` reads
        # versions read lately (a version never changes; all of them would grow for ever)
        self._cache: Recent[tuple[str, str], Cuelist] = Recent(CUELISTS_KEPT)
        self._drop_unlisted = db.script(_DROP_UNLISTED)
        self._forget_deleted = db.script(_FORGET_DELETED)

    async def put(self, cuelist: Cuelist, version: str, canonical: str, source: str | None) -> bool:
        """Store one version; returns False when that exact version was already stored (and
        not deleted since)."""
        name = cuelist.cuelist
        now = time.time()
        doc = json.dumps({"canonical": canonical, "source": source, "stored_at": now})
        # a listed version keeps its first document; one not listed (new, or deleted with
        # its document kept: DELETED_KEPT_S) is written as sent now, in the same MULTI: a
        # second call after it could fail, and a retry would find the version listed
        listed = await self.listed(name, version)

        def build(pipe: Pipeline) -> None:
            if listed:
                pipe.hsetnx(self.keys.cuelist(name), version, doc)
            else:
                pipe.hset(self.keys.cuelist(name), version, doc)
            pipe.zadd(self.keys.cuelist_versions(name), {version: now}, nx=True)
            pipe.zadd(self.keys.cuelists, {name: now})

            pipe.zrem(self.keys.deleted_versions, _member(name, version))  # stored again

        _, created, *_ = await self.db.pipeline("STORE CUELIST", build, transaction=True)
        if created and listed:  # deleted between the look and the MULTI (rare): as sent now
            await self.db.command("HSET", self.keys.cuelist(name), version, doc)
        # the latest now has no schedule: put back later, a schedule starts from then. Not
        # for an old version stored again (the latest keeps its tick); for the latest stored
        # again, yes: this put's first try may have landed and failed to clear it
        if not cuelist.schedule and (created or await self.latest(name) == version):
            await self.db.command("HDEL", self.keys.schedule(name), "last")
        self._cache.put((name, version), cuelist)
        return bool(created)

    async def get(self, name: str, version: str) -> Cuelist:
        """The validated cuelist model of one version."""
        key = (name, version)
        found = self._cache.get(key)
        if found is None:
            raw = await self.db.hget(self.keys.cuelist(name), version)
            if raw is None:
                raise NotFound(f"no version {version} of cuelist {name}")
            found = self._cache.put(key, Cuelist.model_validate_json(json.loads(raw)["canonical"]))
        return found

    async def latest(self, name: str) -> str | None:
        newest = await self.db.zrange(self.keys.cuelist_versions(name), 0, 0, desc=True)
        return newest[0].decode() if newest else None

    async def describe(self, name: str) -> StoredCuelist:
        """Every version of `name`, newest first; NotFound when there is none."""
        versions = await self.db.zrange_scored(self.keys.cuelist_versions(name), 0, -1, desc=True)
        if not versions:
            raise NotFound(f"no cuelist named {name}")
        docs = await self.db.hmget(self.keys.cuelist(name), [v.decode() for v, _ in versions])
        out = []
        for (version, at), doc in zip(versions, docs, strict=True):
            data = json.loads(doc) if doc else {}
            out.append(
                StoredVersion(
                    version=version.decode(), stored_at=at,
                    cuelist=json.loads(data.get("canonical", "null")), source=data.get("source"),
                )
            )  # fmt: skip
        return StoredCuelist(name=name, versions=out)

    async def names(self) -> list[str]:
        return [n.decode() for n in await self.db.zrange(self.keys.cuelists, 0, -1)]

    async def listed(self, name: str, version: str) -> bool:
        """Whether `version` of `name` is stored and not deleted (a new run may start it)."""
        score = await self.db.command("ZSCORE", self.keys.cuelist_versions(name), version)
        return score is not None

    async def delete(self, name: str, version: str | None = None) -> list[str]:
        """Delete every version of `name`, or one; returns the versions deleted. NotFound
        when there is no such (listed) version. Runs already going keep theirs."""
        listing = await self.db.zrange(self.keys.cuelist_versions(name), 0, -1)
        versions = [v.decode() for v in listing]
        if not versions:
            raise NotFound(f"no cuelist named {name}")
        if version is not None and version not in versions:
            raise NotFound(f"no version {version} of cuelist {name}")
        gone = versions if version is None else [version]
        last = len(gone) == len(versions)
        now = time.time()

        def build(pipe: Pipeline) -> None:
            pipe.zrem(self.keys.cuelist_versions(name), *gone)
            pipe.zadd(self.keys.deleted_versions, {_member(name, v): now for v in gone})
            if last:
                pipe.zrem(self.keys.cuelists, name)
                pipe.delete(self.keys.schedule(name))

        await self.db.pipeline("DELETE CUELIST", build, transaction=True)
        return gone

    async def pinned(self) -> set[tuple[str, str]]:
        """(cuelist, version) of every active run (their headers alone, one round trip)."""
        ids = [
            i.decode()
            for p in range(self.partitions)
            for i in await self.db.smembers(self.keys.active_runs(p))
        ]
        if not ids:
            return set()

        def build(pipe: Pipeline) -> None:
            for run_id in ids:
                pipe.hget(self.keys.run(run_id), HEADER)

        out: set[tuple[str, str]] = set()
        for raw in await self.db.pipeline("RUN HEADERS", build):
            if raw:
                header = json.loads(raw)
                out.add((str(header.get("cuelist")), str(header.get("version"))))
        return out

    async def sweep_deleted(self) -> int:
        """Remove the deleted versions no active run is pinned to any more (and not stored
        again since); returns how many. Cheap while nothing waits to be swept.

        Each document goes in one script that deletes it only while its version is not
        listed, so a `put` of the same version landing at any moment keeps its document;
        the entry leaves the deleted set only while it is the one read (not deleted again
        since). A failure part way leaves the rest for the next round."""
        waiting = await self.db.zrange_scored(self.keys.deleted_versions, 0, -1)
        waiting = [(m, at) for m, at in waiting if at <= time.time() - DELETED_KEPT_S]
        if not waiting:
            return 0
        pinned = await self.pinned()
        free = [(m.decode(), at) for m, at in waiting if _version_of(m.decode()) not in pinned]
        for member, at in free:
            name, version = _version_of(member)
            keys = [self.keys.cuelist(name), self.keys.cuelist_versions(name)]
            if await self._drop_unlisted(keys, [version]):
                self._cache.pop((name, version))
            await self._forget_deleted([self.keys.deleted_versions], [member, repr(at)])
        return len(free)


# KEYS: a cuelist's documents, its listed versions (one slot); ARGV: a version
_DROP_UNLISTED = """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
"""

# KEYS: the deleted set; ARGV: a member, the score it was read with
_FORGET_DELETED = """
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if at and tonumber(at) == tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""


def _version_of(member: str) -> tuple[str, str]:
    name, _, version = member.partition(" ")
    return name, version


def _member(name: str, version: str) -> str:
    return f"{name} {version}"  # a cuelist name has no space
