"""`packcfg render|launch|status|logs|cancel`: thin commands over `packcfg.launch.service`.

Each module imports only the standard library at top level (building the CLI parser stays cheap).
"""
