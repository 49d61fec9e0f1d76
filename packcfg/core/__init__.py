"""The shared core every flow builds on: config loading, schema, diagnostics, bundled resources."""
