"""Per-path protocol state machines. No I/O, no clock, no anyio: the runtime
feeds them messages and carries out what they decide."""
