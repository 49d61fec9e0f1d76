"""Every lint rule, one module per rule family; importing this package registers them all."""

from packcfg.lint.rules import (  # noqa: F401  (registers on import)
    cg,
    cp,
    dp,
    ds,
    ls,
    mf,
    pk,
    pl,
    sc_file,
    sc_schema,
)
