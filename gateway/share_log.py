"""The operator's line when a shared pool refuses (core/fair_share.py): one
a minute per kind, with the count of those held back, however often a
principal knocks on a full pool."""

from __future__ import annotations

import structlog

from gateway.core.fair_share import POOL_FULL, SHARE_FULL, Share
from gateway.log_limit import LogLimiter

log = structlog.get_logger("gateway.shares")
limited = LogLimiter(log)


def log_refusal(refusal: str, pool: str, principal: str, share: Share) -> None:
    """`refusal`: "total" or "share", as ShareCount.refusal says."""
    limited.warning(
        SHARE_FULL if refusal == "share" else POOL_FULL,
        pool=pool,
        principal=principal,
        limit=share.total,
        share=share.per_principal,
    )
