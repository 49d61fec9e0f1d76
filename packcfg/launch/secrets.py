"""Secret-looking values: a credential is passed from the environment, never written into a bundle.

A key *looks like a secret* as `packcfg.core.secret_names.looks_secret` says (`hf_token`, `wandb_api_key`,
`AWS_SECRET_ACCESS_KEY`; not `pad_token_id` or `ssh_key_path`): the core holds that rule, so the train flow's
W&B redaction uses the same one without importing this flow.

A value *comes from the environment* when it is, as a whole, an OmegaConf env interpolation
`${oc.env:VAR}` / `${oc.env:VAR,default}` (anywhere in the config), or, inside `launch.env`, a reference
`$VAR` / `${VAR}` (the job script reads the variable at run time). `???` (OmegaConf's "missing") and an
empty value are not literals either. Anything else under a secret-looking key is a literal secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from packcfg.core.secret_names import SECRET_WORDS, looks_secret, words

ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,[^{}]*)?\}\Z")
SHELL_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}\Z|\$([A-Za-z_][A-Za-z0-9_]*)\Z")


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
    return any(p in SECRET_WORDS for p in words(name))


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
