"""Kafka's JAAS config parser (`sasl.jaas.config`, `listener.name.X.MECH.sasl.jaas.config`), for every login module.

Why: a Kafka `server.properties` names users and client credentials in JAAS syntax,

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

and Kelp must read it unchanged. Kafka parses it with java.io.StreamTokenizer configured by its JaasConfig
class; this module reproduces that tokenizer: words of letters, digits, `.`, `-`, `_`, `$` and any
character from U+00A0 up; quoted strings in `"` or `'` with Java's escapes (`\\n \\t \\r \\b \\f \\a \\v`,
octal `\\0`..`\\377`, any other escaped character stands for itself); `//`, `/* */` and a lone `/` start
comments; an unquoted number is no value (Kafka: "Value not specified for key"). An entry is
`<loginModuleClass> <controlFlag> (<name>=<value>)* ;` with the flag REQUIRED, REQUISITE, SUFFICIENT or
OPTIONAL in any case; a later option of the same name wins.

Where Kelp is stricter: a quoted value left open at a line end or at the end of the text is an error
naming its option (Kafka's tokenizer silently ends the value there).

Errors say which token is wrong and where, never an option's value: values hold passwords. Entries
print their options with every value masked. This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kelp.errors import ConfigError

__all__ = [
    "LOGIN_MODULES",
    "OAUTHBEARER_LOGIN_MODULE",
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasConfigError",
    "JaasEntry",
    "jaas_config_key",
    "parse_jaas_config",
    "parse_single_jaas_config",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
    "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE,
}
"""The login module each SASL mechanism Kelp serves is configured with."""

_CONTROL_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")
_ESCAPES = {"a": "\x07", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}


class JaasConfigError(ConfigError):
    """A `sasl.jaas.config` value Kafka would refuse; the message names the token, never a value."""


@dataclass(frozen=True)
class JaasEntry:
    """One login module entry: its class, control flag (upper case) and options (values are secrets)."""

    login_module: str
    control_flag: str
    options: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        masked = ", ".join(f"{k}=<redacted>" for k in self.options)
        return f"JaasEntry({self.login_module} {self.control_flag} {masked})"

    __str__ = __repr__


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "quoted", "open-quote" (a quoted string never closed), "number", "char", "eof"
    text: str
    line: int


def _is_word_char(char: str) -> bool:
    code = ord(char)
    return char.isascii() and (char.isalnum() or char in ".-_$") or code >= 0xA0


def _tokens(text: str) -> Iterator[_Token]:
    """java.io.StreamTokenizer as JaasConfig configures it (see the module docstring)."""
    pos, line, end = 0, 1, len(text)
    while True:
        while pos < end and ord(text[pos]) <= 0x20:
            if text[pos] == "\n":
                line += 1
            pos += 1
        if pos >= end:
            yield _Token("eof", "", line)
            return
        char = text[pos]
        if char == "/":
            if text.startswith("/*", pos):
                close = text.find("*/", pos + 2)
                if close < 0:
                    yield _Token("eof", "", line)
                    return
                line += text.count("\n", pos, close)
                pos = close + 2
            else:  # `//` and a lone `/` (a comment character) both run to the end of the line
                newline = text.find("\n", pos)
                pos = end if newline < 0 else newline
            continue
        if char in "\"'":
            value, pos, closed = _quoted(text, pos + 1, char)
            if not closed:
                yield _Token("open-quote", value, line)
                return
            yield _Token("quoted", value, line)
            continue
        if "0" <= char <= "9" or char == "." or (char == "-" and pos + 1 < end and ("0" <= text[pos + 1] <= "9"
                                                                                  or text[pos + 1] == ".")):
            start = pos
            pos += 1
            seen_dot = char == "."
            while pos < end and ("0" <= text[pos] <= "9" or text[pos] == "." and not seen_dot):
                seen_dot = seen_dot or text[pos] == "."
                pos += 1
            yield _Token("number", text[start:pos], line)
            continue
        if _is_word_char(char) and char != "-":
            start = pos
            while pos < end and _is_word_char(text[pos]):
                pos += 1
            yield _Token("word", text[start:pos], line)
            continue
        yield _Token("char", char, line)
        pos += 1


def _quoted(text: str, pos: int, quote: str) -> tuple[str, int, bool]:
    """A quoted string's value after its opening quote: (value, position after it, whether it was closed)."""
    out: list[str] = []
    end = len(text)
    while pos < end:
        char = text[pos]
        if char == quote:
            return "".join(out), pos + 1, True
        if char in "\r\n":
            return "".join(out), pos, False
        if char == "\\":
            pos += 1
            if pos >= end:
                return "".join(out), pos, False
            escaped = text[pos]
            if "0" <= escaped <= "7":
                digits = escaped
                pos += 1
                limit = 3 if escaped <= "3" else 2
                while len(digits) < limit and pos < end and "0" <= text[pos] <= "7":
                    digits += text[pos]
                    pos += 1
                out.append(chr(int(digits, 8)))
                continue
            out.append(_ESCAPES.get(escaped, escaped))
            pos += 1
            continue
        out.append(char)
        pos += 1
    return "".join(out), pos, False


def _describe(token: _Token) -> str:
    if token.kind == "eof":
        return "the end of the config"
    if token.kind == "number":
        return f"the unquoted number {token.text!r} (quote it)"
    if token.kind == "char":
        return f"{token.text!r}"
    if token.kind == "quoted":
        return "a quoted string"
    return f"{token.text!r}"


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every login module entry of a JAAS config value, in order (Kafka's JaasConfig)."""
    entries: list[JaasEntry] = []
    tokens = _tokens(text)
    while True:
        token = next(tokens)
        if token.kind == "eof":
            break
        if token.kind not in ("word", "quoted"):
            raise JaasConfigError(f"JAAS config line {token.line}: expected a login module class name, found "
                                  f"{_describe(token)}")
        entries.append(_entry(token.text, tokens))
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return entries


def _entry(login_module: str, tokens: Iterator[_Token]) -> JaasEntry:
    flag_token = next(tokens)
    if flag_token.kind == "eof":
        raise JaasConfigError(f"Login module control flag not specified in JAAS config (after {login_module})")
    if flag_token.kind not in ("word", "quoted") or flag_token.text.upper() not in _CONTROL_FLAGS:
        raise JaasConfigError(f"Invalid login module control flag {_describe(flag_token)} in JAAS config for "
                              f"{login_module}; expected one of {', '.join(f.lower() for f in _CONTROL_FLAGS)}")
    options: dict[str, str] = {}
    while True:
        token = next(tokens)
        if token.kind == "eof":
            raise JaasConfigError(f"JAAS config entry not terminated by semi-colon ({login_module})")
        if token.kind == "char" and token.text == ";":
            break
        if token.kind not in ("word", "quoted"):
            raise JaasConfigError(f"JAAS config line {token.line}: expected an option name or ';' in the entry for "
                                  f"{login_module}, found {_describe(token)}")
        key = token.text
        equals = next(tokens)
        if equals.kind != "char" or equals.text != "=":
            raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config (expected '=' after it, "
                                  f"found {_describe(equals)})")
        value = next(tokens)
        if value.kind == "open-quote":
            raise JaasConfigError(f"Value for key '{key}' in JAAS config is a quoted string that is never closed")
        if value.kind not in ("word", "quoted"):
            raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config (found {_describe(value)})")
        options[key] = value.text
    return JaasEntry(login_module, flag_token.text.upper(), options)


def parse_single_jaas_config(text: str) -> JaasEntry:
    """A `sasl.jaas.config` value: exactly one login module, as Kafka's JaasContext requires."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]


def jaas_config_key(listener: str | None, mechanism: str) -> str:
    """The config key a broker reads a mechanism's JAAS config from: Kafka's listener- and mechanism-prefixed
    `listener.name.<listener>.<mechanism>.sasl.jaas.config` (both lower case), or `sasl.jaas.config`."""
    if listener is None:
        return "sasl.jaas.config"
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
