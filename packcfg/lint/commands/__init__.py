"""`packcfg lint | explain | rules | schema`: thin commands over the lint library (stdlib-only imports)."""
