"""Stored cuelists: every version by content hash, pinned by the runs that use them."""

from __future__ import annotations

import json
import time
from typing import Any

from protocols.errors import NotFound
from protocols.keys import Keys
from protocols.transport import Redis


class CuelistStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._cache: dict[tuple[str, str], Any] = {}

    def _versions(self, name: str) -> str:
        return self.keys.cuelist_versions(name)

    async def put(self, cuelist: Any, version: str, canonical: str, source: str | None) -> bool:
        """Store one version; returns False when that exact version was already stored."""
        name = cuelist.cuelist
        doc = json.dumps({"canonical": canonical, "source": source, "stored_at": time.time()})
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hsetnx(self.keys.cuelist(name), version, doc)
            pipe.zadd(self._versions(name), {version: time.time()}, nx=True)
            pipe.zadd(self.keys.cuelists, {name: time.time()})
            created, _, _ = await pipe.execute()
        self._cache[(name, version)] = cuelist
        return bool(created)

    async def get(self, name: str, version: str) -> Any:
        """The validated cuelist model of one version."""
        key = (name, version)
        if key not in self._cache:
            raw = await self.client.hget(self.keys.cuelist(name), version)
            if raw is None:
                raise NotFound(f"no version {version} of cuelist {name}")
            from protocols.cuelist import Cuelist

            self._cache[key] = Cuelist.model_validate_json(json.loads(raw)["canonical"])
        return self._cache[key]

    async def latest(self, name: str) -> str | None:
        newest = await self.client.zrevrange(self._versions(name), 0, 0)
        return newest[0].decode() if newest else None

    async def describe(self, name: str) -> dict[str, Any]:
        versions = await self.client.zrevrange(self._versions(name), 0, -1, withscores=True)
        if not versions:
            raise NotFound(f"no cuelist named {name}")
        docs = await self.client.hmget(self.keys.cuelist(name), [v for v, _ in versions])
        out = []
        for (version, at), doc in zip(versions, docs, strict=True):
            data = json.loads(doc) if doc else {}
            out.append({
                "version": version.decode(), "stored_at": at,
                "cuelist": json.loads(data.get("canonical", "null")), "source": data.get("source"),
            })  # fmt: skip
        return {"name": name, "latest": out[0]["version"], "versions": out}

    async def names(self) -> list[str]:
        return [n.decode() for n in await self.client.zrange(self.keys.cuelists, 0, -1)]
