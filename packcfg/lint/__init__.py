"""The lint flow: load YAML with positions, normalise, validate, run every rule, report."""
