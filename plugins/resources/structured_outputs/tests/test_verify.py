"""The checks of structured_outputs as pure functions (no server, no worker): every rule of the spec
and its edge cases, format by format."""

from __future__ import annotations

import json

import pytest

from gym_core.schemas import decode_response, output_text

from gym_structured_outputs.verify import (
    MAX_MESSAGE_CHARS,
    check_text,
    check_tool_arguments,
    coerce_csv,
    coerce_xml,
    parse_document,
    strict_schema,
)

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": ["string", "null"]}},
}
PERSON_STR = json.dumps(PERSON)


# --- reading the response (gym_core's OUTPUT_TEXT, as this environment reads it) -----------------------------------


def test_output_text_concatenates_output_text_parts_without_separator_and_without_stripping():
    response = decode_response(
        {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "THINK"}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": ' {"a": '},
                        {"type": "refusal", "refusal": "NO"},
                    ],
                },
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "1}\n"}]},
            ]
        }
    )
    assert output_text(response) == ' {"a": 1}\n'


# --- the schema ---------------------------------------------------------------------------------


def test_strict_schema_requires_every_property_and_forbids_others_at_every_depth():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}, "c": {"type": "string"}},
        "required": ["a"],
        "$defs": {"d": {"type": "object", "properties": {"e": {"type": "integer"}}}},
        "anyOf": [{"properties": {"f": {}}}],
        "items": {"type": "array", "items": {"properties": {"g": {}}}},
    }
    strict = strict_schema(schema)
    assert strict["required"] == ["a", "c"] and strict["additionalProperties"] is False
    assert strict["properties"]["a"]["required"] == ["b"]
    assert strict["$defs"]["d"] == {
        "type": "object",
        "properties": {"e": {"type": "integer"}},
        "required": ["e"],
        "additionalProperties": False,
    }
    assert strict["anyOf"][0]["required"] == ["f"]
    assert strict["items"]["items"]["additionalProperties"] is False
    assert schema["required"] == ["a"] and "additionalProperties" not in schema  # the input is untouched


def test_optional_properties_become_mandatory_but_nullable_types_still_accept_null():
    assert check_text('{"name": "Ada", "age": 36, "email": null}', PERSON_STR).valid
    missing = check_text('{"name": "Ada", "age": 36}', PERSON_STR)
    assert missing.error_type == "validation_error" and "'email' is a required property" in missing.error_message
    extra = check_text('{"name": "Ada", "age": 36, "email": null, "x": 1}', PERSON_STR)
    assert extra.error_type == "validation_error" and "'x' was unexpected" in extra.error_message


def test_validator_semantics_format_integer_and_nullable():
    schema = json.dumps(
        {"type": "object", "properties": {"n": {"type": "integer"}, "d": {"type": "string", "format": "date"}}}
    )
    assert check_text('{"n": 1.0, "d": "not a date"}', schema).valid  # 1.0 is an integer; format is not enforced
    assert check_text('{"n": true, "d": "x"}', schema).error_type == "validation_error"  # a boolean is not
    nullable = json.dumps({"type": "object", "properties": {"s": {"type": "string", "nullable": True}}})
    assert check_text('{"s": null}', nullable).error_type == "validation_error"  # OpenAPI 3.0's nullable is ignored


def test_schema_errors():
    assert check_text("{}", "{not json").error_type == "schema_error"
    assert check_text("{}", '{"type": 5}').error_type == "schema_error"
    assert check_tool_arguments("{}", '{"type": "nope"}').error_type == "schema_error"
    # The schema is read only once the output parsed: what is wrong with the answer comes first.
    assert check_text("   ", "{not json").error_type == "empty_response"
    assert check_text("{oops", "{not json").error_type == "parse_error"


def test_a_remote_ref_is_never_fetched():
    schema = json.dumps({"type": "object", "properties": {"a": {"$ref": "https://example.invalid/schema.json"}}})
    assert check_text('{"a": 1}', schema).error_type == "schema_error"


def test_boolean_schema_is_accepted():
    assert check_text('{"anything": [1]}', "true").valid


# --- text mode, format by format ----------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n\t  \n"])
def test_empty_or_blank_text_is_empty_response(text):
    assert check_text(text, PERSON_STR).error_type == "empty_response"


def test_json_fenced_answer_does_not_parse():
    fenced = '```json\n{"name": "Ada", "age": 36, "email": null}\n```'
    assert check_text(fenced, PERSON_STR).error_type == "parse_error"
    assert check_text('\n  {"name": "Ada", "age": 36, "email": null}  \n', PERSON_STR).valid  # whitespace is fine


def test_json_nested_too_deeply_is_a_parse_error_not_a_crash():
    verdict = check_text("[" * 200_000 + "]" * 200_000, PERSON_STR)
    assert verdict.error_type == "parse_error"


def test_yaml_implicit_dates_fail_a_string_type():
    schema = json.dumps({"type": "object", "properties": {"date": {"type": "string"}, "n": {"type": "integer"}}})
    assert check_text("date: 2024-05-01\nn: 3\n", schema, "yaml").error_type == "validation_error"
    assert check_text("date: '2024-05-01'\nn: 3\n", schema, "yaml").valid
    assert check_text("date: x\n---\nn: 3\n", schema, "yaml").error_type == "parse_error"  # two documents
    assert check_text("date: [unclosed\n", schema, "yaml").error_type == "parse_error"


def test_yaml_safe_load_refuses_python_tags():
    schema = json.dumps({"type": "object"})
    assert check_text("!!python/object/apply:os.system ['true']", schema, "yaml").error_type == "parse_error"


def test_toml_dates_are_date_objects_and_bad_toml_does_not_parse():
    schema = json.dumps({"type": "object", "properties": {"day": {"type": "string"}}})
    assert check_text("day = 2024-05-01\n", schema, "toml").error_type == "validation_error"
    assert check_text('day = "2024-05-01"\n', schema, "toml").valid
    assert check_text("day = \n", schema, "toml").error_type == "parse_error"


def test_xml_maps_like_xmltodict():
    data = parse_document('<r id="7">t<b>1</b>u<b>2</b><c/><d>  </d></r>', "xml")
    assert data == {"r": {"@id": "7", "b": ["1", "2"], "c": None, "d": None, "#text": "tu"}}


def test_xml_root_element_must_be_declared():
    schema = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
    assert check_text("<person><name>Ada</name></person>", schema, "xml").error_type == "validation_error"
    wrapped = json.dumps({"type": "object", "properties": {"person": json.loads(schema)}})
    assert check_text("<person><name>Ada</name></person>", wrapped, "xml").valid


def test_xml_entity_declarations_are_refused():
    bomb = '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><r>&b;</r>'
    xxe = '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>'
    for text in (bomb, xxe):
        assert check_text(text, '{"type": "object"}', "xml").error_type == "parse_error"
    assert check_text("<r>1</r><s/>", '{"type": "object"}', "xml").error_type == "parse_error"  # two roots


XML_SCHEMA = {
    "type": "object",
    "properties": {
        "r": {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "x": {"type": "number"},
                "ok": {"type": "boolean"},
                "no": {"type": "boolean"},
                "s": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "integer"}},
                "one": {"type": "array", "items": {"type": "string"}},
                "none": {"type": "array", "items": {"type": "string"}},
            },
        }
    },
}


def test_xml_coercion_follows_the_schema():
    text = (
        "<r><n>3</n><x>2.5</x><ok>TRUE</ok><no>0</no><s/>"
        "<tags><t>1</t><t>2</t></tags><one><i>a</i></one><none/><extra>9</extra></r>"
    )
    data = coerce_xml(parse_document(text, "xml"), XML_SCHEMA)
    assert data == {
        "r": {
            "n": 3,
            "x": 2.5,
            "ok": True,
            "no": False,
            "s": "",
            "tags": [1, 2],
            "one": ["a"],
            "none": [],
            "extra": "9",
        }
    }


def test_xml_values_that_do_not_convert_stay_strings_and_fail_validation():
    assert coerce_xml({"r": {"n": "three", "ok": "yes"}}, XML_SCHEMA) == {"r": {"n": "three", "ok": "yes"}}
    schema = json.dumps(
        {"type": "object", "properties": {"r": {"type": "object", "properties": {"n": {"type": "integer"}}}}}
    )
    assert check_text("<r><n>3</n></r>", schema, "xml").valid
    assert check_text("<r><n>three</n></r>", schema, "xml").error_type == "validation_error"
    # Without coercion every leaf stays a string.
    verdict = check_text("<r><n>3</n></r>", schema, "xml", xml_coerce_types=False)
    assert verdict.error_type == "validation_error" and "'3' is not of type 'integer'" in verdict.error_message


def test_xml_coercion_acts_on_single_types_only():
    # A type list (nullable) is left as it is: "5" stays a string.
    schema = {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}
    assert coerce_xml({"n": "5"}, schema) == {"n": "5"}


CSV_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "pop": {"type": "integer"},
            "capital": {"type": "boolean"},
            "area": {"type": ["number", "null"]},
            "code": {"type": ["integer", "string"]},
        },
    },
}


def test_csv_rows_are_header_keyed_dicts_of_strings():
    assert parse_document("a,b\n1,\n\nx,y\n", "csv") == [{"a": "1", "b": ""}, {"a": "x", "b": "y"}]


def test_csv_cells_are_coerced_by_column_type():
    rows = parse_document("city,pop,capital,area,code,note\nParis,2102650,True,105.4,75,x\nLyon,5e5,0,,A1,\n", "csv")
    assert coerce_csv(rows, CSV_SCHEMA) == [
        {"city": "Paris", "pop": 2102650, "capital": True, "area": 105.4, "code": 75, "note": "x"},
        {"city": "Lyon", "pop": "5e5", "capital": False, "area": None, "code": "A1", "note": ""},
    ]


def test_csv_empty_cells_stay_empty_strings_unless_null_is_allowed():
    rows = [{"pop": "", "capital": "", "area": "", "code": ""}]
    assert coerce_csv(rows, CSV_SCHEMA) == [{"pop": "", "capital": "", "area": None, "code": ""}]


def test_csv_types_may_come_from_the_schemas_own_properties():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert coerce_csv([{"n": "4", "m": "5"}], schema) == [{"n": 4, "m": "5"}]


def test_csv_validation_end_to_end():
    schema = json.dumps(CSV_SCHEMA)
    good = "city,pop,capital,area,code\nParis,2102650,true,105.4,75\nLyon,522250,false,,69\n"
    assert check_text(good, schema, "csv").valid
    assert (
        check_text("city,pop,capital,area,code\nParis,many,true,1,1\n", schema, "csv").error_type == "validation_error"
    )
    assert check_text("city,pop\nParis,1\n", schema, "csv").error_type == "validation_error"  # missing columns
    # A row longer than the header puts its extra cells under no column: not allowed.
    assert (
        check_text("city,pop,capital,area,code\nParis,1,true,1,1,extra\n", schema, "csv").error_type
        == "validation_error"
    )


# --- tool-call mode -----------------------------------------------------------------------------


def test_tool_arguments_valid_with_and_without_payload_key():
    payload = {"name": "Ada", "age": 36, "email": None}
    assert check_tool_arguments(json.dumps(payload), PERSON_STR).valid
    assert check_tool_arguments(json.dumps({"extraction": payload}), PERSON_STR, "extraction").valid
    assert check_tool_arguments({"extraction": payload}, PERSON_STR, "extraction").valid  # an object as is


def test_tool_arguments_errors():
    assert check_tool_arguments('{"name": "Ada"', PERSON_STR).error_type == "tool_arguments_parse_error"
    assert check_tool_arguments("", PERSON_STR).error_type == "tool_arguments_parse_error"
    assert check_tool_arguments('{"name": "Ada"}', PERSON_STR, "extraction").error_type == "missing_tool_payload_key"
    assert check_tool_arguments("[1]", PERSON_STR, "extraction").error_type == "missing_tool_payload_key"
    assert check_tool_arguments('{"name": "Ada"}', PERSON_STR).error_type == "validation_error"
    assert (
        check_tool_arguments('{"e": {"name": 1, "age": 1, "email": null}}', PERSON_STR, "e").error_type
        == "validation_error"
    )


def test_error_messages_are_truncated():
    schema = json.dumps({"type": "object", "properties": {"k" * 1000: {"type": "string"}}})
    verdict = check_text("{}", schema)
    assert verdict.error_type == "validation_error" and len(verdict.error_message) == MAX_MESSAGE_CHARS
