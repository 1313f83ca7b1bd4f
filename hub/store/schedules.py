"""Schedule state in Redis: per scheduled cuelist, the last fire time and the run it started,
so a new leader neither repeats nor loses a tick."""

from __future__ import annotations

from pydantic import BaseModel

from hub.store.layout import Op
from protocols.keys import Keys
from protocols.transport import Storage


class ScheduleState(BaseModel):
    """One schedule's state; `last` is None until the schedule was first seen."""

    last: float | None = None  # epoch seconds of the last tick taken (fired or not)
    run_id: str | None = None  # the last run it started
    buffered: bool = False  # overlap `buffer_one`: a tick waits for the run to end
    skipped: int = 0  # ticks dropped by overlap `skip`
    paused: bool = False  # an operator paused the schedule: its ticks start nothing
    schedule: str | None = None  # the schedule `last` was taken under (None: not recorded)


class ScheduleStore:
    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    async def get(self, name: str) -> ScheduleState:
        raw = {
            k.decode(): v.decode()
            for k, v in (await self.db.hgetall(self.keys.schedule(name))).items()
        }
        return ScheduleState(
            last=float(raw["last"]) if "last" in raw else None,
            run_id=raw.get("run_id") or None,
            buffered=raw.get("buffered") == "1",
            skipped=int(raw.get("skipped", 0)),
            paused=raw.get("paused") == "1",
            schedule=raw.get("schedule"),
        )

    async def set_paused(self, name: str, paused: bool) -> None:
        """Pause or resume a schedule (its own field: the scheduler's saves leave it be)."""
        await self.db.hset(self.keys.schedule(name), {"paused": int(paused)})

    def save_op(self, name: str, state: ScheduleState) -> Op:
        """The write of the fields `state` has (a hash: one field each), but `paused`, which
        only an operator sets (set_paused): one operation, for the scheduler's fenced
        writes (a fired tick's rides in its run's own: "the tick is taken" and "its run
        exists" land together, or neither does)."""
        words: list[str | float | int] = []
        for field, value in self._fields(state).items():
            words += (field, value)
        return ["HSET", self.keys.schedule(name), *words]

    @staticmethod
    def _fields(state: ScheduleState) -> dict[str, str | float | int]:
        fields: dict[str, str | float | int] = {
            "buffered": int(state.buffered),
            "skipped": state.skipped,
        }
        if state.last is not None:
            fields["last"] = state.last
        if state.run_id is not None:
            fields["run_id"] = state.run_id
        if state.schedule is not None:
            fields["schedule"] = state.schedule
        return fields
