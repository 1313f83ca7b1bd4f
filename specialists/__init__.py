"""The specialist SDK: subclass `Specialist`, override its hooks, run it with `main()`.

from specialists import Result, Handoff, Specialist, Usage

class Tester(Specialist):
    kind = "tester"

    async def execute(self, cue):
        report = await run_tests(cue.action["suite"])
        return Result(result={"passed": report.ok}, context={"test_report": report.text},
                      handoff=Handoff(to="specialist-deploy", context={"tested_build": 1}),
                      usage=Usage(tokens=report.tokens, cost=report.cost))

Tester("specialist-test").main()   # or: callboard specialist mymod:Tester --agent ...
"""

from protocols.payloads import Usage
from specialists.base import Specialist, main
from specialists.cue import Cue, Entry, Handoff, Job, Result
from specialists.errors import Reject, Retry, SpecialistSignal

__all__ = [
    "Cue",
    "Entry",
    "Handoff",
    "Job",
    "Reject",
    "Result",
    "Retry",
    "Specialist",
    "SpecialistSignal",
    "Usage",
    "main",
]
