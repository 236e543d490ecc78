"""The local_llama model server over real HTTP: gym's conformance kit, then what is particular to it,
called by the official ``openai`` client.

One server (one model load) serves the whole class; replies are kept to a few tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import openai  # the caller: the official client, a test-only dependency (this plugin's `test` group)
import pytest

from gym_core import ServerClient
from gym_core.testing import ModelServerTests, RunningServers

import gym_local_llama.plugin
from gym_local_llama.engine import MODEL_NAME

HELLO = [{"role": "user", "content": "Say hello."}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# Two earlier calls of the tool, then a third question: the model is then likely (not certain) to call it.
EARLIER_CALLS = [("Paris", "sunny"), ("Rome", "rainy")]
LAST_QUESTION = {"role": "user", "content": "Weather in London?"}


def weather_messages() -> list[dict]:
    """The conversation as chat messages."""
    messages = []
    for n, (city, weather) in enumerate(EARLIER_CALLS):
        function = {"name": "get_weather", "arguments": json.dumps({"city": city})}
        call = {"id": f"call_{n}", "type": "function", "function": function}
        messages += [
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": weather},
        ]
    return [*messages, LAST_QUESTION]


def weather_items() -> list[dict]:
    """The same conversation as Responses API input items."""
    items = []
    for n, (city, weather) in enumerate(EARLIER_CALLS):
        arguments = json.dumps({"city": city})
        items += [
            {"role": "user", "content": f"Weather in {city}?"},
            {"type": "function_call", "call_id": f"call_{n}", "name": "get_weather", "arguments": arguments},
            {"type": "function_call_output", "call_id": f"call_{n}", "output": weather},
        ]
    return [*items, LAST_QUESTION]


class TestLocalLlama(ModelServerTests):
    server_type = "local_llama"
    # One thread: llama.cpp's threads spin-wait on each other, so on a busy machine (parallel test
    # runs) more threads than free cores make a 135M model many times slower, not faster.
    # Batched decoding (opt-in) on, so that the kit's tests cover the batched path.
    options = {"max_tokens": 16, "n_ctx": 2048, "n_threads": 1, "batch_size": 8}
    plugins = [gym_local_llama.plugin]
    deterministic = True  # the kit asks for temperature 0: greedy decoding

    @pytest.fixture
    async def client(self, gym_servers: RunningServers) -> AsyncIterator[openai.AsyncOpenAI]:
        async with openai.AsyncOpenAI(
            base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0
        ) as client:
            yield client

    async def test_chat_completions(self, client):
        completion = await client.chat.completions.create(model="any", messages=HELLO, temperature=0)
        choice = completion.choices[0]
        assert choice.message.role == "assistant"
        assert isinstance(choice.message.content, str) and choice.message.content.strip()
        assert choice.finish_reason in ("stop", "length")
        assert completion.model == MODEL_NAME
        usage = completion.usage
        assert usage is not None
        assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 16
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    async def test_responses(self, client):
        response = await client.responses.create(
            model="any", instructions="Answer briefly.", input="Say hello.", temperature=0
        )
        assert response.output_text.strip()
        message = response.output[0]
        assert message.type == "message" and message.role == "assistant"
        assert response.status in ("completed", "incomplete")
        assert response.usage is not None
        assert response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 16
        assert response.instructions == "Answer briefly."

    async def test_models_lists_the_loaded_model(self, client):
        models = await client.models.list()
        assert [m.id for m in models.data] == [MODEL_NAME]

    async def test_chat_with_tools(self, client):
        completion = await client.chat.completions.create(
            model="any", messages=weather_messages(), tools=[WEATHER_TOOL], temperature=0, max_tokens=32
        )
        choice = completion.choices[0]
        # Whether the 135M model calls the tool is its choice; a call it makes must be well formed.
        for call in choice.message.tool_calls or []:
            assert call.function.name == "get_weather" and call.id
            assert isinstance(json.loads(call.function.arguments), dict)
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
        else:
            assert choice.message.content is not None

    async def test_responses_with_tools(self, client):
        tool = {"type": "function", **WEATHER_TOOL["function"]}
        response = await client.responses.create(
            model="any", input=weather_items(), tools=[tool], temperature=0, max_output_tokens=32
        )
        assert response.output
        # As above: the model may answer in text; a call it makes is a function_call item.
        for item in response.output:
            assert item.type in ("message", "function_call")
            if item.type == "function_call":
                assert item.name == "get_weather" and item.call_id and item.id
                assert isinstance(json.loads(item.arguments), dict)
        assert [t.name for t in response.tools] == ["get_weather"]

    async def test_return_token_ids_on_responses(self, client):
        response = await client.responses.create(model="any", input="Say hello.", extra_body={"return_token_ids": True})
        item = response.output[-1].model_dump()
        prompt_ids, generated_ids = item["prompt_token_ids"], item["generation_token_ids"]
        log_probs = item["generation_log_probs"]
        assert response.usage is not None
        assert len(prompt_ids) == response.usage.input_tokens
        assert len(generated_ids) == len(log_probs) == response.usage.output_tokens > 0
        assert all(isinstance(t, int) for t in prompt_ids + generated_ids)
        assert all(lp <= 0.0 for lp in log_probs)

    async def test_return_token_ids_on_chat(self, client):
        completion = await client.chat.completions.create(
            model="any", messages=HELLO, extra_body={"return_token_ids": True}
        )
        message = completion.choices[0].message.model_dump()
        usage = completion.usage
        assert usage is not None
        assert len(message["prompt_token_ids"]) == usage.prompt_tokens
        assert len(message["generation_token_ids"]) == len(message["generation_log_probs"]) == usage.completion_tokens
        assert completion.choices[0].logprobs is None  # token ids were asked for, not chat logprobs

    async def test_chat_logprobs(self, client):
        completion = await client.chat.completions.create(model="any", messages=HELLO, logprobs=True, temperature=0)
        choice = completion.choices[0]
        assert choice.logprobs is not None and choice.logprobs.content
        assert completion.usage is not None and len(choice.logprobs.content) == completion.usage.completion_tokens
        for entry in choice.logprobs.content:
            assert isinstance(entry.token, str) and entry.logprob <= 0.0
        # The tokens spell the reply (the end-of-generation token renders as nothing).
        assert "".join(e.token for e in choice.logprobs.content).strip() == choice.message.content.strip()

    async def test_invalid_sampling_value_is_a_400(self, client):
        with pytest.raises(openai.BadRequestError, match="top_p"):
            await client.chat.completions.create(model="any", messages=HELLO, top_p=0.0)

    async def test_health_answers_while_requests_generate(self, client, gym_servers):
        generations = asyncio.gather(
            *(client.chat.completions.create(model="any", messages=HELLO, max_tokens=16) for _ in range(4))
        )
        answered_during_generation = 0
        async with ServerClient() as http:
            while not generations.done():
                health = await http.get(gym_servers.url, "/health", timeout_s=60)
                assert health["status"] == "ok"
                if not generations.done():  # answered while the model was still generating
                    answered_during_generation += 1
                await asyncio.sleep(0.02)
        completions = await generations
        assert len(completions) == 4
        assert all(c.usage.completion_tokens > 0 for c in completions)
        assert answered_during_generation > 0, "no health check was answered while the model generated"

    async def test_concurrent_requests_are_decoded_together_with_unchanged_results(self, client, gym_servers):
        """Requests that arrive together share decode steps (batch_size 8 here), and each gets
        what it gets alone: greedy decoding is unchanged by its neighbours."""
        prompts = ["Say hello.", "Name a color.", "Count to five.", "What is the sea?"]

        async def ask(prompt: str) -> list[int]:
            completion = await client.chat.completions.create(
                model="any",
                messages=[{"role": "user", "content": prompt}],
                temperature=0,
                max_tokens=12,
                logprobs=True,
            )
            return [entry.logprob for entry in completion.choices[0].logprobs.content]

        alone = [await ask(p) for p in prompts]
        stats = gym_servers.server.engine.batch_stats
        assert gym_servers.server.engine.batch_size == 8
        steps, tokens = stats.steps, stats.tokens
        together = await asyncio.gather(*(ask(p) for p in prompts))
        assert together == alone
        assert stats.tokens - tokens > stats.steps - steps  # some steps decoded several requests

    async def test_a_caller_that_stops_waiting_frees_its_batch_slot(self, client, gym_servers):
        """The caller's budget (``x-gym-timeout``) ran out: a 504, and the generation stops at once."""
        stats = gym_servers.server.engine.batch_stats
        chunks = stats.prompt_chunks
        with pytest.raises(openai.InternalServerError, match="no answer within"):
            await client.chat.completions.create(  # fits in a slot (batch_n_ctx 1024): batched
                model="any",
                messages=[{"role": "user", "content": "Write a very long story."}],
                temperature=0,
                max_tokens=900,
                extra_headers={"x-gym-timeout": "1"},
            )
        tokens = stats.tokens
        deadline = asyncio.get_running_loop().time() + 30
        while stats.busy_slots:
            assert asyncio.get_running_loop().time() < deadline, "the abandoned generation kept its slot"
            await asyncio.sleep(0.01)
        assert stats.prompt_chunks > chunks  # it was in a batch slot (its prompt was read there)
        assert stats.tokens < tokens + 50  # it stopped; it did not run to its 900 tokens


# --- token history ----------------------------------------------------------------------------------


class TestTokenHistory:
    """Earlier turns' token ids in the request are the prompt's start, verbatim; inconsistent ones are a 422."""

    @pytest.fixture(scope="class")
    @classmethod
    def gym_servers(cls):
        with TestLocalLlama.running() as servers:
            yield servers

    @staticmethod
    def first_turn(gym_servers) -> tuple[list, dict]:
        items = [{"role": "user", "content": "Say hello."}]
        response = (
            gym_servers.caller()
            .post("/v1/responses", {"input": items, "max_output_tokens": 4, "temperature": 0, "return_token_ids": True})
            .json()
        )
        return items, response

    def test_the_next_prompt_is_the_history_then_the_new_turn_only(self, gym_servers):
        from gym_local_llama.engine import render_continuation

        items, first = self.first_turn(gym_servers)
        last = first["output"][-1]
        history = last["prompt_token_ids"] + last["generation_token_ids"]
        new = {"role": "user", "content": "Again."}
        body = {
            "input": [*items, *first["output"], new],
            "max_output_tokens": 4,
            "return_token_ids": True,
            "instructions": "not rendered: the history holds the system turn",
        }
        second = gym_servers.caller().post("/v1/responses", body).json()["output"][-1]
        engine = gym_servers.server.engine
        tail = render_continuation([new], close_assistant_turn=history[-1] not in engine.eog_token_ids)
        assert second["prompt_token_ids"] == history + engine.llm.tokenize(tail.encode(), add_bos=False, special=True)
        # The chat route reads the same fields on assistant messages.
        chat = (
            gym_servers.caller()
            .post(
                "/v1/chat/completions",
                {
                    "messages": [
                        {"role": "user", "content": "Say hello."},
                        {
                            "role": "assistant",
                            "content": "x",
                            **{
                                k: last[k] for k in ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
                            },
                        },
                        new,
                    ],
                    "max_tokens": 4,
                    "return_token_ids": True,
                },
            )
            .json()
        )
        assert chat["choices"][0]["message"]["prompt_token_ids"] == second["prompt_token_ids"]

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (
                lambda item: item.pop("generation_log_probs"),
                "has prompt_token_ids, generation_token_ids but not generation_log_probs",
            ),
            (lambda item: item["generation_log_probs"].append(-1.0), "generation_token_ids but"),
            (lambda item: item.__setitem__("generation_token_ids", []), "must not be empty"),
            (lambda item: item["prompt_token_ids"].__setitem__(0, 10**9), "is not a token id of"),
        ],
    )
    def test_a_malformed_bundle_is_a_422(self, gym_servers, change, message):
        items, first = self.first_turn(gym_servers)
        change(first["output"][-1])
        reply = gym_servers.caller().post(
            "/v1/responses", {"input": [*items, *first["output"], {"role": "user", "content": "x"}]}
        )
        assert reply.status == 422 and message in reply.text, reply.text

    def test_a_history_that_does_not_grow_is_a_422(self, gym_servers):
        items, first = self.first_turn(gym_servers)
        later = json.loads(json.dumps(first["output"][-1]))
        later["prompt_token_ids"][1] += 1  # a re-tokenised prefix
        conversation = [
            *items,
            *first["output"],
            {"role": "user", "content": "x"},
            later,
            {"role": "user", "content": "y"},
        ]
        reply = gym_servers.caller().post("/v1/responses", {"input": conversation})
        assert reply.status == 422, reply.text
        assert (
            "input[3].prompt_token_ids do not begin with the prompt_token_ids + generation_token_ids of input[1]"
            in reply.text
        )
        assert "differ from position 1" in reply.text

    def test_model_output_without_ids_after_the_history_is_a_422(self, gym_servers):
        items, first = self.first_turn(gym_servers)
        edited = {"role": "assistant", "content": "an answer whose tokens nobody knows"}
        reply = gym_servers.caller().post("/v1/responses", {"input": [*items, *first["output"], edited]})
        assert reply.status == 422 and "input[2] is model output without token ids after input[1]" in reply.text, (
            reply.text
        )
