"""The ``local_llama`` model server: the embedded default model, no network, no GPU, no API key.

It implements ``/v1/chat/completions`` on :class:`~gym_local_llama.engine.LlamaEngine`;
``/v1/responses`` is derived by gym-core's converter. Generation runs on the engine's own thread,
so the event loop keeps serving (health checks, new requests) while it works. Up to ``batch_size``
concurrent requests are decoded together, one token each per step (greedy results identical to
one at a time); more queue in arrival order. ``batch_size: 1`` decodes one request at a time.
A request whose handler is cancelled (its caller's ``x-gym-timeout`` budget ran out) stops at the
next step and frees its slot.

``stream: true`` (both routes): the text is sent as it is decoded (:meth:`LocalLlamaModel._stream`),
in the events of :mod:`gym_core.streaming`, each delta with its tokens' log-probs when they were
asked for; a client that goes away cancels its generation.

Token history (multi-turn training without re-tokenisation). When items of a request's ``input``
(assistant messages of ``messages`` on the chat route) carry the training fields a model call
returned (``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``, sent back as they
came), the prompt is the last such item's ``prompt_token_ids + generation_token_ids``, verbatim,
followed by the tokens of only what came after that item (tool outputs, new messages) rendered as
ChatML turns; instructions, tools and earlier items are not rendered again (they are in those ids).
A token history that cannot be used verbatim is a 422 (:func:`token_history`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import HTTPException
from litestar.response import Response, Stream
from msgspec import UNSET

from gym_core import ModelServer
from gym_core.convert import chat_completion_to_response, create_params_to_chat, echo_params
from gym_core.schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ChatToolCall,
    ChatToolCallFunction,
    ChatUsage,
    FunctionCall,
    Reasoning,
    ResponseCreateParams,
    decode_create_params,
    new_id,
)
from gym_core.schemas import Response as ResponsesResponse
from gym_core.streaming import EVENT_STREAM, ChatChunkStream, ResponseEventStream

from gym_local_llama.config import LocalLlamaConfig
from gym_local_llama.errors import GenerationCancelled
from gym_local_llama.grammar import Grammar, json_schema_grammar, tool_call_grammar
from gym_local_llama.tool_calls import settled_text

__all__ = ["LocalLlamaModel", "TokenHistoryError", "token_history"]

TRAINING_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value  # absent and null alike


class TokenHistoryError(ValueError):
    """The token ids a request carries cannot be used verbatim (answered with a 422)."""


def _generated(item: Any) -> bool:
    """Whether ``item`` (a Responses item or a chat message) is model output."""
    if isinstance(item, (FunctionCall, Reasoning)):
        return True
    return getattr(item, "role", None) == "assistant"


def _bundle(item: Any, where: str) -> tuple[list[int], list[int]] | None:
    values = [getattr(item, name, None) for name in TRAINING_FIELDS]
    values = [None if v is UNSET else v for v in values]
    present = [name for name, v in zip(TRAINING_FIELDS, values) if v is not None]
    if not present:
        return None
    if len(present) < 3:
        missing = [name for name in TRAINING_FIELDS if name not in present]
        raise TokenHistoryError(
            f"{where} has {', '.join(present)} but not {', '.join(missing)}: the three travel together"
        )
    prompt, generated, log_probs = values
    if not prompt or not generated:
        raise TokenHistoryError(f"{where}: prompt_token_ids and generation_token_ids must not be empty")
    if len(generated) != len(log_probs):
        raise TokenHistoryError(
            f"{where}: {len(generated)} generation_token_ids but {len(log_probs)} generation_log_probs"
        )
    return prompt, generated


def token_history(items: list[Any], where: str = "input") -> tuple[list[int], int] | None:
    """The token ids a conversation starts with, and the index of the item that ends them.

    ``items``: Responses input items or chat messages. Each item carrying training fields (the last
    item of a model call) must have all three, as many log-probs as generated ids, and prompt ids
    that begin with the previous such item's prompt + generated ids (the history only grows). No
    model output may follow the last such item: it would have to be re-tokenised. ``None``: no item
    carries token ids. Raises :class:`TokenHistoryError` otherwise.
    """
    expected: list[int] | None = None
    last: int | None = None
    for index, item in enumerate(items):
        bundle = _bundle(item, f"{where}[{index}]")
        if bundle is None:
            continue
        prompt, generated = bundle
        if expected is not None and prompt[: len(expected)] != expected:
            at = next((i for i, (a, b) in enumerate(zip(prompt, expected)) if a != b), min(len(prompt), len(expected)))
            raise TokenHistoryError(
                f"{where}[{index}].prompt_token_ids do not begin with the prompt_token_ids + generation_token_ids of "
                f"{where}[{last}] ({len(expected)} ids; they differ from position {at}): send the items back as the "
                "model returned them"
            )
        expected, last = prompt + generated, index
    if last is None or expected is None:
        return None
    for index in range(last + 1, len(items)):
        if _generated(items[index]):
            raise TokenHistoryError(
                f"{where}[{index}] is model output without token ids after {where}[{last}], the last item with them: "
                "its tokens are unknown (send back every model call's items with their training fields)"
            )
    return expected, last


class LocalLlamaModel(ModelServer):
    config: LocalLlamaConfig
    # What the engine does with each: README.md's table. Any other parameter is a 400 naming it.
    honours = frozenset(
        {
            "temperature",
            "top_p",
            "max_tokens",
            "stop",
            "seed",
            "tools",
            "logprobs",
            "parallel_tool_calls",
            "stream",
            "n",
            "tool_choice",
            "response_format",
            "top_logprobs",
        }
    )

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.engine: Any = None

    async def startup(self) -> None:
        from gym_local_llama.engine import LlamaEngine

        cfg = self.config
        self.engine = await asyncio.to_thread(
            LlamaEngine,
            cfg.model_path,
            n_ctx=cfg.n_ctx,
            n_threads=cfg.n_threads,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            batch_n_ctx=cfg.batch_n_ctx,
            weight_format=cfg.weight_format,
        )
        self.model_name = self.engine.model_name
        self.log.info(
            "loaded %s (%d threads, batches of up to %d requests)",
            self.engine.weights_path.name,
            self.engine.n_threads,
            self.engine.batch_size,
        )

    async def shutdown(self) -> None:
        if self.engine is not None:
            await self.engine.aclose()  # waits for a running generation: off the event loop

    def _token_history(self, items: list[Any], where: str) -> tuple[list[int], int] | None:
        try:
            found = token_history(items, where)
            if found is not None:
                self.engine.check_token_ids(found[0], f"{where}: the token history")
        except ValueError as exc:
            raise HTTPException(status_code=422, detail=f"{self.name}: {exc}") from exc
        return found

    def _responses_as_chat(self, params: ResponseCreateParams) -> tuple[ChatCompletionRequest, list[int] | None]:
        """``params`` as a chat request, and the token history it starts with (None: none)."""
        found = None if isinstance(params.input, str) else self._token_history(params.input, "input")
        if found is None:
            return create_params_to_chat(params), None
        history, last = found
        # Only the items after the history are rendered; instructions are in the history's ids.
        tail = msgspec.structs.replace(params, input=list(params.input[last + 1 :]), instructions=None)
        return create_params_to_chat(tail), history

    def _chat_after_history(self, request: ChatCompletionRequest) -> tuple[ChatCompletionRequest, list[int] | None]:
        """``request`` less the messages its token history holds, and that history (None: none)."""
        found = self._token_history(request.messages, "messages")
        if found is None:
            return request, None
        history, last = found
        return msgspec.structs.replace(request, messages=request.messages[last + 1 :]), history

    async def responses(self, params: ResponseCreateParams) -> Any:
        """``POST /v1/responses``: gym-core's conversion, unless the input carries a token history."""
        request, history = self._responses_as_chat(params)
        return chat_completion_to_response(await self._complete(request, history), params)

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        return await self._complete(*self._chat_after_history(request))

    # ------------------------------------------------------------------ streaming, token by token

    def routes(self) -> list[Any]:
        """gym-core's routes, with ``/v1/chat/completions`` and ``/v1/responses`` answering
        ``stream: true`` as the text is decoded (:meth:`_stream`)."""
        ours = {"/v1/chat/completions", "/v1/responses"}
        kept = [h for h in super().routes() if not set(getattr(h, "paths", ())) & ours]
        return [
            *kept,
            self.post_json("/v1/responses", self._responses_route),
            self.post_json("/v1/chat/completions", self._chat_route),
        ]

    async def _responses_route(self, http: Request) -> Any:
        raw = await http.body()
        obj = msgspec.json.decode(raw)
        self.check_params(obj, "responses")
        params = decode_create_params(obj if isinstance(obj, dict) else raw)
        if params.stream is not True:
            return await self.responses(params)
        request, history = self._responses_as_chat(params)
        stub = ResponsesResponse(model=self.model_name, status="in_progress")
        echo_params(stub, params)
        events = ResponseEventStream(stub)
        return await self._stream(request, history, events, lambda c: chat_completion_to_response(c, params))

    async def _chat_route(self, http: Request) -> Any:
        obj = msgspec.json.decode(await http.body())
        self.check_params(obj, "chat")
        body = msgspec.convert(obj, ChatCompletionRequest)
        if body.stream is not True:
            return await self.chat_completions(body)
        options = obj.get("stream_options") if isinstance(obj, dict) else None
        usage = isinstance(options, dict) and options.get("include_usage") is True
        request, history = self._chat_after_history(body)
        events = ChatChunkStream(self.model_name, usage, choices=_given(body.n, 1))
        return await self._stream(request, history, events, lambda c: c)

    async def _stream(
        self,
        request: ChatCompletionRequest,
        history: list[int] | None,
        events: ChatChunkStream | ResponseEventStream,
        answer: Callable[[ChatCompletion], Any],
    ) -> Stream | Response:
        """``request`` answered as server-sent ``events``, its text written as it is decoded.

        The request is checked and its prompt tokenized first (a bad one is a 4xx, not a stream).
        Then each piece of text the decoding settles (:class:`~gym_local_llama.decoding.Decoding`)
        that tool-call parsing cannot change (:func:`~gym_local_llama.tool_calls.settled_text`) is
        a delta, with the log-prob entries of the tokens its text completes (``logprobs: true``); the
        finished answer (``answer`` of its completion) ends the stream with the text and log-probs not
        yet sent (all of it for a reply that is a tool call), the calls, the usage. A client that
        goes away cancels the generation: its batch slot is free at the next step. An engine that
        only has ``agenerate`` (gym-train's trainer policy) streams the whole answer at the end.
        """
        if not hasattr(self.engine, "aprepare"):  # an engine with agenerate only (gym-train's policy)
            whole = answer(await self._complete(request, history))
            return Response(content=events.start() + events.finish(whole), media_type=EVENT_STREAM)
        messages, calls = self._generation_args(request, history)
        try:
            decodings = await asyncio.gather(*(self.engine.aprepare(messages, **kwargs) for kwargs in calls))
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=f"{self.name}: {exc}") from exc
        except RuntimeError as exc:
            raise self._unavailable(exc) from exc
        return Stream(self._events(decodings, request, events, answer), media_type=EVENT_STREAM)

    async def _events(
        self,
        decodings: list[Any],
        request: ChatCompletionRequest,
        events: ChatChunkStream | ResponseEventStream,
        answer: Callable[[ChatCompletion], Any],
    ) -> AsyncIterator[bytes]:
        """The stream's bytes: ``decodings`` (one per choice) decoded together, their pieces of text
        sent as they settle."""
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[tuple[int, str]] = asyncio.Queue()

        def listener(index: int) -> Callable[[str], None]:
            def on_text(piece: str) -> None:  # on the decoding thread
                try:
                    loop.call_soon_threadsafe(pieces.put_nowait, (index, piece))
                except RuntimeError:  # the loop is closed: nobody reads any more
                    pass

            return on_text

        for index, decoding in enumerate(decodings):
            decoding.on_text = listener(index)
        runs = [asyncio.ensure_future(self.engine.arun(decoding)) for decoding in decodings]
        generations = asyncio.gather(*runs)
        piece: asyncio.Future | None = None
        raw = [""] * len(decodings)
        sent = [""] * len(decodings)
        # Each delta carries its tokens' log-probs when they were asked for (OpenAI's per-chunk
        # logprobs): the tokens sent and the bytes of the text they spell, per choice.
        tokens_sent = [0] * len(decodings) if request.logprobs is True else None
        bytes_sent = [0] * len(decodings)
        try:
            yield events.start()
            while not generations.done():
                piece = asyncio.ensure_future(pieces.get())
                await asyncio.wait({piece, generations}, return_when=asyncio.FIRST_COMPLETED)
                if not piece.done():
                    break
                index, text = piece.result()
                raw[index] += text
                settled = settled_text(raw[index], decodings[index].tools)
                if len(settled) > len(sent[index]):
                    entries = None
                    if tokens_sent is not None:
                        size = len(settled.encode())
                        entries = self._logprobs_within(decodings[index], tokens_sent[index], size - bytes_sent[index])
                        tokens_sent[index] += len(entries)
                        bytes_sent[index] += sum(len(entry["bytes"]) for entry in entries)
                    yield events.text(settled[len(sent[index]) :], index, entries)
                    sent[index] = settled
            try:
                done = await generations
            except GenerationCancelled:  # pragma: no cover - only this stream cancels it, by going away
                return
            except RuntimeError as exc:
                yield events.error(self._unavailable(exc).detail)
                return
            try:
                yield events.finish(answer(self._completion(done, request)))
            except ValueError as exc:  # pragma: no cover - settled_text's promise broken: say so, not hang
                self.log.error("streamed text is not the answer's: %s", exc)
                yield events.error(f"{self.name}: {exc}")
        finally:
            for run in runs:  # a client that went away (or a choice failed): each decoding stops at its next step
                run.cancel()
            if piece is not None:
                piece.cancel()

    async def _complete(self, request: ChatCompletionRequest, history: list[int] | None) -> ChatCompletion:
        """The completion of ``request``; with ``history``, its messages are those after those ids.

        ``n`` > 1: n generations of the same prompt, submitted together, so the batch scheduler decodes
        the prompt once and copies its KV cells to the others' sequences (with ``batch_size`` 1 the
        prefix cache reuses them); with a ``seed``, choice ``i`` samples with ``seed + i``.
        """
        messages, calls = self._generation_args(request, history)
        try:
            generations = await asyncio.gather(*(self.engine.agenerate(messages, **kwargs) for kwargs in calls))
        except ValueError as exc:  # the engine's checks of the request (sampling values, content, prompt length)
            raise HTTPException(status_code=400, detail=f"{self.name}: {exc}") from exc
        except RuntimeError as exc:  # the engine closing, or llama.cpp failing: a typed failure to retry
            raise self._unavailable(exc) from exc
        return self._completion(generations, request)

    def _unavailable(self, exc: BaseException) -> HTTPException:
        self.log.warning("generation failed: %r", exc)
        return HTTPException(status_code=503, detail=f"{self.name}: the model could not answer: {exc}")

    def _generation_args(
        self, request: ChatCompletionRequest, history: list[int] | None
    ) -> tuple[list[dict], list[dict[str, Any]]]:
        """The messages and the engine's keyword arguments for each of the ``n`` generations of
        ``request`` (an ``HTTPException`` 400 for a request the server refuses)."""
        cfg = self.config
        stop = _given(request.stop, None)
        want_ids = request.return_token_ids is True
        want_logprobs = request.logprobs is True or want_ids
        seed = _given(request.seed, None)
        n = _given(request.n, 1)
        settings = dict(
            token_history=history,
            tools=_given(request.tools, None),
            temperature=_given(request.temperature, cfg.temperature),
            top_p=_given(request.top_p, cfg.top_p),
            max_tokens=_given(request.max_completion_tokens, _given(request.max_tokens, cfg.max_tokens)),
            stop=[stop] if isinstance(stop, str) else stop,
            return_token_ids=want_ids or want_logprobs,
            return_logprobs=want_logprobs,
        )
        top = _given(request.top_logprobs, 0)
        if top and request.logprobs is not True:
            raise HTTPException(status_code=400, detail=f"{self.name}: 'top_logprobs' needs 'logprobs': true")
        settings["top_logprobs"] = top if request.logprobs is True else 0
        try:
            tools, grammar = self._constraints(request)
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=f"{self.name}: {exc}") from exc
        settings["tools"] = tools
        settings["grammar"] = grammar
        calls = [{**settings, "seed": None if seed is None else seed + i} for i in range(n)]
        return msgspec.to_builtins(request.messages), calls

    def _completion(self, generations: list[Any], request: ChatCompletionRequest) -> ChatCompletion:
        completion_tokens = sum(g.completion_tokens for g in generations)
        return ChatCompletion(
            model=self.model_name,
            choices=[self._choice(index, g, request) for index, g in enumerate(generations)],
            usage=ChatUsage(
                prompt_tokens=generations[0].prompt_tokens,
                completion_tokens=completion_tokens,
                total_tokens=generations[0].prompt_tokens + completion_tokens,
            ),
        )

    def _constraints(self, request: ChatCompletionRequest) -> tuple[list[dict] | None, Grammar | None]:
        """The tools to offer and the grammar the reply must follow, from ``tool_choice`` and
        ``response_format`` (``ValueError``: a 400). A call that is required wins over a format."""
        tools = _given(request.tools, None)
        choice = request.tool_choice
        if choice == "none":
            return None, None  # no tools offered; no call parsed (see _choice)
        if choice == "required" or isinstance(choice, dict):
            name = None
            if isinstance(choice, dict):
                function = choice.get("function")
                name = function.get("name") if isinstance(function, dict) else choice.get("name")
                if choice.get("type") != "function" or not isinstance(name, str):
                    raise ValueError(f"tool_choice: {choice!r} is not supported (a function by name, or a string)")
            if not tools:
                raise ValueError("tool_choice asks for a call, and the request has no tools")
            return tools, tool_call_grammar(tools, name)
        if choice not in (None, "auto"):
            raise ValueError(f"tool_choice: {choice!r} is not one of 'auto', 'none', 'required' or a function")
        fmt = request.response_format
        if fmt is None or fmt.get("type") == "text":
            return tools, None
        if fmt.get("type") == "json_object":
            return tools, json_schema_grammar({"type": "object"})
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise ValueError("response_format: a json_schema format needs json_schema.schema")
            return tools, json_schema_grammar(spec["schema"], "response_format.json_schema.schema")
        raise ValueError(f"response_format: type {fmt.get('type')!r} is not supported (text, json_object, json_schema)")

    def _choice(self, index: int, generation: Any, request: ChatCompletionRequest) -> ChatChoice:
        message = ChatMessage(
            role="assistant", content=generation.text if generation.text or not generation.tool_calls else None
        )
        calls = [] if request.tool_choice == "none" else generation.tool_calls
        if request.parallel_tool_calls is False:
            calls = calls[:1]  # one call a turn at most: the first the model wrote
        if calls:
            message.tool_calls = [
                ChatToolCall(id=new_id("call"), function=ChatToolCallFunction(name=c.name, arguments=c.arguments))
                for c in calls
            ]
        if request.return_token_ids is True:
            message.prompt_token_ids = generation.prompt_token_ids
            message.generation_token_ids = generation.generation_token_ids
            message.generation_log_probs = generation.generation_log_probs
        logprobs = None
        if request.logprobs is True and generation.generation_token_ids is not None:
            logprobs = {
                "content": self._logprob_entries(
                    generation.generation_token_ids,
                    generation.generation_log_probs,
                    generation.generation_top_logprobs,
                )
            }
        return ChatChoice(index=index, message=message, finish_reason=generation.finish_reason, logprobs=logprobs)

    def _logprobs_within(self, decoding: Any, start: int, size: int) -> list[dict[str, Any]]:
        """The log-prob entries of ``decoding``'s tokens from ``start`` on whose bytes fit in ``size``
        bytes (of the text a delta sends): the entries that go with that delta. The tokens sampled
        so far only: the decoding thread appends a token's log-probs before the token."""
        entries: list[dict[str, Any]] = []
        for position in range(start, len(decoding.out_ids)):
            top = [decoding.top[position]] if decoding.top_logprobs else None
            entry = self._logprob_entries([decoding.out_ids[position]], [decoding.logprobs[position]], top)[0]
            size -= len(entry["bytes"])
            if size < 0:
                break
            entries.append(entry)
        return entries

    def _logprob_entries(
        self,
        token_ids: list[int],
        logprobs: list[float] | None,
        top: list[list[tuple[int, float]]] | None = None,
    ) -> list[dict[str, Any]]:
        """OpenAI's log-prob entries (the same shape in chat ``logprobs.content`` and Responses
        ``output_text.logprobs``): each sampled token, its log-prob and its ``top_logprobs``
        alternatives (the most likely tokens at that step, under the model's raw distribution)."""

        def entry(token_id: int, logprob: float) -> dict[str, Any]:
            piece = self.engine.llm.detokenize([token_id])
            return {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece)}

        alternatives = top or [[] for _ in token_ids]
        return [
            {**entry(token_id, logprob), "top_logprobs": [entry(i, lp) for i, lp in candidates]}
            for token_id, logprob, candidates in zip(
                token_ids, logprobs or [0.0] * len(token_ids), alternatives, strict=True
            )
        ]
