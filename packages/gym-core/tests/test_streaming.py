"""gym_core.streaming's writers of an answer streamed as it is generated, read back with
gym_core.relay's decoder: the text and the log-probs sent with the deltas, then what ``finish``
adds from the whole answer, concatenate to the whole answer's (the end-to-end checks, with the
``openai`` client, are in the model plugins' test_streaming.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gym_core.relay import SSEDecoder
from gym_core.schemas import ChatChoice, ChatCompletion, ChatMessage, Message, OutputText, Response
from gym_core.streaming import ChatChunkStream, ResponseEventStream

TOKENS = ["The", " sea", " is", " wide", "."]
ENTRIES = [
    {"token": t, "logprob": -0.5 * i, "bytes": list(t.encode()), "top_logprobs": []} for i, t in enumerate(TOKENS)
]
ENTRIES.append({"token": "", "logprob": -0.01, "bytes": [], "top_logprobs": []})  # the end-of-generation token
TEXT = "".join(TOKENS)


def events(body: bytes) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    return [json.loads(e.data) for e in decoder.feed(body) if e.data != "[DONE]"]


def test_chat_chunks_carry_the_log_probs_given_with_them_and_finish_sends_the_rest():
    stream = ChatChunkStream("m")
    body = stream.start()
    body += stream.text("The sea", logprobs=ENTRIES[:2])
    body += stream.text(" is", logprobs=ENTRIES[2:3])
    whole = ChatCompletion(
        model="m",
        choices=[
            ChatChoice(index=0, message=ChatMessage(role="assistant", content=TEXT), logprobs={"content": ENTRIES})
        ],
    )
    body += stream.finish(whole)
    chunks = [c for c in events(body) if c["choices"]]
    per_chunk = [(c["choices"][0]["delta"].get("content"), c["choices"][0]["logprobs"]) for c in chunks]
    assert per_chunk == [
        ("", None),
        ("The sea", {"content": ENTRIES[:2]}),
        (" is", {"content": ENTRIES[2:3]}),
        (" wide.", None),
        (None, {"content": ENTRIES[3:]}),  # the finish chunk: the entries not sent yet
    ]
    assert body.endswith(b"data: [DONE]\n\n")


def test_chat_without_log_probs_streamed_sends_them_all_with_the_finish_reason():
    stream = ChatChunkStream("m")
    whole = ChatCompletion(
        model="m",
        choices=[
            ChatChoice(index=0, message=ChatMessage(role="assistant", content=TEXT), logprobs={"content": ENTRIES})
        ],
    )
    chunks = events(stream.start() + stream.text("The") + stream.finish(whole))
    assert [c["choices"][0]["logprobs"] for c in chunks] == [None, None, None, {"content": ENTRIES}]


def test_a_chat_answer_with_fewer_log_probs_than_were_streamed_is_refused():
    stream = ChatChunkStream("m")
    stream.text("The sea", logprobs=ENTRIES[:2])
    whole = ChatCompletion(
        model="m",
        choices=[
            ChatChoice(index=0, message=ChatMessage(role="assistant", content=TEXT), logprobs={"content": ENTRIES[:1]})
        ],
    )
    with pytest.raises(ValueError, match="fewer log-probs"):
        stream.finish(whole)


def whole_response(text: str = TEXT, logprobs: list[Any] | None = ENTRIES) -> Response:
    part = OutputText(text=text, logprobs=logprobs)
    return Response(model="m", output=[Message(role="assistant", status="completed", content=[part])])


def test_responses_deltas_carry_their_log_probs_and_finish_sends_the_rest_text_and_log_probs():
    stream = ResponseEventStream(Response(model="m", status="in_progress"))
    body = stream.start() + stream.text("The sea", logprobs=ENTRIES[:2]) + stream.text(" is", logprobs=ENTRIES[2:3])
    sent = events(body + stream.finish(whole_response()))
    deltas = [(e["delta"], e["logprobs"]) for e in sent if e["type"] == "response.output_text.delta"]
    assert deltas == [("The sea", ENTRIES[:2]), (" is", ENTRIES[2:3]), (" wide.", ENTRIES[3:])]
    done = next(e for e in sent if e["type"] == "response.output_text.done")
    assert (done["text"], done["logprobs"]) == (TEXT, ENTRIES)
    part = next(e for e in sent if e["type"] == "response.content_part.done")["part"]
    assert (part["text"], part["logprobs"]) == (TEXT, ENTRIES)
    assert sent[-1]["type"] == "response.completed"
    assert sent[-1]["response"]["output"][0]["id"] == sent[2]["item"]["id"]  # the streamed item's id
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))


def test_responses_whose_whole_text_was_all_streamed_send_no_empty_delta():
    stream = ResponseEventStream(Response(model="m", status="in_progress"))
    body = stream.start() + stream.text(TEXT, logprobs=ENTRIES)
    sent = events(body + stream.finish(whole_response()))
    assert [e["delta"] for e in sent if e["type"] == "response.output_text.delta"] == [TEXT]


def test_responses_converted_from_chat_stream_reasoning_then_text():
    stream = ResponseEventStream(Response(model="m", status="in_progress"))
    body = stream.start() + stream.feed(reasoning="Think.") + stream.feed(text="The sea") + stream.feed(text=" is")
    sent = events(body + stream.finish(whole_response("The sea is", None)))
    types = [e["type"] for e in sent]
    assert types.index("response.reasoning_summary_text.delta") < types.index("response.output_text.delta")
    done = next(e for e in sent if e["type"] == "response.output_text.done")
    assert done["text"] == "The sea is"
    final = sent[-1]["response"]["output"]
    assert [item["type"] for item in final] == ["reasoning", "message"]  # the places the stream gave them
