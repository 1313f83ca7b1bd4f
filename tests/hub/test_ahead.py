"""`warn_ahead`: how far ahead of a GO the engine warns, and what a warned cue may not do."""

from __future__ import annotations

from protocols.messages import MessageType as T
from protocols.states import CueState, FiredBy, RunStatus
from tests.hub.sim import Sim, plan_of


def chain(n: int, warn_ahead: object = None, extra: str = "") -> str:
    """An auto-follow chain C1 -> ... -> Cn on agent a (`warn_ahead` in its defaults)."""
    defaults = f"defaults: {{warn_ahead: {warn_ahead}{extra}}}\n" if warn_ahead is not None else ""
    cues = "".join(
        f"  - {{id: C{i}, target_agents: [a]{f', auto_follow: C{i + 1}' if i < n else ''}}}\n"
        for i in range(1, n + 1)
    )
    return f"cuelist: chain\n{defaults}cues:\n{cues}"


def go(sim: Sim, cue: str, attempt: int = 1) -> None:
    """Bring a cue from WARNING to GO (agent a answers both phases)."""
    if sim.cue(cue).state is CueState.WARNING:
        sim.ack_warning("a", cue, attempt)
    sim.ack_standby("a", cue, attempt)
    assert sim.cue(cue).state is CueState.GO


def warned(sim: Sim) -> list[str]:
    """Cues in WARNING that were warned early, in id order."""
    return sorted(
        c for c, cr in sim.run().cues.items() if cr.state is CueState.WARNING and cr.early
    )


def sent_to(sim: Sim, mt: T) -> list[str]:
    return [m.cue_id or "" for _, m in sim.take_sent(mt)]


def test_default_warns_one_cue_ahead() -> None:
    sim = Sim(plan_of(chain(4)))
    sim.start()
    assert warned(sim) == []
    go(sim, "C1")
    assert warned(sim) == ["C2"]
    assert sim.cue("C3").state is CueState.WAITING


def test_warn_ahead_two_warns_two_cues_and_slides_with_each_go() -> None:
    sim = Sim(plan_of(chain(5, 2)))
    sim.start()
    assert warned(sim) == ["C2"]  # two from a GO: prepares beside C1
    go(sim, "C1")
    assert warned(sim) == ["C2", "C3"]
    assert sim.cue("C3").fired_by is FiredBy.AUTO_FOLLOW
    sim.take_sent()
    sim.ack_warning("a", "C2")
    sim.ack_warning("a", "C3")  # both prepared while C1 runs: no STANDBY yet
    assert warned(sim) == ["C2", "C3"]
    assert "predecessor" in (sim.cue("C3").reason or "")
    assert not sim.take_sent(T.COORD_STANDBY)
    sim.complete("a", "C1")
    assert sent_to(sim, T.COORD_STANDBY) == ["C2"]  # C3 waits for C2 to complete
    sim.ack_standby("a", "C2")
    assert warned(sim) == ["C3", "C4"]  # C4 is now two cues from a GO
    assert sim.cue("C5").state is CueState.WAITING
    sim.complete("a", "C2")
    assert sent_to(sim, T.COORD_STANDBY) == ["C3"]
    sim.ack_standby("a", "C3")
    assert warned(sim) == ["C4", "C5"]
    for cue, after in (("C3", "C4"), ("C4", "C5")):
        sim.complete("a", cue)
        go(sim, after)
    sim.complete("a", "C5")
    assert sim.run().status is RunStatus.SUCCESS
    assert [len(sim.cue(f"C{i}").gos) for i in range(1, 6)] == [1] * 5  # GO recorded once


def test_warn_ahead_all_warns_the_whole_chain_with_its_first_cue() -> None:
    sim = Sim(plan_of(chain(6, "all")))
    sim.start()
    assert warned(sim) == ["C2", "C3", "C4", "C5", "C6"]
    assert sim.cue("C1").state is CueState.WARNING and not sim.cue("C1").early


def test_predecessor_failure_stands_down_every_warned_cue() -> None:
    sim = Sim(plan_of(chain(5, 3)))
    sim.start()
    go(sim, "C1")
    sim.ack_warning("a", "C2")  # one prepared, the others only warned
    assert warned(sim) == ["C2", "C3", "C4"]
    sim.take_sent()
    sim.fail("a", "C1", error="compiler exploded")
    assert sorted(sent_to(sim, T.COORD_STANDDOWN)) == ["C2", "C3", "C4"]
    states = [sim.cue(f"C{i}").state for i in range(1, 6)]
    assert states == [CueState.FAILED] + [CueState.BLOCKED] * 4
    assert "C1" in (sim.cue("C4").reason or "")  # the root cause, transitively
    assert sim.run().status is RunStatus.FAILED


def test_failure_of_a_warned_cue_stands_down_the_ones_warned_after_it() -> None:
    sim = Sim(plan_of(chain(4, 3)))
    sim.start()
    go(sim, "C1")
    sim.complete("a", "C1")
    sim.ack_warning("a", "C2")
    sim.ack_standby("a", "C2")
    sim.take_sent()
    sim.fail("a", "C2")
    assert sorted(sent_to(sim, T.COORD_STANDDOWN)) == ["C3", "C4"]
    assert sim.cue("C4").state is CueState.BLOCKED


DAG = """
cuelist: dag
defaults: {warn_ahead: 2}
cues:
  - {id: A, target_agents: [a]}
  - {id: B, target_agents: [a], depends_on: [A]}
  - {id: C, target_agents: [a], depends_on: [A]}
  - {id: D, target_agents: [a], depends_on: [B, C]}
  - {id: E, target_agents: [a], depends_on: [D]}
  - {id: M, target_agents: [a], manual: true}
  - {id: F, target_agents: [a], depends_on: [B, M]}
"""


def test_dag_join_is_warned_by_its_farthest_branch_and_never_past_a_cue_not_called() -> None:
    sim = Sim(plan_of(DAG))
    sim.start()
    assert warned(sim) == ["B", "C"]  # A is in its call: B and C are two from a GO
    go(sim, "A")
    # B and C are one from A's GO, D two (through both); E would be three; F also waits
    # for M, an operator's cue not called yet, so no GO leads to it
    assert warned(sim) == ["B", "C", "D"]
    assert sim.cue("E").state is CueState.WAITING
    assert sim.cue("F").state is CueState.WAITING
    sim.complete("a", "A")
    go(sim, "B")
    # C, in its own call now (A is done), is no GO yet: E is not anchored through it
    assert warned(sim) == ["D"]
    go(sim, "C")
    assert warned(sim) == ["D", "E"]
    assert sim.cue("F").state is CueState.WAITING


def test_a_cue_with_warn_ahead_zero_is_not_warned_early_nor_warned_through() -> None:
    text = chain(4, "all").replace(
        "{id: C3, target_agents: [a]", "{id: C3, target_agents: [a], warn_ahead: 0"
    )
    sim = Sim(plan_of(text))
    sim.start()
    go(sim, "C1")
    assert warned(sim) == ["C2"]  # C3 never early, and C4 is not anchored past it
    sim.complete("a", "C1")
    go(sim, "C2")
    assert warned(sim) == []
    sim.complete("a", "C2")
    assert sim.cue("C3").state is CueState.WARNING and not sim.cue("C3").early
    go(sim, "C3")
    assert warned(sim) == ["C4"]


def test_early_warning_off_in_the_hub_wins_over_warn_ahead() -> None:
    sim = Sim(plan_of(chain(3, "all")))
    sim.engine.early_warning = False
    sim.start()
    go(sim, "C1")
    assert warned(sim) == []


def test_a_retried_early_cue_is_early_still_no_standby_before_its_predecessor() -> None:
    sim = Sim(plan_of(chain(3, 2, extra=", retries: 1")))
    sim.start()
    go(sim, "C1")
    assert warned(sim) == ["C2", "C3"]
    sim.ack_warning("a", "C2")
    sim.advance(6)  # C3's ack.warning never came (5 s): stood down, warned again
    assert sim.cue("C3").attempt == 2
    assert warned(sim) == ["C2", "C3"]
    sim.take_sent()
    sim.ack_warning("a", "C3", attempt=2)
    assert sim.cue("C3").state is CueState.WARNING  # prepared, but C2 has not completed
    assert not sim.take_sent(T.COORD_STANDBY)
    sim.complete("a", "C1")
    sim.ack_standby("a", "C2")
    sim.complete("a", "C2")
    assert sim.cue("C3").state is CueState.STANDBY


def test_a_cue_waiting_for_a_condition_is_warned_once_raised_and_a_predecessor_moves() -> None:
    text = chain(4, "all").replace(
        "{id: C1, target_agents: [a]", "{id: C1, target_agents: [a], raises: [built]"
    )
    text = text.replace(
        "{id: C3, target_agents: [a]", "{id: C3, target_agents: [a], conditions: [built]"
    )
    sim = Sim(plan_of(text))
    sim.start()
    assert warned(sim) == ["C2"]  # C3 waits for its condition, so C4 has no GO ahead
    go(sim, "C1")
    assert warned(sim) == ["C2"]
    sim.complete("a", "C1")  # raises `built`; C2, the next to GO now, walks on
    assert warned(sim) == ["C3", "C4"]
    assert sim.cue("C2").state is CueState.WARNING and not sim.cue("C2").early


JOIN = """
cuelist: join
start: [A, B]
cues:
  - {id: A, target_agents: [a]}
  - {id: B, target_agents: [b]}
  - {id: C, target_agents: [a], depends_on: [A, B]}
"""


def test_by_default_a_join_is_warned_once_every_unfinished_predecessor_had_its_go() -> None:
    sim = Sim(plan_of(JOIN))
    sim.start()
    go(sim, "A")
    assert warned(sim) == []  # B is in its call, not GO'd
    sim.ack_warning("b", "B")
    sim.ack_standby("b", "B")
    assert warned(sim) == ["C"]
    sim.complete("a", "A")
    assert warned(sim) == ["C"]  # B runs still: no STANDBY
    sim.ack_warning("a", "C")
    assert sim.cue("C").state is CueState.WARNING
    sim.complete("b", "B")
    assert sim.cue("C").state is CueState.STANDBY
