"""Every check of a cuelist in one call: load, schema, graph, contracts, conflicts -> a Report.

    validate_text(text, file=None, strict=False) -> Report   # YAML or JSON text (or bytes)
    validate_data(data, file=None, strict=False) -> Report   # a parsed mapping (a JSON body)
    load_cuelist(text_or_data, ...) -> (Cuelist, version)    # raises CuelistError

None of them raises for bad input; every problem found is an Issue in the report.
Under `strict`, warnings (conflicts, cues that wait for an operator) are errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import ValidationError

from protocols.canonical import version_of
from protocols.conflicts import find_conflicts
from protocols.contracts import Contract, check_handoff
from protocols.cuelist import MAX_CUES, Cue, CueDefaults, Cuelist, Handoff
from protocols.errors import CuelistError
from protocols.graph import CueGraph, CueNode, nodes_of, raised_by_hand_only
from protocols.issues import Issue, dotted, error, from_validation_error, warning
from protocols.loader import Document, LineMap, check_plain, load, paused_gc
from protocols.targeting import Candidate, Target

KNOWN_KEYS = frozenset().union(
    *(m.model_fields for m in (Cuelist, Cue, CueDefaults, Handoff, Contract, Target))
)


@dataclass
class Report:
    """The outcome of validating one cuelist; `cuelist` and `version` are set when valid."""

    cuelist: Cuelist | None
    issues: list[Issue] = field(default_factory=list)
    version: str | None = None
    file: str | None = None
    # places an issue found later (the registry's warnings) on its line, as the others
    place: Callable[[Issue, bool], Issue] | None = field(default=None, repr=False, compare=False)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def valid(self) -> bool:
        return self.cuelist is not None and not self.errors

    def to_dict(self) -> dict[str, Any]:
        """`{file, valid, name, version, errors: [...], warnings: [...]}` for JSON output."""
        as_dict = [i.model_dump(exclude={"file"}) for i in self.issues]
        return {
            "file": self.file,
            "valid": self.valid,
            "name": self.cuelist.cuelist if self.cuelist else None,
            "version": self.version,
            "errors": [d for d in as_dict if d["severity"] == "error"],
            "warnings": [d for d in as_dict if d["severity"] == "warning"],
        }


def validate_text(text: str | bytes, file: str | None = None, strict: bool = False) -> Report:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            issue = error("bad_encoding", f"not UTF-8 text (byte {exc.start})")
            return _finish(Report(None, [issue]), file)
    try:
        doc = load(text.removeprefix("\ufeff"), file)
    except CuelistError as exc:
        return _finish(Report(None, list(exc.issues)), file)
    return _validate(doc, file, strict)


def validate_data(
    data: Any, file: str | None = None, strict: bool = False, issues: Sequence[Issue] = ()
) -> Report:
    """Validate parsed data; `issues` are what parsing found (e.g. JSON's duplicate keys)."""
    try:
        check_plain(data)
    except CuelistError as exc:
        return _finish(Report(None, list(exc.issues)), file)
    return _validate(Document(data, LineMap(), list(issues)), file, strict)


def load_cuelist(
    source: str | bytes | dict[str, Any], file: str | None = None, strict: bool = False
) -> tuple[Cuelist, str]:
    """The validated cuelist and its version; raises CuelistError listing every error."""
    report = (
        validate_data(source, file, strict)
        if isinstance(source, dict)
        else validate_text(source, file, strict)
    )
    if report.cuelist is None or report.version is None or not report.valid:
        raise CuelistError(report.errors)
    return report.cuelist, report.version


# Keys that only exist at the top level, though an issue about them may name a cue.
TOP_LEVEL_ONLY = frozenset({"start"})


def _validate(doc: Document, file: str | None, strict: bool) -> Report:
    with paused_gc():
        return _finish(_checked(doc, strict), file)


def _checked(doc: Document, strict: bool) -> Report:
    data, lines = doc.data, doc.lines
    issues = list(doc.issues)
    if not isinstance(data, dict):
        issues.append(error("not_a_mapping", "a cuelist is a mapping with `cuelist:` and `cues:`"))
        return Report(None, issues)
    raw_cues = data.get("cues")
    if isinstance(raw_cues, list) and len(raw_cues) > MAX_CUES:
        message = f"{len(raw_cues)} cues, over the limit of {MAX_CUES}"
        issues.append(error("too_large", message, key="cues", line=lines.top.get("cues")))
        return Report(None, issues)
    cues = raw_cues if isinstance(raw_cues, list) else []
    duplicates = _duplicate_ids(cues, lines)
    issues += duplicates
    model: Cuelist | None = None
    try:
        model = Cuelist.model_validate(data)
    except ValidationError as exc:
        found = from_validation_error(exc, _locator(cues, lines), KNOWN_KEYS)
        issues += [i for i in found if not (duplicates and i.code == "duplicate_id")]
    nodes = nodes_of(model) if model else _raw_nodes(cues)
    start = model.start if model else _raw_start(data.get("start"))
    written = data.get("start") is not None
    graph, graph_issues = (
        CueGraph.build(nodes, start, start_written=written) if nodes else (None, [])
    )
    later = list(graph_issues)
    if model is not None and graph is not None:
        later += _handoff_issues(model) + _operator_warnings(model, graph)
        later += find_conflicts(model, graph) + _debugger_warnings(model)
    positions: dict[str, int] = {}
    for i, raw in enumerate(cues):
        positions.setdefault(_raw_id(raw) or "", i)
    issues += [_place(i, positions, lines, strict) for i in later]
    issues.sort(key=lambda i: i.line if i.line is not None else 1 << 30)
    report = Report(model, issues, place=partial(_placed, positions, lines))
    if report.valid and model is not None:
        report.version = version_of(model)
    else:
        report.cuelist = None
    return report


def _finish(report: Report, file: str | None) -> Report:
    report.file = file
    if file is not None:
        report.issues = [i.model_copy(update={"file": file}) for i in report.issues]
    return report


def _locator(cues: list[Any], lines: LineMap) -> Any:
    def locate(loc: tuple[str | int, ...]) -> tuple[str | None, str, int | None]:
        line = lines.at(loc)
        if len(loc) > 2 and loc[0] == "cues" and isinstance(loc[1], int):
            cue_id = _raw_id(cues[loc[1]]) if loc[1] < len(cues) else None
            if cue_id is not None:
                return cue_id, dotted(loc[2:]), line
        return None, dotted(loc), line

    return locate


def _raw_id(raw: Any) -> str | None:
    found = raw.get("id") if isinstance(raw, dict) else None
    return found if isinstance(found, str) else None


def _duplicate_ids(cues: list[Any], lines: LineMap) -> list[Issue]:
    first: dict[str, int] = {}
    issues = []
    for i, raw in enumerate(cues):
        cue_id = _raw_id(raw)
        if cue_id is None:
            continue
        if cue_id in first:
            where = lines.cue(first[cue_id])
            at = f" (first at line {where})" if where else ""
            message = f"cue id '{cue_id}' is used twice{at}"
            issues.append(
                error("duplicate_id", message, cue=cue_id, key="id", line=lines.cue(i, "id"))
            )
        else:
            first[cue_id] = i
    return issues


def _raw_nodes(cues: list[Any]) -> list[CueNode]:
    """The graph skeleton of cues that failed the schema, so graph errors are reported too."""
    nodes = []
    for raw in cues:
        cue_id = _raw_id(raw)
        if cue_id is None:
            continue
        deps = raw.get("depends_on")
        deps = tuple(d for d in deps if isinstance(d, str)) if isinstance(deps, list) else ()
        nxt = raw.get("auto_follow")
        nodes.append(CueNode(cue_id, deps, nxt if isinstance(nxt, str) else None))
    return nodes


def _raw_start(raw: Any) -> list[str] | None:
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return raw
    return None


def _placed(positions: dict[str, int], lines: LineMap, issue: Issue, strict: bool) -> Issue:
    return _place(issue, positions, lines, strict)


def _place(issue: Issue, positions: dict[str, int], lines: LineMap, strict: bool) -> Issue:
    """Fill in the line from the cue and key an issue names; warnings become errors if strict."""
    update: dict[str, Any] = {}
    if strict and issue.severity == "warning":
        update["severity"] = "error"
    if issue.line is None:
        key = (issue.key or "").split(".")[0].split("[")[0] or None
        if key in TOP_LEVEL_ONLY:  # e.g. `start` naming a cue: the line of `start:` itself
            update["line"] = lines.top.get(key)
        elif issue.cue is not None:
            index = positions.get(issue.cue)
            update["line"] = lines.cue(index, key) if index is not None else None
        elif key is not None:
            update["line"] = lines.top.get(key)
    return issue.model_copy(update=update) if update else issue


def _handoff_issues(
    cuelist: Cuelist, registered: Mapping[str, Contract] | None = None
) -> list[Issue]:
    """Static contract checks of each cue's `handoff`. Without `registered`: where the
    sender's contract is inline (errors). With the registry's contracts: the checks an
    inline contract did not make, with the registry's for the agents not inline (warnings:
    an agent registers its contract, and may change it, before the cue runs)."""
    issues = []
    inline = cuelist.specialists
    make = error if registered is None else warning
    for cue in cuelist.cues:
        if cue.handoff is None:
            continue
        to = cue.handoff.to
        receiver = inline.get(to)
        receiver_new = False  # the receiver's contract is the registry's
        if registered is not None and receiver is None:
            receiver = registered.get(to)
            receiver_new = receiver is not None
        for agent in cue.fixed_agents:  # a `target` is only known when the cue fires
            sender_new = registered is not None and agent not in inline
            sender = registered.get(agent) if registered is not None and sender_new else None
            sender = sender or inline.get(agent)
            if sender is None:
                continue
            if registered is not None and not sender_new and not receiver_new:
                continue  # both checked as inline contracts
            whose = "registered contract" if sender_new else "contract"
            if (registered is None or sender_new) and to not in sender.handoff_to:
                allowed = ", ".join(sender.handoff_to) or "nobody"
                message = f"{agent} may not hand off to {to}: its {whose} hands off to {allowed}"
                issues.append(make("handoff_not_allowed", message, cue=cue.id, key="handoff.to"))
            missing = check_handoff(agent, sender, to, receiver, cue.handoff.context)
            if missing:
                message = (
                    f"{to} requires {', '.join(missing)}, which {agent} does not provide and "
                    "the handoff does not declare in handoff.context"
                )
                if registered is not None:
                    message += " (by the registry's contracts, as they are now)"
                issues.append(
                    make("handoff_missing_keys", message, cue=cue.id, key="handoff.context")
                )
    return issues


def _operator_warnings(cuelist: Cuelist, graph: CueGraph) -> list[Issue]:
    """Cues that can only start by an operator's hand, without saying so."""
    raisers = cuelist.raisers()
    entries = set(graph.entry_cues)
    issues = []
    for cue in cuelist.cues:
        if not cue.manual and cue.id not in entries and not graph.graph.in_degree(cue.id):
            message = (
                f"{cue.id} has no predecessors and is not an entry cue, so it waits for an "
                "operator GO: add it to start, or say so with manual: true"
            )
            issues.append(warning("needs_operator", message, cue=cue.id))
        for flag in cue.conditions:
            issue = _condition_issue(cue.id, flag, raisers.get(flag, []), graph)
            if issue is not None:
                issues.append(issue)
    return issues


def _condition_issue(cue_id: str, flag: str, raisers: list[str], graph: CueGraph) -> Issue | None:
    """A warning when only an operator can raise the flag the cue waits for: no cue raises
    it, or only the cue itself and cues after it, which wait for it."""
    if not raisers:
        message = f"no cue raises '{flag}': {cue_id} waits until it is raised by hand"
        return warning("condition_never_raised", message, cue=cue_id, key="conditions")
    if raised_by_hand_only(cue_id, raisers, graph.descendants):
        who = [f"{c} itself" if c == cue_id else c for c in raisers]
        message = (
            f"'{flag}' is raised only by {' and '.join(who)}, after {cue_id} completes: "
            f"{cue_id} waits until it is raised by hand"
        )
        return warning("condition_raised_downstream", message, cue=cue_id, key="conditions")
    return None


def _debugger_warnings(cuelist: Cuelist) -> list[Issue]:
    """`on_repeated_failure` that cannot do what it says: a debugger that is the cue's own
    target, or `retries` that never apply."""
    issues = []
    for cue in cuelist.cues:
        repeated = cue.on_repeated_failure
        if repeated is None:
            continue
        key = "on_repeated_failure"
        if repeated.debugger in cue.fixed_agents:
            message = (
                f"{repeated.debugger} is a target of {cue.id} and its debugger: a failing "
                "agent diagnoses itself"
            )
            issues.append(warning("debugger_is_target", message, cue=cue.id, key=key))
        if cue.retries:
            message = (
                f"{cue.id} has on_repeated_failure, so `retries: {cue.retries}` does not "
                f"apply: it is tried {repeated.after} times, then the debugger decides"
            )
            issues.append(warning("retries_unused", message, cue=cue.id, key="retries"))
    return issues


def target_warnings(cuelist: Cuelist, agents: Sequence[Candidate]) -> list[Issue]:
    """Warnings for cues whose `target` no agent in `agents` matches now (the hub's registry,
    on submit and on POST /v1/cuelists/validate; `callboard validate` offline cannot know).
    Not errors: the cue waits when it fires until a matching agent comes online."""
    issues = []
    for cue in cuelist.cues:
        target = cue.target
        if target is None:
            continue
        matching = [a.name for a in agents if target.matches(a)]
        need = target.count or 1
        if len(matching) < need:
            found = f"only {', '.join(matching)} match" if matching else "none matches"
            message = (
                f"no registered agent matches target {target.describe()} now ({found}): "
                f"{cue.id} will wait when it fires until {need} matching agent"
                f"{'s are' if need > 1 else ' is'} online"
            )
            issues.append(warning("no_agent_matches", message, cue=cue.id, key="target"))
    return issues


def with_registry_warnings(report: Report, agents: Sequence[Candidate], strict: bool) -> Report:
    """The report with what the registry's agents (online now) say of the cuelist added:
    `target_warnings`, and the handoff checks against their registered contracts for the
    agents the cuelist has no inline contract of (placed on their lines when the source is
    known only by cue: the cue's line); under `strict` they are errors, as other warnings."""
    if report.cuelist is None:
        return report
    registered = {
        a.name: Contract(provides=list(a.provides), requires=list(a.requires),
                         handoff_to=list(a.handoff_to))
        for a in agents
    }  # fmt: skip
    found = target_warnings(report.cuelist, agents)
    found += _handoff_issues(report.cuelist, registered)
    if report.place is not None:
        found = [report.place(i, strict) for i in found]
    elif strict:
        found = [i.model_copy(update={"severity": "error"}) for i in found]
    if report.file is not None:
        found = [i.model_copy(update={"file": report.file}) for i in found]
    report.issues = [*report.issues, *found]
    if not report.valid:
        report.cuelist, report.version = None, None
    return report
