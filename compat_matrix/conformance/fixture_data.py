"""Fixture payloads the conformance suite's server scenarios expect (stdlib only).

Imported by every Python fixture server (py1 and py2 venvs), so it must not
import `mcp`. The names, texts and request shapes follow the scenario sources
of `@modelcontextprotocol/conformance@0.2.0-alpha.12`; see README.md for which
scenario calls what.
"""

from __future__ import annotations

from typing import Any

# 1x1 red PNG and a minimal WAV header, base64 (any small valid payload does).
PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
    "AAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV_B64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

SIMPLE_TEXT = "This is a simple text response for testing."
EMBEDDED_TEXT = "This is an embedded resource content."
MIXED_JSON = '{"test":"data","value":123}'
ERROR_TEXT = "This tool intentionally returns an error for testing"
STATIC_TEXT = "This is the content of the static text resource."
WATCHED_TEXT = "Watched resource content"
SIMPLE_PROMPT = "This is a simple prompt for testing."
EMBEDDED_PROMPT_TEXT = "Embedded resource content for testing."

# A tool whose inputSchema uses JSON Schema 2020-12 features (scenario json-schema-2020-12).
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def form(message: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An `elicitation/create` (form mode) request as a plain dict."""
    schema = {"type": "object", "properties": properties, "required": required}
    return {
        "method": "elicitation/create",
        "params": {"message": message, "requestedSchema": schema},
    }


def sample(text: str, max_tokens: int) -> dict[str, Any]:
    """A `sampling/createMessage` request as a plain dict."""
    message = {"role": "user", "content": {"type": "text", "text": text}}
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [message], "maxTokens": max_tokens},
    }


ROOTS: dict[str, Any] = {"method": "roots/list", "params": {}}


def ask_string(message: str, field: str) -> dict[str, Any]:
    return form(message, {field: {"type": "string"}}, [field])


ASK_NAME = ask_string("What is your name?", "name")
CONFIRM = form("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
STEP1 = ask_string("Step 1: What is your name?", "name")
STEP2 = ask_string("Step 2: What is your favorite color?", "color")
ASK_CONTEXT = ask_string("What context should the prompt use?", "context")
CAPITAL = sample("What is the capital of France?", 100)
GREETING = sample("Generate a greeting", 50)
CAP_ELICIT = ask_string("Elicitation input", "value")
CAP_SAMPLE = sample("Sample request", 50)

# Legacy-era push tools (tools-call-elicitation, elicitation-sep1034-defaults, -sep1330-enums).
ELICIT_RESPONSE_PROPS: dict[str, Any] = {
    "response": {"type": "string", "description": "User's response"},
}
SEP1034_PROPS: dict[str, Any] = {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {
        "type": "string",
        "description": "User status",
        "enum": ["active", "inactive", "pending"],
        "default": "active",
    },
    "verified": {"type": "boolean", "description": "Verification status", "default": True},
}
_OPTIONS = ["option1", "option2", "option3"]
SEP1330_PROPS: dict[str, Any] = {
    "untitledSingle": {"type": "string", "description": "Select one option", "enum": _OPTIONS},
    "titledSingle": {
        "type": "string",
        "description": "Select one option with titles",
        "oneOf": [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ],
    },
    "legacyEnum": {
        "type": "string",
        "description": "Select one option (legacy)",
        "enum": ["opt1", "opt2", "opt3"],
        "enumNames": ["Option One", "Option Two", "Option Three"],
    },
    "untitledMulti": {
        "type": "array",
        "description": "Select multiple options",
        "minItems": 1,
        "maxItems": 3,
        "items": {"type": "string", "enum": _OPTIONS},
    },
    "titledMulti": {
        "type": "array",
        "description": "Select multiple options with titles",
        "minItems": 1,
        "maxItems": 3,
        "items": {
            "anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]
        },
    },
}
SEP1034_MESSAGE = "Please review and update the form fields with defaults"
SEP1330_MESSAGE = "Please select options from the enum fields"


def answer_text(answer: dict[str, Any] | None, field: str, default: str = "unknown") -> str:
    """`content[field]` of an elicitation answer, or `default`."""
    content = (answer or {}).get("content")
    value = content.get(field) if isinstance(content, dict) else None
    return value if isinstance(value, str) else default


def sampled_text(answer: dict[str, Any] | None) -> str:
    """The text of a sampling answer (CreateMessageResult)."""
    content = (answer or {}).get("content")
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return "no response"


def root_count(answer: dict[str, Any] | None) -> int:
    roots = (answer or {}).get("roots")
    return len(roots) if isinstance(roots, list) else 0


def elicitation_summary(answer: dict[str, Any]) -> str:
    """How the push-elicitation tools report the outcome."""
    import json

    return f"action={answer.get('action')}, content={json.dumps(answer.get('content') or {})}"


def export() -> dict[str, Any]:
    """The upper-case constants as plain JSON data (what `fixture_data.json` holds)."""
    return {k: v for k, v in sorted(globals().items()) if k.isupper() and not k.startswith("_")}


if __name__ == "__main__":
    # Regenerate the JSON copy the TS fixtures read (a test checks it is in sync), from
    # compat_matrix/conformance/: python3 fixture_data.py [--json] > fixture_data.json
    import json
    import sys

    json.dump(export(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
