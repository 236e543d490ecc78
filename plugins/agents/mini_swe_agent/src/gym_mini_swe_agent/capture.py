"""The capturing proxy: an OpenAI-compatible chat endpoint on loopback that an external harness
calls as its model, forwarding each request to a gym model server with ``return_token_ids`` and
recording what came back: prompt ids, generated ids and log-probs per call.

The harness runs in a thread of its own; the proxy is a standard-library HTTP server in another
thread, and every model call it forwards runs on the agent's event loop (``Rollout.call_model``, so
the rollout record counts it and its failures stay typed). One proxy serves every rollout of an
agent server: a request names its rollout by its bearer key (the harness's API key), a random key
per rollout, forgotten when the rollout ends. Only loopback is bound.

Also here, free of any server: :func:`chain`, the chained trajectory of the captured calls.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from gym_core.convert import chat_to_create_params, response_to_chat_completion
from gym_core.schemas import ChatCompletionRequest, Message, Response, ResponseCreateParams, message_text

__all__ = ["Call", "Capture", "CapturingProxy", "chain", "token_fields"]

_request_decoder = msgspec.json.Decoder(ChatCompletionRequest)
_encoder = msgspec.json.Encoder()
_MAX_BODY = 64 * 1024 * 1024


def token_fields(response: Response) -> tuple[list[int], list[int], list[float]] | None:
    """The token ids and log-probs of one model call (on an output item carrying them), or None."""
    for item in reversed(response.output):
        prompt = getattr(item, "prompt_token_ids", None)
        generated = getattr(item, "generation_token_ids", None)
        log_probs = getattr(item, "generation_log_probs", None)
        if generated is None:
            continue
        if prompt is None or log_probs is None or len(generated) != len(log_probs):
            return None
        return prompt, generated, log_probs
    return None


@dataclass
class Call:
    """One model call the harness made, as the model server answered it."""

    response: Response
    prompt_token_ids: list[int] | None
    generation_token_ids: list[int] | None
    generation_log_probs: list[float] | None

    @property
    def text(self) -> str:
        return "".join(message_text(m) for m in self.response.output if isinstance(m, Message))

    def fields(self) -> dict[str, Any]:
        return {
            "prompt_token_ids": self.prompt_token_ids,
            "generation_token_ids": self.generation_token_ids,
            "generation_log_probs": self.generation_log_probs,
        }


@dataclass
class Capture:
    """What one rollout's harness asked and got, and how to reach the model.

    ``forward`` runs one Responses request on the model server (in the agent's event loop); a
    failure of it (a typed gym error) is kept in ``failure``, so the rollout fails with that reason
    rather than with whatever the harness made of an error status."""

    forward: Callable[[ResponseCreateParams], Awaitable[Response]]
    base: ResponseCreateParams  # the row's request: its model, sampling and metadata go with every call
    loop: asyncio.AbstractEventLoop
    call_timeout_s: float
    calls: list[Call] = field(default_factory=list)
    failure: BaseException | None = None
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def params_of(self, request: ChatCompletionRequest) -> ResponseCreateParams:
        """The Responses request for a chat request: the row's request with the harness's messages as
        its input (no tools: the harness parses commands from text), token ids asked for, and each assistant
        message the harness sends back replaced by the captured item it came from (token fields
        included), so a model server that honours token history need not re-tokenise it."""
        params = chat_to_create_params(request)
        said = {call.text: call for call in self.calls}
        items: list[Any] = []
        for item in params.input if isinstance(params.input, list) else []:
            if isinstance(item, Message) and item.role == "assistant" and (call := said.get(message_text(item))):
                items.extend(m for m in call.response.output if isinstance(m, Message))
            else:
                items.append(item)
        if isinstance(params.input, str):
            items = [Message(role="user", content=params.input)]
        return msgspec.structs.replace(
            self.base, input=items, tools=None, tool_choice=None, return_token_ids=True, stream=None
        )

    def complete(self, request: ChatCompletionRequest) -> Response:
        """Forward one chat request (called from the proxy's thread); record and return the answer."""
        if self.closed:
            raise _Refused(410, "this rollout has ended")
        params = self.params_of(request)
        future = asyncio.run_coroutine_threadsafe(self.forward(params), self.loop)  # type: ignore[arg-type]
        try:
            response = future.result(timeout=self.call_timeout_s)
        except FutureTimeout:
            future.cancel()
            raise _Refused(504, f"the model server gave no answer within {self.call_timeout_s} s") from None
        except Exception as exc:
            with self.lock:
                self.failure = self.failure or exc
            raise _Refused(502, f"the model server failed: {exc}") from None
        tokens = token_fields(response)
        prompt, generated, log_probs = tokens if tokens is not None else (None, None, None)
        with self.lock:
            self.calls.append(Call(response, prompt, generated, log_probs))
        return response


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class CapturingProxy:
    """``POST /v1/chat/completions`` on 127.0.0.1 (an ephemeral port), routed by bearer key."""

    def __init__(self) -> None:
        self._captures: dict[str, Capture] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = _encoder.encode(body)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - the base class's name
                try:
                    length = int(self.headers.get("content-length") or 0)
                    if length > _MAX_BODY:
                        raise _Refused(413, "request body too large")
                    body = self.rfile.read(length)
                    if not self.path.rstrip("/").endswith("/chat/completions"):
                        raise _Refused(404, f"no route {self.path}: the proxy serves /v1/chat/completions")
                    key = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
                    capture = proxy._captures.get(key)
                    if capture is None:
                        raise _Refused(401, "unknown rollout key")
                    try:
                        request = _request_decoder.decode(body)
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        raise _Refused(400, f"invalid chat request: {exc}") from None
                    if request.stream:
                        raise _Refused(400, "stream: the proxy answers whole completions only")
                    completion = response_to_chat_completion(capture.complete(request))
                    self._answer(200, completion)
                except _Refused as exc:
                    kind = "authentication_error" if exc.status == 401 else "proxy_error"
                    self._answer(exc.status, {"error": {"message": str(exc), "type": kind, "status": exc.status}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="gym-capturing-proxy", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def open(self, capture: Capture) -> str:
        """Route a new key to ``capture``; the key, which the harness sends as its API key."""
        key = secrets.token_urlsafe(24)
        self._captures[key] = capture
        return key

    def close(self, key: str) -> None:
        capture = self._captures.pop(key, None)
        if capture is not None:
            capture.closed = True

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def chain(calls: list[Call]) -> dict[str, Any]:
    """The chained trajectory of a harness's calls: one token sequence, each call's prompt extending
    the sequence so far (its new tokens masked 0) and its generated ids appended (masked 1, with
    their log-probs; the prompt's are 0.0).

    A call whose prompt does not begin with the sequence so far (the harness rewrote its history,
    or the server re-tokenised it differently) is counted in ``drifted_tokens`` (the previous ids it
    does not repeat in place); the sequence then starts over at that call's prompt, and
    ``segments`` counts the sequences the trajectory was cut into."""
    token_ids: list[int] = []
    mask: list[int] = []
    log_probs: list[float] = []
    per_call: list[dict[str, Any]] = []
    segments = 0
    for call in calls:
        if call.prompt_token_ids is None or call.generation_token_ids is None or call.generation_log_probs is None:
            per_call.append({"prompt_tokens": None, "generation_tokens": None, "drifted_tokens": 0})
            continue
        prompt = call.prompt_token_ids
        drift = 0
        if segments and prompt[: len(token_ids)] != token_ids:
            drift = len(token_ids) - sum(1 for a, b in zip(token_ids, prompt) if a == b)
        if not segments or drift:
            segments += 1
            token_ids, mask, log_probs = list(prompt), [0] * len(prompt), [0.0] * len(prompt)
        else:
            new = prompt[len(token_ids) :]
            token_ids += new
            mask += [0] * len(new)
            log_probs += [0.0] * len(new)
        token_ids += call.generation_token_ids
        mask += [1] * len(call.generation_token_ids)
        log_probs += list(call.generation_log_probs)
        per_call.append(
            {
                "prompt_tokens": len(prompt),
                "generation_tokens": len(call.generation_token_ids),
                "drifted_tokens": drift,
            }
        )
    return {
        "token_ids": token_ids,
        "loss_mask": mask,
        "log_probs": log_probs,
        "segments": segments,
        "turns": per_call,
        "token_drift": sum(t["drifted_tokens"] for t in per_call),
    }


def decode_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
