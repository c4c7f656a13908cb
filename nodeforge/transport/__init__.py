"""One OpenStack transport: every API call, its error mapping, its paging and its retries.

A base layer (it imports no feature package: only :mod:`nodeforge.errors`,
:mod:`nodeforge.redact`, the standard library, keystoneauth and tenacity;
tests/test_layers.py holds it to that):

* :func:`request` / :func:`paged` (:mod:`.rest`): one call, or a whole
  collection, over an openstacksdk service proxy (``clouds.yaml`` /
  ``OS_CLOUD``), retried by the policy, refused calls raised as the
  caller's error class;
* :func:`classify` / :func:`raise_for_response` (:mod:`.errors`): HTTP
  status and body to an :class:`ErrorKind` and a scrubbed :class:`Failure`
  (the only place nodeforge compares HTTP status codes);
* :class:`RetryPolicy` (:mod:`.retry`, tenacity): which failures retry, the
  backoff with jitter, ``Retry-After``, the attempts; :data:`API` for API
  calls, :data:`DOWNLOAD` for downloads (both downloaders use it).

The Ironic, Nova, Glance, Barbican and Magnum clients are thin layers on it,
each keeping its own error class and messages.
"""

from nodeforge.transport.errors import (ApiError, ErrorKind, Failure, classify, detail_of, failure_of, is_success,
                                        kind_of, network, raise_for_response, retry_after)
from nodeforge.transport.rest import (Observer, TooLarge, content_of, json_of, links_next, marker, next_link, paged,
                                      request)
from nodeforge.transport.retry import API, DOWNLOAD, ONCE, Refused, RetryPolicy

__all__ = ["API", "DOWNLOAD", "ONCE", "ApiError", "ErrorKind", "Failure", "Observer", "Refused", "RetryPolicy",
           "TooLarge", "classify", "content_of", "detail_of", "failure_of", "is_success", "json_of", "kind_of", "links_next",
           "marker", "network", "next_link", "paged", "raise_for_response", "request", "retry_after"]
