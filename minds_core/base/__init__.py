"""The floor everything stands on: minds' errors, structured logs, secrets and their masking, the timing of blocking
plugin calls, signal handling (Ctrl-C), and the install hint for a missing extra. It imports nothing else of minds
but the tracing spans beside it."""
