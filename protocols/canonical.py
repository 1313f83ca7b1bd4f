"""The canonical form of a validated cuelist and its version: the SHA-256 of that form.

Canonical JSON: the validated model with every default filled in and `defaults` already
merged into the cues (so the block itself is left out), keys sorted, no whitespace,
UTF-8. Formatting, comments, key order and where a value was written (in `defaults` or
in the cue) do not change the version; any change of meaning does.
"""

from __future__ import annotations

import hashlib
import json

from protocols.cuelist import Cuelist


def canonical_data(cuelist: Cuelist) -> dict[str, object]:
    # Keys added later are left out while unused, so a cuelist that does not use them
    # keeps the version it had before they existed: `budget:`, a cue's `target` (when it
    # names `target_agents`) and `on_repeated_failure`, an inline contract's `labels`, a
    # cue's `warn_ahead` when it is the default (1).
    exclude = {"defaults"} if cuelist.budget is not None else {"defaults", "budget"}
    data = cuelist.model_dump(mode="json", exclude=exclude)
    for cue in data["cues"]:
        if cue.get("target") is None:
            cue.pop("target", None)
        elif cue.get("target_agents") is None:
            cue.pop("target_agents", None)
        if cue.get("on_repeated_failure") is None:
            cue.pop("on_repeated_failure", None)
        if cue.get("warn_ahead") == 1:
            cue.pop("warn_ahead", None)
    for contract in data["specialists"].values():
        if not contract.get("labels"):
            contract.pop("labels", None)
    return data


def canonical_json(cuelist: Cuelist) -> str:
    """A string that `Cuelist.model_validate_json` reads back into the same cuelist."""
    return json.dumps(
        canonical_data(cuelist),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def version_of(cuelist: Cuelist) -> str:
    """The SHA-256 hex digest of the canonical form."""
    return hashlib.sha256(canonical_json(cuelist).encode("utf-8")).hexdigest()
