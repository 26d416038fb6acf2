"""Subscriptions through the gateway, both directions in one place (the
rules are core/subscriptions.py's):

- listens.py: a modern client's `subscriptions/listen` (DESIGN §5.1.9) —
  on a legacy server, served with the shared session's resources/subscribe;
  on a modern one, the server's subscription ids mapped back to the client's.
- session_listen.py: a legacy client's resources/subscribe on a modern
  server (DESIGN §5.2.6) — one upstream `subscriptions/listen` per session.
- client_subscriptions.py: both wired to the upstream — listens moved to a
  new session on a restart, and every one ended gracefully at shutdown.
"""
