"""packcfg inside other tools: `nemo_run_plugin` (a NeMo-Run plugin that checks a task's config before launch).

Each module imports its tool on import; nothing here is imported by `import packcfg`.
"""
