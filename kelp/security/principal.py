"""Principals: `KafkaPrincipal`, Kafka's `ssl.principal.mapping.rules`, and a certificate's subject as Java renders it.

Why: ACLs, `super.users` and quotas name principals the way Kafka prints them (`User:alice`), and a
mutual-TLS client's name comes from its certificate through Kafka's `SslPrincipalMapper` applied to the
subject exactly as Java's `X500Principal.getName()` (RFC 2253) renders it. A Kafka user's rules, ACLs and
super users must keep working unchanged on Kelp, so both are reproduced from the sources they come from:

- `SslPrincipalMapper` follows Kafka's class of the same name (clients/.../security/ssl/
  SslPrincipalMapper.java): the same rule splitter and parser regexes and the same Java `Matcher.find`
  loop, first matching rule wins, `DEFAULT` gives the whole DN, `/L` and `/U` fold case (ASCII, as
  `Locale.ENGLISH` does), and the replacement is expanded as Java's `String.replaceAll` does, after
  Kafka's (NiFi's) escaping of back references to groups that do not exist.
- Rule patterns are compiled by Python's `re` with `re.ASCII` (Java's `\\w`, `\\d`, `\\s` and case folding
  are ASCII by default). Java-only constructs `re` would read differently (`\\Q...\\E`, `\\p{...}`,
  class intersection `&&`) are refused with an error naming the rule; `(?<name>...)` is accepted.
- `dn_from_der_name` renders an X.500 Name as OpenJDK's `X500Name.getRFC2253Name()` does
  (sun.security.x509.AVA.toRFC2253String): RDNs last to first joined by `,`, multi-valued RDNs in
  encoding order joined by `+`, keywords only for CN C L ST O OU STREET DC UID, any other attribute as its
  dotted OID with the value as `#` and the hex of its DER; string values of the six DirectoryString-like
  tags (Printable, T61, IA5, General, BMP, UTF8) as their bytes read as UTF-8 with `,=+<>#;"\\` escaped
  by a backslash, NUL as `\\00`, and leading and trailing spaces and CRs escaped; other tags (Numeric,
  Visible, Universal, ...) as `#` hex.

The `getpeercert()` dict that Python's `ssl` gives has lost each value's ASN.1 tag and the encoding of
unknown attributes, so `dn_from_peercert` is exact only for the RFC 2253 keyword attributes and refuses
others: use the DER form (`getpeercert(binary_form=True)`) with `dn_from_der_certificate`.

This module must never do I/O or trust a name it has not parsed: a malformed DER is an error, not a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kelp.errors import ConfigError

__all__ = [
    "ANONYMOUS",
    "USER_TYPE",
    "KafkaPrincipal",
    "NoMatchingRuleError",
    "PrincipalMappingError",
    "SslPrincipalMapper",
    "dn_from_der_certificate",
    "dn_from_der_name",
    "dn_from_peercert",
    "principal_from_certificate",
]

USER_TYPE = "User"


@dataclass(frozen=True)
class KafkaPrincipal:
    """A principal as Kafka has it: a type (`User`) and a name; `str()` is Kafka's `User:alice`.

    Equality is type and name only, as in Kafka (`token_authenticated` is carried, not compared).
    """

    principal_type: str
    name: str
    token_authenticated: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """Kafka's SecurityUtils.parseKafkaPrincipal: `Type:name`, split at the first colon."""
        if not text or ":" not in text:
            raise PrincipalMappingError(f"expected a string in format principalType:principalName but got {text}")
        principal_type, name = text.split(":", 1)
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
"""Kafka's principal for an unauthenticated connection (PLAINTEXT, or TLS without a client certificate)."""


class PrincipalMappingError(ConfigError):
    """A mapping rule that cannot be used, or a DN or certificate that cannot be rendered."""


class NoMatchingRuleError(PrincipalMappingError):
    """No rule of `ssl.principal.mapping.rules` applies to a certificate's DN (Kafka's NoMatchingRule)."""


# --- ssl.principal.mapping.rules -------------------------------------------------------------------------

# Kafka's RULE_PATTERN, RULE_SPLITTER and RULE_PARSER. Java's `\s` is [ \t\n\x0B\f\r] and `.` stops at any
# of Java's line terminators; both spelled out so Python reads the same strings.
_DOT = "[^\n\r\u0085\u2028\u2029]"
_WS = "[ \t\n\x0b\f\r]"
_RULE_PATTERN = rf"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?){_DOT}*?|({_DOT}*?)"
_RULE_SPLITTER = re.compile(rf"{_WS}*({_RULE_PATTERN}){_WS}*(,{_WS}*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")
# Java regex syntax Python's `re` would accept with another meaning, or reject with a confusing message.
_JAVA_ONLY = (("\\Q", "quoting with \\Q...\\E"), ("\\p{", "character properties \\p{...}"),
              ("\\P{", "character properties \\P{...}"), ("&&", "character class intersection &&"))


def _java_trim(text: str) -> str:
    """Java's String.trim(): drop leading and trailing characters up to U+0020."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _split_rules(rules: str) -> list[str]:
    """Kafka's splitRules: `RULE_SPLITTER.matcher(rules.trim())` and `find()` until it fails, with Java's
    rule for where the next search starts (one past an empty match)."""
    text = _java_trim(rules)
    found: list[str] = []
    first, last = -1, 0
    while True:
        start = last + 1 if last == first else last
        if start > len(text):
            break
        match = _RULE_SPLITTER.search(text, start)
        if match is None:
            break
        first, last = match.start(), match.end()
        found.append(match.group(1))
    return found


def _compile_rule_pattern(pattern: str, rule: str) -> re.Pattern[str]:
    for token, what in _JAVA_ONLY:
        if token in pattern:
            raise PrincipalMappingError(
                f"Invalid rule: `{rule}`: {what} is Java regex syntax Kelp does not support (patterns are "
                "Python regular expressions with Java's ASCII defaults); rewrite the pattern without it")
    # Java's named group `(?<name>...)` is `(?P<name>...)` in Python; lookbehinds `(?<=` `(?<!` stay.
    translated = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)
    try:
        return re.compile(translated, re.ASCII)
    except re.error as exc:
        raise PrincipalMappingError(f"Invalid rule: `{rule}`: bad regular expression: {exc}") from None


@dataclass(frozen=True)
class _Rule:
    is_default: bool
    pattern_text: str = ""
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False
    pattern: re.Pattern[str] | None = None

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        text = "RULE:" + self.pattern_text + "/" + self.replacement
        if self.to_lower:
            text += "/L"
        elif self.to_upper:
            text += "/U"
        return text

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        replacement = _escape_literal_back_references(self.replacement, self.pattern.groups)
        result = self.pattern.sub(_java_replacer(replacement, self), dn)
        # Java's toLowerCase/toUpperCase(Locale.ENGLISH) and Python's str methods fold alike (full Unicode
        # case mapping without locale rules).
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result


def _escape_literal_back_references(unescaped: str, group_count: int) -> str:
    """Kafka's escapeLiteralBackReferences (taken from Apache NiFi): a `$n` naming a group the pattern does
    not have is shortened to the longest existing group number, else escaped as a literal `$`. Positions
    come from the original string while the value is edited, as in Kafka."""
    if group_count == 0:
        return unescaped
    value = unescaped
    for match in _BACK_REFERENCE.finditer(unescaped):
        number = match.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > group_count and index >= 10:
            index //= 10
        if index > group_count:
            group_start = match.start(1)
            value = value[: group_start - 1] + "\\" + value[group_start - 1:]
    return value


def _java_replacer(replacement: str, rule: _Rule) -> Callable[[re.Match[str]], str]:
    """A function for `re.sub` that expands `replacement` as java.util.regex.Matcher.appendReplacement:
    `\\x` is a literal x, `$n` takes the longest group number that exists (the first digit always counts),
    `${name}` a named group, an unmatched group expands to nothing."""

    def expand(match: re.Match[str]) -> str:
        out: list[str] = []
        cursor = 0
        group_count = match.re.groups
        while cursor < len(replacement):
            char = replacement[cursor]
            if char == "\\":
                cursor += 1
                if cursor == len(replacement):
                    raise PrincipalMappingError(f"Rule `{rule}`: character to be escaped is missing")
                out.append(replacement[cursor])
                cursor += 1
            elif char == "$":
                cursor += 1
                if cursor == len(replacement):
                    raise PrincipalMappingError(f"Rule `{rule}`: Illegal group reference: group index is missing")
                group: int | str
                if replacement[cursor] == "{":
                    cursor += 1
                    end = replacement.find("}", cursor)
                    name = replacement[cursor:end] if end >= 0 else ""
                    if end < 0 or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
                        raise PrincipalMappingError(f"Rule `{rule}`: bad named-group reference in the replacement")
                    if name not in match.re.groupindex:
                        raise PrincipalMappingError(f"Rule `{rule}`: No group with name {{{name}}}")
                    group = name
                    cursor = end + 1
                else:
                    if not "0" <= replacement[cursor] <= "9":
                        raise PrincipalMappingError(f"Rule `{rule}`: Illegal group reference")
                    number = ord(replacement[cursor]) - ord("0")
                    cursor += 1
                    while cursor < len(replacement) and "0" <= replacement[cursor] <= "9":
                        longer = number * 10 + ord(replacement[cursor]) - ord("0")
                        if longer > group_count:
                            break
                        number = longer
                        cursor += 1
                    if number > group_count:
                        raise PrincipalMappingError(f"Rule `{rule}`: No group {number}")
                    group = number
                value = match.group(group)
                if value is not None:
                    out.append(value)
            else:
                out.append(char)
                cursor += 1
        return "".join(out)

    return expand


def _parse_rules(rules: list[str]) -> list[_Rule]:
    parsed: list[_Rule] = []
    for rule in rules:
        match = _RULE_PARSER.match(rule)
        if match is None:
            raise PrincipalMappingError(f"Invalid rule: {rule}")
        if match.end() != len(rule):
            raise PrincipalMappingError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end():]}`")
        if match.group(1) is not None:
            parsed.append(_Rule(is_default=True))
        elif match.group(2) is not None:
            pattern_text, replacement, case = match.group(2), match.group(4), match.group(6)
            parsed.append(_Rule(is_default=False, pattern_text=pattern_text, replacement=replacement,
                                to_lower=case == "L", to_upper=case == "U",
                                pattern=_compile_rule_pattern(pattern_text, rule)))
        # else: an empty rule, ignored as Kafka does
    return parsed


class SslPrincipalMapper:
    """Kafka's `ssl.principal.mapping.rules`: comma-separated `RULE:pattern/replacement/[LU]` and `DEFAULT`.

    `name_for(dn)` applies the first rule whose pattern matches the whole DN; `DEFAULT` returns the DN.
    """

    def __init__(self, rules: str | None = None) -> None:
        self._rules = _parse_rules(_split_rules("DEFAULT" if rules is None else rules))

    @classmethod
    def from_rules(cls, rules: str | None) -> SslPrincipalMapper:
        return cls(rules)

    def name_for(self, dn: str) -> str:
        for rule in self._rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"No rules apply to {dn}, rules [{', '.join(str(r) for r in self._rules)}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(str(r) for r in self._rules)}])"


# --- X.500 names as Java renders them ---------------------------------------------------------------------

# AVAKeyword entries that are RFC 2253 compliant (OID -> keyword); every other attribute is its dotted OID.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# AVA.isDerString(value, canonical=false): Printable, T61, IA5, General, BMP, UTF8.
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPED = ',=+<>#;"\\'
# OpenSSL's long names in getpeercert() for the keyword attributes.
_PEERCERT_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def _read_tlv(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """One DER TLV at `pos`: (tag, content start, content end, next position)."""
    if pos + 2 > len(data):
        raise PrincipalMappingError("malformed DER name: truncated")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise PrincipalMappingError("malformed DER name: multi-byte tags are not used in names")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise PrincipalMappingError("malformed DER name: bad length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise PrincipalMappingError("malformed DER name: truncated")
    return tag, pos, pos + length, pos + length


def _oid(content: bytes) -> str:
    if not content or content[-1] & 0x80:
        raise PrincipalMappingError("malformed DER name: bad object identifier")
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def _escape_value(text: str) -> str:
    """AVA.toRFC2253String's escaping of a string value (non-canonical form)."""
    chars: list[str] = []
    for char in text:
        if char in _ESCAPED:
            chars.append("\\" + char)
        elif char == "\x00":
            chars.append("\\00")
        else:
            chars.append(char)
    flat = "".join(chars)
    lead = 0
    while lead < len(flat) and flat[lead] in " \r":
        lead += 1
    trail = len(flat) - 1
    while trail >= 0 and flat[trail] in " \r":
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(flat))


def _ava(keyword: str, tag: int, value_tlv: bytes, content: bytes) -> str:
    if keyword[0].isdigit() or tag not in _STRING_TAGS:
        return f"{keyword}=#{value_tlv.hex()}"
    return f"{keyword}={_escape_value(content.decode('utf-8', errors='replace'))}"


def dn_from_der_name(name_der: bytes) -> str:
    """An X.500 Name (its DER) as Java's `X500Principal.getName()` renders it (RFC 2253)."""
    tag, start, end, after = _read_tlv(name_der, 0)
    if tag != 0x30 or after != len(name_der):
        raise PrincipalMappingError("malformed DER name: not a single SEQUENCE")
    rdns: list[str] = []
    pos = start
    while pos < end:
        set_tag, set_start, set_end, pos = _read_tlv(name_der, pos)
        if set_tag != 0x31:
            raise PrincipalMappingError("malformed DER name: an RDN is not a SET")
        avas: list[str] = []
        inner = set_start
        while inner < set_end:
            seq_tag, seq_start, seq_end, inner = _read_tlv(name_der, inner)
            if seq_tag != 0x30:
                raise PrincipalMappingError("malformed DER name: an attribute is not a SEQUENCE")
            oid_tag, oid_start, oid_end, value_pos = _read_tlv(name_der, seq_start)
            if oid_tag != 0x06:
                raise PrincipalMappingError("malformed DER name: an attribute type is not an OID")
            value_tag, value_start, value_end, value_after = _read_tlv(name_der, value_pos)
            if value_after != seq_end:
                raise PrincipalMappingError("malformed DER name: extra bytes in an attribute")
            oid = _oid(name_der[oid_start:oid_end])
            avas.append(_ava(_RFC2253_KEYWORDS.get(oid, oid), value_tag, name_der[value_pos:value_end],
                             name_der[value_start:value_end]))
        if not avas:
            raise PrincipalMappingError("malformed DER name: an empty RDN")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def dn_from_der_certificate(certificate_der: bytes) -> str:
    """The subject of a DER certificate (`getpeercert(binary_form=True)`), as Java renders it."""
    from cryptography import x509  # imported here: only a TLS listener with client certificates needs it

    try:
        certificate = x509.load_der_x509_certificate(certificate_der)
    except ValueError as exc:
        raise PrincipalMappingError(f"not a DER X.509 certificate: {exc}") from None
    return dn_from_der_name(certificate.subject.public_bytes())


def dn_from_peercert(peercert: Mapping[str, object]) -> str:
    """The subject of Python's `getpeercert()` dict, as Java renders it, for the RFC 2253 keyword attributes
    only (the dict has lost the tags and encodings Java needs for any other; use the DER form for those)."""
    subject = peercert.get("subject")
    if not isinstance(subject, tuple):
        raise PrincipalMappingError("getpeercert() has no subject (was the certificate verified?)")
    rdns: list[str] = []
    for rdn in subject:
        avas: list[str] = []
        for pair in rdn:
            name, value = pair
            if not isinstance(value, str):
                raise PrincipalMappingError(f"subject attribute {name!r} is not a string in getpeercert()")
            keyword = _PEERCERT_NAMES.get(name)
            if keyword is None:
                raise PrincipalMappingError(
                    f"subject attribute {name!r} has no RFC 2253 keyword; Java renders it from its DER: use "
                    "dn_from_der_certificate(getpeercert(binary_form=True))")
            avas.append(f"{keyword}={_escape_value(value)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def principal_from_certificate(certificate_der: bytes | None, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """Kafka's DefaultKafkaPrincipalBuilder for a TLS connection: `User:<mapped DN>`, or ANONYMOUS when the
    client sent no certificate (ssl.client.auth=none or requested)."""
    if certificate_der is None:
        return ANONYMOUS
    return KafkaPrincipal.user(mapper.name_for(dn_from_der_certificate(certificate_der)))
