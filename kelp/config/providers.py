"""Kafka's config providers (KIP-297, KIP-887): `${env:NAME}`, `${file:PATH:KEY}` and `${dir:PATH:FILE}` in values.

Why: one broker config file serves every pod of a StatefulSet when the per-pod parts (its name, its address, its
certificate's path) come from the environment, and secrets stay out of config files when a value names the file
that holds them. Kafka users write exactly this in `server.properties`:

    config.providers=env,file
    config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
    advertised.listeners=INTERNAL://${env:POD_NAME}.brokers.ns.svc:9092
    listener.name.internal.plain.sasl.jaas.config=${file:/etc/kelp/jaas.properties:plain}

The three providers Kafka ships are served, under Kafka's class names (Kelp's short names `env`, `file`, `dir`
too), with Kafka's parameters: `config.providers.NAME.param.allowlist.pattern` (env: only variables whose name
matches) and `config.providers.NAME.param.allowed.paths` (file, dir: only under these comma-separated
directories). Any other class is refused by name, as is a `${name:...}` whose provider is not configured or
whose variable, file or key does not exist: Kafka leaves such a reference in place and the broker would
start with a literal `${env:POD_NAME}` as its address; Kelp stops and says which key referred to what.

This is the one place the broker's configuration reads files other than its config file (the providers'
files, when a value refers to them); it opens no sockets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kelp.errors import ConfigError

__all__ = ["PROVIDER_PREFIX", "is_provider_key", "resolve_config_references"]

PROVIDER_PREFIX = "config.providers"

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}.
_REFERENCE = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")

_ENV_CLASSES = {"org.apache.kafka.common.config.provider.EnvVarConfigProvider", "env"}
_FILE_CLASSES = {"org.apache.kafka.common.config.provider.FileConfigProvider", "file"}
_DIR_CLASSES = {"org.apache.kafka.common.config.provider.DirectoryConfigProvider", "dir", "directory"}
_PARAMS = {"env": {"allowlist.pattern"}, "file": {"allowed.paths"}, "dir": {"allowed.paths"}}


def is_provider_key(key: str) -> bool:
    """`config.providers` and its `config.providers.NAME.class` / `.param.P` keys."""
    return key == PROVIDER_PREFIX or key.startswith(PROVIDER_PREFIX + ".")


@dataclass(frozen=True)
class _Provider:
    name: str
    kind: str  # env | file | dir
    allowlist: re.Pattern[str] | None
    allowed_paths: tuple[Path, ...] | None

    def get(self, path: str | None, key: str, *, env: Mapping[str, str], refers: str) -> str:
        if self.kind == "env":
            if path:
                raise ConfigError(f"{refers}: the env provider takes ${{{self.name}:NAME}}, not a path ({path!r})")
            if self.allowlist is not None and not self.allowlist.fullmatch(key):
                raise ConfigError(f"{refers}: environment variable {key} does not match "
                                  f"config.providers.{self.name}.param.allowlist.pattern")
            if key not in env:
                raise ConfigError(f"{refers}: the environment has no variable {key}")
            return env[key]
        if not path:
            raise ConfigError(f"{refers}: the {self.kind} provider takes ${{{self.name}:PATH:KEY}}")
        target = Path(path)
        self._check_allowed(target, refers)
        if self.kind == "dir":
            if "/" in key or key in ("", ".", ".."):
                raise ConfigError(f"{refers}: {key!r} is not a file name in directory {path}")
            return _read_text(target / key, refers)
        from .file import read_properties_text

        values = read_properties_text(_read_text(target, refers), target)
        if key not in values:
            raise ConfigError(f"{refers}: {path} has no key {key!r}")
        return str(values[key])

    def _check_allowed(self, target: Path, refers: str) -> None:
        if self.allowed_paths is None:
            return
        real = Path(os.path.realpath(target))
        if not any(real == allowed or allowed in real.parents for allowed in self.allowed_paths):
            raise ConfigError(f"{refers}: {target} is outside config.providers.{self.name}.param.allowed.paths")


def _read_text(path: Path, refers: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{refers}: cannot read {path}: {exc}") from None


def _providers(settings: Mapping[str, object]) -> dict[str, _Provider]:
    names = [n.strip() for n in str(settings.get(PROVIDER_PREFIX) or "").split(",") if n.strip()]
    known = {PROVIDER_PREFIX} | {f"{PROVIDER_PREFIX}.{n}.class" for n in names}
    for key in settings:
        if key in known:
            continue
        rest = key[len(PROVIDER_PREFIX) + 1:]
        name, _, param = rest.partition(".param.")
        if name not in names or not param:
            raise ConfigError(f"unknown broker config '{key}': config.providers names {names or 'no provider'}; "
                              f"a provider takes config.providers.NAME.class and config.providers.NAME.param.P")
    out: dict[str, _Provider] = {}
    for name in names:
        cls = str(settings.get(f"{PROVIDER_PREFIX}.{name}.class") or "")
        kind = ("env" if cls in _ENV_CLASSES else "file" if cls in _FILE_CLASSES
                else "dir" if cls in _DIR_CLASSES else None)
        if kind is None:
            raise ConfigError(
                f"config.providers.{name}.class is {cls or 'not set'}: Kelp serves Kafka's EnvVarConfigProvider, "
                "FileConfigProvider and DirectoryConfigProvider (org.apache.kafka.common.config.provider.*)")
        params = {key.split(".param.", 1)[1]: str(value) for key, value in settings.items()
                  if key.startswith(f"{PROVIDER_PREFIX}.{name}.param.")}
        unknown = sorted(set(params) - _PARAMS[kind])
        if unknown:
            raise ConfigError(f"config.providers.{name}.param.{unknown[0]}: the {kind} provider takes "
                              f"{', '.join(sorted(_PARAMS[kind]))}")
        allowlist = None
        if "allowlist.pattern" in params:
            try:
                allowlist = re.compile(params["allowlist.pattern"])
            except re.error as exc:
                raise ConfigError(f"config.providers.{name}.param.allowlist.pattern is no regular expression: "
                                  f"{exc}") from None
        allowed = None
        if "allowed.paths" in params:
            allowed = tuple(Path(os.path.realpath(p.strip())) for p in params["allowed.paths"].split(",")
                            if p.strip())
        out[name] = _Provider(name, kind, allowlist, allowed)
    return out


def resolve_config_references(
    sources: list[tuple[str, dict[str, object]]], *, env: Mapping[str, str],
) -> list[tuple[str, dict[str, object]]]:
    """Take the `config.providers*` keys out of every source (later sources win) and replace each `${...}`
    reference in the other string values; returns the sources without those keys. No providers configured:
    the values are left exactly as given (a `${` in a password stays a `${`)."""
    settings: dict[str, object] = {}
    stripped: list[tuple[str, dict[str, object]]] = []
    for source, items in sources:
        settings.update({k: v for k, v in items.items() if is_provider_key(k)})
        stripped.append((source, {k: v for k, v in items.items() if not is_provider_key(k)}))
    if not settings:
        return stripped
    providers = _providers(settings)
    out: list[tuple[str, dict[str, object]]] = []
    for source, items in stripped:
        resolved: dict[str, object] = {}
        for key, value in items.items():
            if isinstance(value, str) and "${" in value:
                value = _substitute(key, value, source, providers, env)
            resolved[key] = value
        out.append((source, resolved))
    return out


def _substitute(key: str, value: str, source: str, providers: Mapping[str, _Provider],
                env: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name, path, ref = match.group(1), match.group(3), match.group(4)
        refers = f"broker config '{key}' (from {source}) refers to {match.group(0)}"
        provider = providers.get(name)
        if provider is None:
            raise ConfigError(f"{refers}, but config.providers names no provider {name!r} "
                              f"(it names {', '.join(providers) or 'none'})")
        return provider.get(path, ref, env=env, refers=refers)

    return _REFERENCE.sub(one, value)
