"""Keep credentials out of messages, plans and logs."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^@/?#\s]*)@")
_SECRET_PARAM = re.compile(r"(?i)([?&](?:password|passwd|pwd|token|secret|api[_-]?key)=)[^&#\s]*")


def redact_url(url: str) -> str:
    """Return ``url`` with any password (and secret-looking query parameters) replaced by ``***``.

    >>> redact_url("redis://user:s3cret@host:6379/0")
    'redis://user:***@host:6379/0'
    >>> redact_url("redis://:s3cret@host")
    'redis://:***@host'
    """

    def _userinfo(match: re.Match[str]) -> str:
        userinfo = match.group("userinfo")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            userinfo = f"{user}:***"
        return f"{match.group('scheme')}{userinfo}@"

    return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub(_userinfo, url))
