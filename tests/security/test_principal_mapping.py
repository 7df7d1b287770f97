"""`ssl.principal.mapping.rules` as Kafka's SslPrincipalMapper applies them, and KafkaPrincipal's string form.

The first group is Kafka's own SslPrincipalMapperTest (clients/src/test/java/org/apache/kafka/common/security/
ssl/SslPrincipalMapperTest.java), case for case. The second group are answers Kafka 4.3.1's
SslPrincipalMapper.getName gave for these rules and DNs (run under OpenJDK 17 with kafka-clients-4.3.1.jar
while this module was written): back references to missing groups, `${name}`, Java's replaceAll on an
empty match, ASCII `\\w`, and the errors.
"""

from __future__ import annotations

import pytest

from kelp.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRuleError,
    PrincipalMappingError,
    SslPrincipalMapper,
)

# --- SslPrincipalMapperTest -------------------------------------------------------------------------------


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules: str) -> None:  # testValidRules
    SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:  # testInvalidRules
    with pytest.raises(PrincipalMappingError, match="Invalid rule"):
        SslPrincipalMapper.from_rules(rules)


def test_ssl_principal_mapper() -> None:  # testSslPrincipalMapper
    mapper = SslPrincipalMapper.from_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name_for("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name_for("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name_for("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name_for("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name_for("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    # rules rule
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected: str, rules: str) -> None:  # testRulesSplitting ("seeing is believing")
    assert str(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:  # testCommaWithWhitespace
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name_for("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


# --- answers of Kafka 4.3.1's SslPrincipalMapper ----------------------------------------------------------

@pytest.mark.parametrize(("rules", "dn", "name"), [
    # $4 with three groups is a literal "$4"; $12 is $1 followed by "2"; $0 is the whole match
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1-$4-$12-$0/", "CN=a,OU=b,O=c", "a-$4-a2-CN=a,OU=b,O=c"),
    ("RULE:^CN=(?<user>[^,]*)(,OU=(.*))?$/${user}:$3/U", "CN=Joe", "JOE:"),  # an unmatched group is empty
    ("RULE:^CN=(?<user>[^,]*)(,OU=(.*))?$/${user}:$3/U", "CN=Joe,OU=x", "JOE:X"),
    ("RULE:.*/X/", "abc", "XX"),  # replaceAll also replaces the empty match at the end
    ("RULE:(a*)/[$1]/", "aaa", "[aaa][]"),
    ("RULE:^CN=([^,]*).*$/$1/L, DEFAULT", "CN=ÄBC,O=x", "äbc"),
    ("RULE:^CN=([^,]*).*$/$10/", "CN=ab,O=x", "ab0"),
    ("RULE:^(C)(N)(=)(a)(b)(c)(d)(e)(f)(g)(h)$/$11$10/", "CN=abcdefgh", "hg"),
    ("RULE:^O=(.*)$/$1/, DEFAULT", "CN=x", "CN=x"),
])
def test_replacements_as_kafka_expands_them(rules: str, dn: str, name: str) -> None:
    assert SslPrincipalMapper.from_rules(rules).name_for(dn) == name


def test_word_characters_are_ascii_as_in_java() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(\\w+)$/$1/")
    with pytest.raises(NoMatchingRuleError, match=r"No rules apply to CN=Jürgen, rules \[RULE:\^CN=\(\\w\+\)\$/\$1\]"):
        mapper.name_for("CN=Jürgen")


@pytest.mark.parametrize(("rules", "message"), [
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$3$2$1 \\$1 x$/", "Illegal group reference: group index is missing"),
    ("RULE:^CN=x$/a$/, DEFAULT", "Illegal group reference: group index is missing"),
    ("RULE:^CN=x$/$1/, DEFAULT", "No group 1"),
])
def test_bad_replacements_fail_when_the_rule_applies(rules: str, message: str) -> None:
    mapper = SslPrincipalMapper.from_rules(rules)
    with pytest.raises(PrincipalMappingError, match=message):
        mapper.name_for("CN=x" if "CN=x" in rules else "CN=a,OU=b,O=c")


def test_default_when_no_rules_are_given() -> None:
    assert SslPrincipalMapper.from_rules(None).name_for("CN=a,O=b") == "CN=a,O=b"


@pytest.mark.parametrize("pattern", ["\\Qa.b\\E", "\\p{Lu}+", "[a-z&&[^x]]"])
def test_java_only_regex_syntax_is_refused_by_name(pattern: str) -> None:
    with pytest.raises(PrincipalMappingError, match="Java regex syntax"):
        SslPrincipalMapper.from_rules(f"RULE:{pattern}/x/")


def test_a_broken_pattern_names_its_rule() -> None:
    with pytest.raises(PrincipalMappingError, match="RULE:CN=\\(a/x/"):
        SslPrincipalMapper.from_rules("RULE:CN=(a/x/")


# --- KafkaPrincipal ---------------------------------------------------------------------------------------

def test_principal_string_form_and_parse() -> None:
    alice = KafkaPrincipal.user("alice")
    assert str(alice) == "User:alice"
    assert KafkaPrincipal.parse("User:alice") == alice
    assert KafkaPrincipal.parse("User:a:b") == KafkaPrincipal("User", "a:b")  # split at the first colon
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert KafkaPrincipal("User", "alice", token_authenticated=True) == alice  # Kafka's equals ignores it


@pytest.mark.parametrize("text", ["", "bob"])
def test_principal_without_type_is_refused(text: str) -> None:
    with pytest.raises(PrincipalMappingError, match="principalType:principalName"):
        KafkaPrincipal.parse(text)
