"""The ``structured_outputs`` resources server: no tools, a verifier of schema adherence.

A row gives a JSON Schema (``schema_str``) and either a text format (``schema_type``: json, yaml,
xml, toml, csv; text mode) or ``response_mode: tool_call``, in which the model must call one
function whose arguments (or ``arguments[tool_payload_key]``) match the schema. The reward is 1.0
when the output parses and validates against the schema made strict (every declared property
required, no other property allowed), else 0.0 with ``error_type`` and ``error_message`` saying
why. Content is not checked. Parsing and validation run in worker processes under a time and
memory limit (:mod:`gym_structured_outputs.verify`).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import msgspec

from gym_core import ResourcesServer, Session
from gym_core.schemas import LenientDecoder, VerifyRequest, VerifyResponse, function_calls, output_text
from gym_core.workers import WorkerError, WorkerMemoryError, WorkerPoolClosed, WorkerTimeout

from gym_structured_outputs.config import StructuredOutputsConfig
from gym_structured_outputs.verify import Verdict, check_text, check_tool_arguments, make_checker_pool

__all__ = [
    "DESCRIPTIVE_FIELDS",
    "ECHOED_FIELDS",
    "StructuredOutputsVerifyRequest",
    "StructuredOutputsVerifyResponse",
    "StructuredOutputsServer",
    "decode_verify_body",
]

log = logging.getLogger(__name__)

# Row fields that only describe the task (for metric breakdowns); echoed in the verdict.
DESCRIPTIVE_FIELDS = (
    "problem_type",
    "schema_repr",
    "source_format",
    "num_turns",
    "source_record_id",
    "tool_schema_mode",
    "tool_choice",
    "parallel_tool_calls",
    "source_schema_type",
    "num_tools",
    "num_distractors",
    "has_distractors",
    "instruction_layout",
    "instruction_detail_level",
    "system_instruction_style",
    "tool_name_style",
    "distractor_style",
    "tool_union_mode",
)
ECHOED_FIELDS = ("schema_type", "response_mode", "tool_name", "tool_payload_key", *DESCRIPTIVE_FIELDS)


class StructuredOutputsVerifyRequest(VerifyRequest, kw_only=True):
    schema_str: str
    # null reads as the default, like an absent field
    schema_type: Literal["json", "yaml", "xml", "toml", "csv"] | None = "json"
    response_mode: str | None = "text"
    tool_name: str | None = None
    tool_payload_key: str | None = None
    # Descriptive only, any JSON value (the datasets write strings, numbers and booleans).
    problem_type: Any = None
    schema_repr: Any = None
    source_format: Any = None
    num_turns: Any = None
    source_record_id: Any = None
    tool_schema_mode: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    source_schema_type: Any = None
    num_tools: Any = None
    num_distractors: Any = None
    has_distractors: Any = None
    instruction_layout: Any = None
    instruction_detail_level: Any = None
    system_instruction_style: Any = None
    tool_name_style: Any = None
    distractor_style: Any = None
    tool_union_mode: Any = None


# The verdict: reward, error_type and error_message (null when valid), then the echoed task fields,
# declared once above. Every field is always written, nulls included.
StructuredOutputsVerifyResponse = msgspec.defstruct(
    "StructuredOutputsVerifyResponse",
    [
        ("error_type", str | None, None),
        ("error_message", str | None, None),
        *(
            (f.name, f.type, f.default)
            for f in msgspec.structs.fields(StructuredOutputsVerifyRequest)
            if f.name in ECHOED_FIELDS
        ),
    ],
    bases=(VerifyResponse,),
    kw_only=True,
    omit_defaults=False,
    module=__name__,
)

_verify_decoder = LenientDecoder(StructuredOutputsVerifyRequest)


def _stringify_object_arguments(body: dict[str, Any]) -> bool:
    """Turn function calls' object ``arguments`` into JSON text in place; whether any was."""
    response = body.get("response")
    output = response.get("output") if isinstance(response, dict) else None
    changed = False
    for item in output if isinstance(output, list) else ():
        if isinstance(item, dict) and item.get("type") == "function_call" and isinstance(item.get("arguments"), dict):
            item["arguments"] = json.dumps(item["arguments"])
            changed = True
    return changed


def decode_verify_body(data: bytes) -> StructuredOutputsVerifyRequest:
    """A ``/verify`` body; a function call whose ``arguments`` is an object rather than JSON text
    is accepted as is (the spec allows it; gym's wire type wants text)."""
    try:
        return _verify_decoder.decode(data)
    except msgspec.ValidationError:
        body = msgspec.json.decode(data)
        if not (isinstance(body, dict) and _stringify_object_arguments(body)):
            raise
        return _verify_decoder.convert(body)


class StructuredOutputsServer(ResourcesServer):
    config: StructuredOutputsConfig

    async def startup(self) -> None:
        # Warm workers (parsers and validator imported) before the server says it is ready.
        self.pool = make_checker_pool(
            self.config.verify_workers,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=self.config.verify_memory_limit_mb,
        )
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    def routes(self) -> list[Any]:
        # /verify decodes with decode_verify_body (object arguments allowed); the rest as the base.
        handlers = [h for h in super().routes() if "/verify" not in (getattr(h, "paths", None) or ())]

        async def verify(request: Any) -> Any:
            body = decode_verify_body(await request.body())
            session = self.session(request)
            self.refuse_forged(session)  # as gym's own /verify: never score a forged session
            return await self.verify(session, body)

        return [*handlers, self.post_json("/verify", verify)]

    async def verify(self, session: Session, body: StructuredOutputsVerifyRequest) -> Any:
        if body.response_mode == "tool_call":
            verdict = await self._check_tool_call(body)
        else:
            text = output_text(body.response)
            if not text.strip():  # decided here: no need to wake a worker
                verdict = Verdict.error("empty_response", "the response has no output text")
            else:
                verdict = await self._in_worker(
                    check_text, text, body.schema_str, body.schema_type or "json", self.config.xml_coerce_types
                )
        echoed = {name: getattr(body, name) for name in ECHOED_FIELDS}
        # The values in force, when the row wrote null.
        echoed.update(schema_type=body.schema_type or "json", response_mode=body.response_mode or "text")
        return StructuredOutputsVerifyResponse(
            reward=1.0 if verdict.valid else 0.0,
            error_type=verdict.error_type,
            error_message=verdict.error_message,
            **echoed,
        )

    async def _check_tool_call(self, body: StructuredOutputsVerifyRequest) -> Verdict:
        response = body.response
        if response.error:
            return Verdict.error("api_error", f"the response carries an error: {json.dumps(response.error)}")
        calls = function_calls(response)
        if not calls:
            return Verdict.error("missing_tool_call", "the response has no function call")
        if len(calls) > 1:
            return Verdict.error("multiple_tool_calls", f"the response has {len(calls)} function calls; expected one")
        call = calls[0]
        if body.tool_name and call.name != body.tool_name:
            return Verdict.error("wrong_tool_name", f"called {call.name!r}; expected {body.tool_name!r}")
        return await self._in_worker(check_tool_arguments, call.arguments, body.schema_str, body.tool_payload_key)

    async def _in_worker(self, fn: Any, *args: Any) -> Verdict:
        """``fn(*args)`` in a worker, within the time limit; a check that does not finish is a verdict."""
        try:
            return await self.pool.run(fn, *args)
        except WorkerTimeout:
            return Verdict.error("timeout", f"parsing and validating ran past {self.config.verify_timeout_s:g} s")
        except WorkerMemoryError:
            return Verdict.error(
                "memory_limit", f"parsing and validating ran out of {self.config.verify_memory_limit_mb} MB"
            )
        except WorkerPoolClosed:
            raise
        except WorkerError as exc:
            log.warning("structured output check failed: %s", exc)
            return Verdict.error("verifier_error", str(exc))
