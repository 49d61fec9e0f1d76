"""Secret-looking values: a credential is passed from the environment, never written into a bundle.

A key *looks like a secret* when its words (split on `_`, `-`, `.` and camelCase) contain SECRET,
PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL(S) or APIKEY, or end with TOKEN or KEY (`hf_token`,
`HF_TOKEN`, `wandb_api_key`, `AWS_SECRET_ACCESS_KEY`, `authToken`). Not secrets: names that say where a
secret lives or describe one (`MY_TOKEN_FILE`, `ssh_key_path`, `pad_token_id`, `token_dir`), and a
tokenizer's special tokens (`eos_token`, `pad_token`, `image_token`).

A value *comes from the environment* when it is, as a whole, an OmegaConf env interpolation
`${oc.env:VAR}` / `${oc.env:VAR,default}` (anywhere in the config), or, inside `launch.env`, a reference
`$VAR` / `${VAR}` (the job script reads the variable at run time). `???` (OmegaConf's "missing") and an
empty value are not literals either. Anything else under a secret-looking key is a literal secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_ANYWHERE = {
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "apikey",
}
_LAST = {"token", "key"}
# Last words that make the name about a secret, not the secret itself.
_DESCRIBES = {
    "file",
    "files",
    "path",
    "paths",
    "dir",
    "folder",
    "id",
    "ids",
    "name",
    "names",
    "type",
    "kind",
    "env",
    "var",
    "variable",
    "len",
    "length",
    "size",
    "count",
    "num",
    "dim",
    "prefix",
    "suffix",
    "url",
    "host",
    "header",
    "policy",
    "dropping",
    "dispatcher",
}
# `<role>_token` of a tokenizer: a vocabulary entry, not a credential.
_TOKEN_ROLES = {
    "bos",
    "eos",
    "eot",
    "eod",
    "pad",
    "unk",
    "sep",
    "cls",
    "mask",
    "image",
    "video",
    "audio",
    "vision",
    "start",
    "end",
    "special",
    "extra",
    "placeholder",
    "boi",
    "eoi",
    "begin",
    "tool",
    "think",
}
ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,[^{}]*)?\}\Z")
SHELL_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}\Z|\$([A-Za-z_][A-Za-z0-9_]*)\Z")


def words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(str(name))]


def looks_secret(name: str) -> bool:
    """True when a key's name says its value is a credential (see the module docstring)."""
    parts = words(name)
    if not parts or parts[-1] in _DESCRIBES:
        return False
    if any(p in _ANYWHERE for p in parts) or "".join(parts[-2:]) == "apikey":
        return True
    if parts[-1] in _LAST:
        return not (len(parts) > 1 and parts[-2] in _TOKEN_ROLES)
    return False


def env_reference(value: Any, *, shell: bool = False) -> str | None:
    """The variable a value reads from the environment (`${oc.env:VAR}`; with `shell`, also `$VAR` and
    `${VAR}`), or None when it is not such a reference."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    match = ENV_INTERPOLATION.match(text)
    if match:
        return match.group(1)
    if shell:
        match = SHELL_REFERENCE.match(text)
        if match:
            return match.group(1) or match.group(2)
    return None


def _strong(name: str) -> bool:
    """SECRET/PASSWORD/...-named: a number is a literal secret too (a `*_key: 3` or `*_token: 7` is
    more likely an index, so only strings count there)."""
    return any(p in _ANYWHERE for p in words(name))


def _literal(value: Any) -> bool:
    if value is None or isinstance(value, bool) or isinstance(value, Mapping | list):
        return False
    text = str(value).strip()
    return text not in ("", "???")


def literal_secrets(config: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of every secret-looking key whose value is a literal, not from the environment."""

    def walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        if isinstance(node, Mapping):
            for key, value in node.items():
                sub = (*path, str(key))
                if isinstance(value, Mapping | list):
                    yield from walk(value, sub)
                elif (
                    looks_secret(str(key))
                    and _literal(value)
                    and (isinstance(value, str) or _strong(str(key)))
                ):
                    in_launch_env = path == ("launch", "env")
                    if env_reference(value, shell=in_launch_env) is None:
                        yield sub, value
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, (*path, str(i)))

    yield from walk(config, ())
