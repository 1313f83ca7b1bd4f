"""How the MCP tools take their arguments: as JSON sent them, checked against the function's
signature (the SDK's argument model) with no guessing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import ToolAnnotations
from pydantic import ConfigDict


class AsSent(FuncMetadata):
    """The SDK's argument model, validated strictly and as sent. The SDK's own validation
    reads a string as JSON for a field that is not a string (`"{...}"` becomes an object) and
    is pydantic's lax mode (`true` and `"2"` are numbers, `"yes"` and `1` are booleans): a
    client's slip would be acted on as a guess. Refused, it is the SDK's tool error for bad
    arguments (`Error executing tool ...`), which names the argument and what it should be.

    An integer argument says `strict=False` and `AS_JSON_NUMBER` (protocols/payloads.py) to
    take 5.0 as JSON Schema's "integer" does, as the REST API does."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        model = self.arg_model.model_validate(arguments_to_validate)
        return model.model_dump_one_level()


def tool_as_sent(fn: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    """The SDK's tool for `fn`, its arguments validated by `AsSent`."""
    made = Tool.from_function(fn, annotations=annotations)
    meta = made.fn_metadata
    fields = {name: getattr(meta, name) for name in FuncMetadata.model_fields}
    made.fn_metadata = AsSent(**{**fields, "arg_model": _strict(meta.arg_model)})
    return made


def _strict(model: type[ArgModelBase]) -> type[ArgModelBase]:
    """`model`, strict by its config: unlike `model_validate(strict=True)`, a field that
    says otherwise (an integer's `strict=False`) is still heard. The same name, so the
    same schema."""
    config = ConfigDict(**{**model.model_config, "strict": True})
    namespace = {"model_config": config, "__module__": model.__module__}
    return type(model.__name__, (model,), namespace)
