"""`packcfg plan` (standard library only at import: the CLI imports it to build its parser)."""
