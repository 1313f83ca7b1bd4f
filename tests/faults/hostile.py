"""A hostile specialist for row 14, run as its own process with ONLY its own ACL credentials:

    python -m tests.faults.hostile PHASE --agent AGENT --api URL --victim AGENT [--report F]

It speaks the protocol with redis-py directly (no SDK) and tries every harm of issue 12,
items 1-5, in phases the test measures one at a time:

    attack  ACL probes (XADD to its own inbox and to the dead letters with a maximum id or
            MAXLEN 0, to other agents' streams...), critical escalations about every run it
            can find, its own and run-less ones, context writes into other runs and over
            other agents' entries, forged senders, status.rejected naming entries it does
            not have, and 20,000 stray completions into runs
    flood   FLOOD entries naming made-up run ids, as fast as it can
    big     three 10 MiB entries
    last    an XADD with the maximum id into its own out stream (which it may write)

It learns run ids and cue ids as an operator would, from the API (the worst case: it knows
everything). Each phase writes a JSON report: every write the server refused, and counts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import Any

import httpx
import redis

from protocols import payloads as p
from protocols.codec import encode, make
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType as T
from protocols.states import Severity

MAX_ID = "18446744073709551615-18446744073709551615"
CHUNK = 1_000  # entries per pipelined round trip


class Attacker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.agent, self.victim = args.agent, args.victim
        self.keys = Keys(os.environ["CALLBOARD_PREFIX"])
        self.r = redis.Redis.from_url(os.environ["REDIS_URL"])
        self.api = httpx.Client(base_url=args.api, timeout=10)
        self.out = self.keys.out(self.agent)
        self.report: dict[str, Any] = {"refused": [], "allowed": [], "sent": 0}

    # -- helpers ---------------------------------------------------------------------------
    def try_command(self, *command: Any) -> None:
        """A write it has no right to: record whether the server refused it."""
        name = " ".join(str(c)[:60] for c in command[:4])
        try:
            self.r.execute_command(*command)
        except redis.exceptions.NoPermissionError:
            self.report["refused"].append(name)
            return
        except redis.ResponseError as exc:
            self.report["allowed"].append(f"{name} -> {exc}")
            return
        self.report["allowed"].append(name)

    def send(self, messages: list[bytes]) -> None:
        for i in range(0, len(messages), CHUNK):
            pipe = self.r.pipeline(transaction=False)
            for raw in messages[i : i + CHUNK]:
                pipe.xadd(self.out, {STREAM_FIELD: raw})
            pipe.execute()
        self.report["sent"] += len(messages)

    def msg(self, mt: T, payload: p.Payload, **fields: Any) -> bytes:
        fields.setdefault("from_agent", self.agent)
        return encode(make(mt, payload, **fields))

    def runs(self) -> list[dict[str, Any]]:
        """Every run the API shows, with its cues (what an attacker would look up)."""
        found = []
        for run in self.api.get("/v1/runs", params={"limit": 100}).json()["data"]:
            detail = self.api.get(f"/v1/runs/{run['run_id']}").json()
            found.append({"run_id": run["run_id"], "cues": list(detail.get("cues", {}))})
        return found

    # -- phases ----------------------------------------------------------------------------
    def attack(self) -> None:
        k, me, victim = self.keys, self.agent, self.victim
        # 1 and 4: the streams the hub writes, and other agents' streams
        for command in [
            ("XADD", k.inbox(me), MAX_ID, "m", "x"),
            ("XADD", k.inbox(me), "*", "m", "x"),
            ("XADD", k.dead, MAX_ID, "reason", "forged"),
            ("XADD", k.dead, "*", "reason", "forged", "sender", victim, "raw", "x"),
            ("XADD", k.dead, "MAXLEN", "0", "*", "m", "wipe"),
            ("XTRIM", k.dead, "MAXLEN", "0"),
            ("DEL", k.dead),
            ("XADD", k.out(victim), "*", "m", "x"),
            ("XADD", k.inbox(victim), MAX_ID, "m", "x"),
            ("XADD", k.broadcast, MAX_ID, "m", "x"),
            ("XADD", k.run_context("any"), "*", "m", "x"),
            ("HSET", k.run_context("any"), "k", "v"),
            ("SET", k.paused, "by the attacker"),
            ("XGROUP", "DESTROY", self.out, "hub"),
            ("XGROUP", "SETID", self.out, "hub", "$"),
            ("XACK", self.out, "hub", "0-1"),
        ]:
            self.try_command(*command)
        runs = self.runs()
        # an entry of its own out stream naming the message field twice: an innocent
        # message first, a hub-only type last (redis-py's parsed dict would keep the last)
        notice = self.msg(T.BROADCAST_NOTICE, p.BroadcastNotice(text="nothing to see"))
        go = p.CoordGo(cue_id="X", target_agents=[victim])
        self.r.execute_command(
            "XADD", self.out, "*", STREAM_FIELD, notice, STREAM_FIELD, self.msg(T.COORD_GO, go)
        )
        messages: list[bytes] = []
        for run in runs:
            run_id = run["run_id"]
            for cue_id in [*run["cues"], None]:
                # 2: critical escalations about every run and cue (others' and its own)
                body = p.EscalationError(severity=Severity.CRITICAL, cause=f"c-{uuid.uuid4()}",
                                         detail="pause everything")  # fmt: skip
                messages.append(self.msg(T.ESCALATION_ERROR, body, run_id=run_id, cue_id=cue_id))
                # 3: context into every run and cue, over the keys others wrote
                for key in ("built", "artifact", "evil-note"):
                    ctx = p.TaskContext(key=key, value=f"written by {me}")
                    messages.append(self.msg(T.TASK_CONTEXT, ctx, run_id=run_id, cue_id=cue_id))
                # acks and outcomes for cues that are not its own
                done = p.StatusCompleted(result={"forged": True})
                messages.append(self.msg(T.STATUS_COMPLETED, done, run_id=run_id, cue_id=cue_id))
                fail = p.StatusFailed(error="sabotage")
                messages.append(self.msg(T.STATUS_FAILED, fail, run_id=run_id, cue_id=cue_id))
        for n in range(1_000):  # run-less and made-up escalations: never a new slot each
            body = p.EscalationError(severity=Severity.CRITICAL, cause=f"x{n}", detail="!")
            run_id = None if n % 2 else f"made-up-{n}"
            messages.append(self.msg(T.ESCALATION_ERROR, body, run_id=run_id))
        # 4: forged senders, forged dead letters, rejections of entries it does not have
        for runs_ in runs[:5]:
            ctx = p.TaskContext(key="built", value="forged")
            messages.append(
                self.msg(T.TASK_CONTEXT, ctx, from_agent=victim, run_id=runs_["run_id"])
            )
        for entry_id in ("0-1", "+", MAX_ID, "1-0 junk", "9999999999999-0"):
            rejected = p.StatusRejected(entry_id=entry_id, reason=f"forged for {victim}",
                                        deliveries=10**30)  # fmt: skip
            messages.append(self.msg(T.STATUS_REJECTED, rejected))
        # a real entry of its own inbox (its WARNING), rejected with words meant to mislead:
        # the hub copies the entry itself and names who asked
        self.r.xgroup_create(k.inbox(me), me, id="0", mkstream=True)
        for _, entries in self.r.xreadgroup(me, "r1", {k.inbox(me): ">"}, count=1) or []:
            for entry_id, _ in entries:
                rejected = p.StatusRejected(entry_id=entry_id.decode(), deliveries=1,
                                            reason=f"dead-lettered by {victim}")  # fmt: skip
                messages += [self.msg(T.STATUS_REJECTED, rejected)] * 50  # once is enough
        go = p.CoordGo(cue_id="X", target_agents=[victim])  # a hub-only type
        messages.append(self.msg(T.COORD_GO, go))
        # 5: 20,000 stray completions into every run it found
        for n in range(20_000):
            # each run in turn; its cues and attempts 1-3 in turn (a run's own count: not
            # tied to n, which would give a run the same cue, or attempt, every time)
            run, k = runs[n % len(runs)], n // len(runs)
            cue_id = run["cues"][k % len(run["cues"])] if run["cues"] else "C"
            done = p.StatusCompleted(attempt=1 + k // len(run["cues"] or "C") % 3,
                                     result={"n": n})  # fmt: skip
            messages.append(self.msg(T.STATUS_COMPLETED, done, run_id=run["run_id"], cue_id=cue_id))
        self.send(messages)
        self.report["runs_attacked"] = [r["run_id"] for r in runs]

    def flood(self, n: int) -> None:
        """5: `n` entries naming made-up run ids (each a new id the hub never saw)."""
        batch: list[bytes] = []
        for i in range(n):
            done = p.StatusCompleted(result={"i": i})
            batch.append(self.msg(T.STATUS_COMPLETED, done, run_id=f"fake-{uuid.uuid4()}",
                                  cue_id=f"C{i}"))  # fmt: skip
            if len(batch) == 10 * CHUNK:
                self.send(batch)
                batch = []
        self.send(batch)

    def big(self) -> None:
        """5: three entries of 10 MiB each."""
        for i in range(3):
            self.r.xadd(self.out, {STREAM_FIELD: b"{" + bytes([97 + i]) * (10 * 1024 * 1024)})
        self.report["sent"] += 3

    def last(self) -> None:
        """Its own out stream, which it may write: harms no one but itself."""
        self.r.xadd(self.out, {STREAM_FIELD: b"{last"}, id=MAX_ID)
        self.try_command("XADD", self.out, "*", "m", "after the maximum id")  # it broke its own


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["attack", "flood", "big", "last"])
    parser.add_argument("--agent", required=True)
    parser.add_argument("--victim", required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    attacker = Attacker(args)
    began = time.monotonic()
    if args.phase == "flood":
        attacker.flood(args.flood)
    else:
        getattr(attacker, args.phase)()
    attacker.report["seconds"] = round(time.monotonic() - began, 2)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump(attacker.report, fh)


if __name__ == "__main__":
    main()
