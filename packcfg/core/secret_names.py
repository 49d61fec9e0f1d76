"""Which config keys name a credential: one rule shared by the launch flow (literal secrets never enter a job
bundle) and the train flow (the config W&B stores is redacted).

A key *looks like a secret* when its words (split on `_`, `-`, `.` and camelCase) contain SECRET,
PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL(S) or APIKEY, or end with TOKEN or KEY (`hf_token`,
`HF_TOKEN`, `wandb_api_key`, `AWS_SECRET_ACCESS_KEY`, `authToken`). Not secrets: names that say where a
secret lives or describe one (`MY_TOKEN_FILE`, `ssh_key_path`, `pad_token_id`, `token_dir`), and a
tokenizer's special tokens (`eos_token`, `pad_token`, `image_token`).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
SECRET_WORDS = {
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


def words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(str(name))]


def looks_secret(name: str) -> bool:
    """True when a key's name says its value is a credential (see the module docstring)."""
    parts = words(name)
    if not parts or parts[-1] in _DESCRIBES:
        return False
    if any(p in SECRET_WORDS for p in parts) or "".join(parts[-2:]) == "apikey":
        return True
    if parts[-1] in _LAST:
        return not (len(parts) > 1 and parts[-2] in _TOKEN_ROLES)
    return False
