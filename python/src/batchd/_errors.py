"""The exceptions batchd raises: one class per libbatchd-client error code, all under Error."""


class Error(Exception):
    """A request, or a connection, that failed; str(error) is the client library's message."""

    code = ""  # the library's name for the error code ("timeout", "overloaded", ...)


class Timeout(Error):
    """The deadline passed before an answer came."""

    code = "timeout"


class Overloaded(Error):
    """No room for the request (too many in flight, or shed under load): retry later."""

    code = "overloaded"


class TooLarge(Error):
    """The input exceeds the daemon's --max-input-bytes."""

    code = "too_large"


class InvalidUtf8(Error):
    """The input (bytes) is not valid UTF-8."""

    code = "invalid_utf8"


class DaemonUnavailable(Error):
    """No daemon answered on the socket, or it went away and none came back in time."""

    code = "daemon_unavailable"


class BackendError(Error):
    """The backend failed on this request."""

    code = "backend_error"


class BackendUnavailable(Error):
    """No healthy device could run the request."""

    code = "backend_unavailable"


class Cancelled(Error):
    """The request was withdrawn before it ran (or its Client was closed)."""

    code = "cancelled"


class ProtocolError(Error):
    """The daemon's answer made no sense (a bug: please report it)."""

    code = "protocol_error"


class PermissionDenied(Error):
    """The daemon does not serve this user (batchd --allow-uid/--allow-gid)."""

    code = "permission_denied"


class TooManyClients(Error):
    """The daemon, or this user, has its maximum of clients attached."""

    code = "too_many_clients"


class UnknownModel(Error):
    """The daemon serves no model of that name or id."""

    code = "unknown_model"


# In the order of batchd::ErrorCode; batchd/__init__.py checks it against the library's names.
BY_CODE = (Timeout, Overloaded, TooLarge, InvalidUtf8, DaemonUnavailable, BackendError,
           BackendUnavailable, Cancelled, ProtocolError, PermissionDenied, TooManyClients, UnknownModel)
