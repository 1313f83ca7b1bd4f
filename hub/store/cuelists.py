"""Stored cuelists: every version by content hash, pinned by the runs that use them.

A version is written once (HSETNX) with its canonical form and the source it was sent
as; the validated model of a version is cached, as a version never changes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel

from protocols.cuelist import Cuelist
from protocols.errors import NotFound
from protocols.keys import Keys
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


class CuelistStore:
    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys
        self._cache: dict[tuple[str, str], Cuelist] = {}

    async def put(self, cuelist: Cuelist, version: str, canonical: str, source: str | None) -> bool:
        """Store one version; returns False when that exact version was already stored."""
        name = cuelist.cuelist
        now = time.time()
        doc = json.dumps({"canonical": canonical, "source": source, "stored_at": now})

        def build(pipe: Pipeline) -> None:
            pipe.hsetnx(self.keys.cuelist(name), version, doc)
            pipe.zadd(self.keys.cuelist_versions(name), {version: now}, nx=True)
            pipe.zadd(self.keys.cuelists, {name: now})

        created, _, _ = await self.db.pipeline("STORE CUELIST", build, transaction=True)
        self._cache[(name, version)] = cuelist
        return bool(created)

    async def get(self, name: str, version: str) -> Cuelist:
        """The validated cuelist model of one version."""
        key = (name, version)
        if key not in self._cache:
            raw = await self.db.hget(self.keys.cuelist(name), version)
            if raw is None:
                raise NotFound(f"no version {version} of cuelist {name}")
            self._cache[key] = Cuelist.model_validate_json(json.loads(raw)["canonical"])
        return self._cache[key]

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
