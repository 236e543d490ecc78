"""local_llama's prompt format as a Jinja chat template, for TRL's SFT and DPO on gym's exports.

``gym export sft|dpo`` writes conversations with tool calls (``tool_calls`` on assistant messages),
tool outputs (``tool`` messages) and the offered ``tools``; TRL's trainers render them with the
tokenizer's chat template. SmolLM2's own template (the one in the GGUF) renders only ``role`` and
``content``: the tool calls, the tools and the names of tool results are silently dropped, and SFT
would teach the model empty assistant turns. :data:`LOCAL_LLAMA_CHAT_TEMPLATE` renders a
conversation exactly as ``local_llama`` prompts the model (:mod:`gym_local_llama.chat_template`):
the tools section appended to the system text, each tool call a ``<tool_call>{"name", "arguments"}
</tool_call>`` line of the assistant's turn, a run of tool results one user turn of
``<tool_response>`` blocks. A model fine-tuned on it answers in the markup that ``local_llama``
parses, and the rollouts that made the export were prompted the same way::

    tokenizer.chat_template = LOCAL_LLAMA_CHAT_TEMPLATE
    SFTTrainer(model=..., processing_class=tokenizer, train_dataset=load_dataset("json", data_files=...))

The one difference: a tool call's ``arguments`` that is a string is rendered as that string (JSON
text in quotes); ``local_llama`` renders a string that parses as JSON as the parsed value. ``gym
export`` writes arguments as objects whenever the model's text was a JSON object.
"""

from __future__ import annotations

__all__ = ["LOCAL_LLAMA_CHAT_TEMPLATE", "DEFAULT_SYSTEM_PROMPT"]

# gym_local_llama.chat_template.DEFAULT_SYSTEM_PROMPT (SmolLM2's own), kept here so that this module
# does not need the local_llama plugin installed; the tests check that the two agree.
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

_PARTS = [
    # The text of a message's content: a string, null, or a list of parts (their text joined).
    "{%- macro text(content) -%}",
    "{%- if content is none -%}{%- elif content is string -%}{{ content }}",
    "{%- else -%}{%- for part in content -%}{%- if part is string -%}{{ part }}",
    "{%- elif part['text'] is defined and part['text'] is not none -%}{{ part['text'] }}{%- endif -%}",
    "{%- endfor -%}{%- endif -%}",
    "{%- endmacro -%}",
    # The system text: the first message's when it is a system or developer one, else the default.
    "{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}",
    "{%- set ns = namespace(system=text(messages[0]['content'])) -%}{%- set turns = messages[1:] -%}",
    "{%- else -%}",
    "{%- set ns = namespace(system='" + DEFAULT_SYSTEM_PROMPT + "') -%}{%- set turns = messages -%}",
    "{%- endif -%}",
    # The tools section, after a blank line.
    "{%- if tools -%}",
    "{%- set ns.system = ns.system ~ '\\n\\n# Tools\\nYou can call these tools (JSON: name, description, "
    "JSON-schema parameters):' -%}",
    "{%- for tool in tools -%}",
    "{%- set fn = tool['function'] if tool['function'] is defined else tool -%}",
    "{%- set parameters = fn['parameters'] if fn['parameters'] is defined and fn['parameters'] "
    "else {'type': 'object', 'properties': {}} -%}",
    "{%- if fn['description'] is defined and fn['description'] -%}",
    "{%- set spec = {'name': fn['name'], 'description': fn['description'], 'parameters': parameters} -%}",
    "{%- else -%}{%- set spec = {'name': fn['name'], 'parameters': parameters} -%}{%- endif -%}",
    "{%- set ns.system = ns.system ~ '\\n' ~ (spec | tojson) -%}",
    "{%- endfor -%}",
    "{%- set ns.system = ns.system ~ '\\nTo call a tool, answer with one line per call, exactly like this:\\n"
    '<tool_call>{"name": "tool_name", "arguments": {"argument_name": "value"}}</tool_call>\\n'
    "Tool results are sent back inside <tool_response></tool_response>.' -%}",
    "{%- endif -%}",
    "{{- '<|im_start|>system\\n' ~ ns.system ~ '<|im_end|>\\n' -}}",
    # The turns; a run of tool results is one user turn.
    "{%- for m in turns -%}",
    "{%- if m['role'] in ['tool', 'function'] -%}",
    "{%- if loop.first or loop.previtem['role'] not in ['tool', 'function'] -%}{{- '<|im_start|>user\\n' -}}",
    "{%- else -%}{{- '\\n' -}}{%- endif -%}",
    "{{- '<tool_response>\\n' ~ text(m['content']) ~ '\\n</tool_response>' -}}",
    "{%- if loop.last or loop.nextitem['role'] not in ['tool', 'function'] -%}{{- '<|im_end|>\\n' -}}{%- endif -%}",
    "{%- elif m['role'] in ['system', 'developer'] -%}",
    "{{- '<|im_start|>system\\n' ~ text(m['content']) ~ '<|im_end|>\\n' -}}",
    "{%- elif m['role'] == 'user' -%}",
    "{{- '<|im_start|>user\\n' ~ text(m['content']) ~ '<|im_end|>\\n' -}}",
    "{%- elif m['role'] == 'assistant' -%}",
    "{%- set said = text(m['content']) -%}",
    "{{- '<|im_start|>assistant\\n' ~ said -}}",
    "{%- if m['tool_calls'] is defined and m['tool_calls'] -%}{%- for call in m['tool_calls'] -%}",
    "{%- set fn = call['function'] if call['function'] is defined else call -%}",
    "{%- set arguments = fn['arguments'] if fn['arguments'] is defined and fn['arguments'] is not none "
    "and fn['arguments'] != '' else {} -%}",
    "{%- if said or not loop.first -%}{{- '\\n' -}}{%- endif -%}",
    "{{- '<tool_call>' ~ ({'name': fn['name'], 'arguments': arguments} | tojson) ~ '</tool_call>' -}}",
    "{%- endfor -%}{%- endif -%}",
    "{{- '<|im_end|>\\n' -}}",
    "{%- else -%}{{- raise_exception('unsupported message role ' ~ m['role']) -}}",
    "{%- endif -%}",
    "{%- endfor -%}",
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
]

LOCAL_LLAMA_CHAT_TEMPLATE = "".join(_PARTS)
"""The Jinja chat template of ``local_llama``'s prompt format (module docstring)."""
