"""Webhook notifications: ``webhooks:`` in ``config.yaml``, POSTed as JSON when jobs change phase.

```yaml
webhooks:
  - url: https://chat.example.org/hooks/abc     # http or https
    events: [Succeeded, Failed]                 # a job's new phase or reason (default: Succeeded, Failed)
    selector: team=vision                       # optional label selector: k=v, k!=v, comma = and
    timeout: 5s                                 # per request (default 5s)
    retries: 3                                  # after the first try, with exponential back-off (default 3)
```

The reconcile loop only *enqueues*: :class:`Notifier` is a sink (``controller.sinks.hooks``)
that matches each phase change against each webhook and puts the payload on that webhook's own
bounded queue (``put_nowait``; when full, the notification is dropped and counted, never waited
for). One worker thread per webhook posts, retries with tenacity and gives up after its retries,
so a failing or hanging endpoint delays only its own notifications: never the loop, never the
other webhooks. Notifications still queued when gflowd stops are dropped (after a short drain).

The payload (``kind: JobEvent``) carries the job's name, phase, reason, message, labels, attempt,
exit code and devices, plus a one-line ``text`` (so chat webhooks that show ``text`` work as is).
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from tenacity import (
    Retrying,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from controller import API_VERSION
from controller.api.labels import parse_selector, selector_matches
from controller.model.records import rfc3339

log = logging.getLogger("gflowd.notify")
QUEUE_SIZE = 1000
DRAIN_ON_CLOSE = 2.0
BACKOFF_MAX = 30.0
_STOP = object()


def payload(state, now: float, host: str) -> dict[str, Any]:
    job = {
        "name": state.name,
        "phase": state.phase,
        "reason": state.reason,
        "message": state.message,
        "labels": dict(state.labels),
        "attempt": state.attempt,
        "exitCode": state.exit_code,
        "devices": list(state.devices),
        "startTime": rfc3339(state.start_time),
        "completionTime": rfc3339(state.completion_time),
        "manifest": state.manifest,
    }
    text = f"[{host}] job {state.name} {state.phase}" + (f" ({state.reason})" if state.reason else "")
    if state.message:
        text += f": {state.message}"
    return {"apiVersion": API_VERSION, "kind": "JobEvent", "time": rfc3339(now), "host": host, "job": job, "text": text}


def redacted(url: str) -> str:
    """``https://chat.example.org/hooks/SECRET`` -> ``https://chat.example.org/…``: logs name the
    endpoint without the token a webhook path usually is."""
    parts = urlsplit(url)
    return (
        f"{parts.scheme}://{parts.netloc}/…"
        if parts.path.strip("/") or parts.query
        else f"{parts.scheme}://{parts.netloc}"
    )


class _PermanentError(Exception):
    """An answer that retrying cannot change (e.g. 404): give up at once."""


class _Target:
    """One webhook: its matcher, bounded queue and worker thread."""

    def __init__(self, hook):
        self.url = hook.url
        self.name = redacted(hook.url)
        self.events = frozenset(hook.events)
        self.selector = parse_selector(hook.selector or "")
        self.timeout = hook.timeout
        self.retries = hook.retries
        self.queue: queue.Queue = queue.Queue(maxsize=QUEUE_SIZE)
        self.dropped = 0
        self.sent = 0
        self.failed = 0
        self.thread = threading.Thread(target=self._work, name=f"webhook {self.name}", daemon=True)
        self.thread.start()

    def wants(self, state) -> bool:
        return (state.phase in self.events or state.reason in self.events) and selector_matches(
            self.selector, state.labels
        )

    def submit(self, body: bytes) -> None:
        try:
            self.queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning(
                    "webhook %s: queue full (%d waiting), %d notification(s) dropped so far",
                    self.name,
                    QUEUE_SIZE,
                    self.dropped,
                )

    def _work(self) -> None:
        while True:
            body = self.queue.get()
            if body is _STOP:
                return
            try:
                for attempt in Retrying(
                    stop=stop_after_attempt(self.retries + 1),
                    wait=wait_exponential(multiplier=0.5, max=BACKOFF_MAX),
                    retry=retry_if_not_exception_type(_PermanentError),
                    reraise=True,
                ):
                    with attempt:
                        self._post(body)
                self.sent += 1
            except Exception as exc:  # a worker never dies: the next notification gets its chance
                self.failed += 1
                log.warning(
                    "webhook %s: gave up on a notification after %d tries: %s", self.name, self.retries + 1, exc
                )

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "gflowd"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read(65536)
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                raise _PermanentError(f"HTTP {exc.code} {exc.reason}") from None
            raise OSError(f"HTTP {exc.code} {exc.reason}") from None
        except TimeoutError:
            raise OSError(f"no answer within {self.timeout:g}s") from None
        except http.client.HTTPException as exc:  # a malformed answer: worth another try
            raise OSError(f"bad HTTP answer: {exc!r}") from None

    def stop(self) -> None:
        try:
            self.queue.put_nowait(_STOP)
        except queue.Full:
            pass


class Notifier:
    """Sink: enqueue a payload for each webhook that wants each job's phase change."""

    def __init__(self, webhooks, host: str | None = None):
        self.targets = [_Target(hook) for hook in webhooks]
        self.host = host or socket.gethostname()

    def consume(self, facts) -> None:
        now = facts.record.now
        for tr in facts.transitions:
            body = None
            for target in self.targets:
                if target.wants(tr.state):
                    if body is None:
                        body = json.dumps(payload(tr.state, now, self.host)).encode()
                    target.submit(body)

    def close(self) -> None:
        """Let the queues drain for a moment, then stop: a hanging endpoint never delays exit."""
        for target in self.targets:
            target.stop()
        deadline = time.monotonic() + DRAIN_ON_CLOSE
        for target in self.targets:
            target.thread.join(max(0.0, deadline - time.monotonic()))
