"""The holder process: one listener per configured service, the configuration followed as it
changes, the admin port (metrics, health), and the drain on SIGTERM.

Each service has a listener of its own (its own aiohttp runner), so a service that leaves the
configuration stops accepting on its port without touching the others, and keeps its held and
in-flight requests until they are answered (they are still forwarded when its backend becomes
ready); a port change is the old listener retired and a new one bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from vllm_holder.config import EMPTY, ConfigError, HolderConfig, ServiceConfig, parse_config
from vllm_holder.forward import Upstream
from vllm_holder.hold import Release, ServiceHolder, Timing, Waker
from vllm_holder.metrics import HolderMetrics

log = logging.getLogger("vllm_holder.server")

MiB = 1024 * 1024
# after the grace period, how long the requests still held get to receive their 503
FINAL_ANSWER_SECONDS = 5.0


@dataclass(frozen=True)
class HolderSettings:
    config_path: Path
    host: str = "0.0.0.0"  # noqa: S104 (a pod's listener: the EndpointSlice points at the pod IP)
    admin_port: int = 9090
    grace_seconds: float = 600.0
    # after SIGTERM, how long the service ports still take new connections (the pod is not
    # Ready at once, but the Service's endpoints drop it only once the operator and kube-proxy
    # have seen that: a connection in between is held here, not refused)
    accept_seconds: float = 0.0
    poll_seconds: float = 2.0
    max_body_bytes: int = 8 * MiB
    timing: Timing = field(default_factory=Timing)


class Listener:
    """One service's port."""

    def __init__(self, holder: ServiceHolder, *, host: str, max_body_bytes: int) -> None:
        self.holder = holder
        self.port = holder.config.port
        self._host = host
        app = web.Application(client_max_size=max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", holder.handle)
        # handler_cancellation: a held request's handler is cancelled when its client goes
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=FINAL_ANSWER_SECONDS
        )
        self._site: web.TCPSite | None = None
        self.bind_error: str | None = None

    @property
    def bound(self) -> bool:
        return self._site is not None

    async def bind(self) -> bool:
        if self._site is not None:
            return True
        if self._runner.server is None:
            await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            self.bind_error = f"port {self.port}: {e.strerror or e}"
            log.warning("%s: cannot listen on %s", self.holder.config.name, self.bind_error)
            await site.stop()
            return False
        self._site, self.bind_error = site, None
        log.info("%s: listening on port %d", self.holder.config.name, self.port)
        return True

    async def stop_accepting(self) -> None:
        """Closes the listening socket; connections already accepted go on."""
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def close(self) -> None:
        await self.stop_accepting()
        await self._runner.cleanup()
        await self.holder.close()


class Holder:
    def __init__(
        self,
        settings: HolderSettings,
        *,
        waker: Waker,
        upstream: Upstream | None = None,
        metrics: HolderMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or HolderMetrics()
        self._waker = waker
        self._upstream = upstream or Upstream()
        self.config: HolderConfig | None = None  # None until a valid document was read
        self.config_error: str | None = None
        self._config_digest: str | None = None
        self.listeners: dict[str, Listener] = {}
        self._retiring: dict[asyncio.Task[None], ServiceHolder] = {}
        self.draining = False
        self._poll_task: asyncio.Task[None] | None = None
        self._admin = web.AppRunner(self._admin_app(), access_log=None)
        self.admin_port: int | None = None

    # ---------- life cycle ----------

    async def start(self) -> None:
        await self._admin.setup()
        site = web.TCPSite(self._admin, self.settings.host, self.settings.admin_port)
        await site.start()
        self.admin_port = int(self._admin.addresses[0][1])  # (admin_port 0: a free one)
        await self.reload()
        self._poll_task = asyncio.ensure_future(self._poll())

    async def drain(self) -> None:
        """SIGTERM: report not Ready at once, keep taking new connections for
        `accept_seconds` (until the Service's endpoints have dropped this pod, kube-proxy
        sends new ones here still), then stop accepting on every service port; keep every
        held and in-flight request until it is answered or the grace period ends, then answer
        what is still held with 503 and close."""
        self.draining = True
        if self._poll_task is not None:
            self._poll_task.cancel()
        for lst in self.listeners.values():
            lst.holder.draining = True
        if self.settings.accept_seconds > 0:
            log.info("draining: still accepting for %g s", self.settings.accept_seconds)
            await asyncio.sleep(self.settings.accept_seconds)
        holders = [lst.holder for lst in self.listeners.values()]
        holders += list(self._retiring.values())
        for lst in self.listeners.values():
            await lst.stop_accepting()
        busy = sum(h.active for h in holders)
        log.info(
            "draining: %d requests held or in flight; grace %g s", busy, self.settings.grace_seconds
        )
        t0 = time.monotonic()
        idle = asyncio.gather(*(h.wait_idle() for h in holders))
        try:
            await asyncio.wait_for(asyncio.shield(idle), self.settings.grace_seconds)
        except TimeoutError:
            left = sum(h.held for h in holders)
            log.warning("grace period over: %d requests still held get 503", left)
            for h in holders:
                h.release_all(Release.SHUTDOWN)
            try:
                await asyncio.wait_for(asyncio.shield(idle), FINAL_ANSWER_SECONDS)
            except TimeoutError:
                log.warning("closing with requests still in flight")
        log.info("drained in %.1f s", time.monotonic() - t0)
        await self.close()

    async def close(self) -> None:
        if self._poll_task is not None:
            self._poll_task.cancel()
        for task in list(self._retiring):
            task.cancel()
        for lst in list(self.listeners.values()):
            await lst.close()
        self.listeners.clear()
        await self._upstream.close()
        close_waker = getattr(self._waker, "close", None)
        if close_waker is not None:
            await close_waker()
        await self._admin.cleanup()

    # ---------- the configuration ----------

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_seconds)
            try:
                await self.reload()
            except Exception:  # the poll must outlive any one bad read
                log.exception("reading the configuration failed")

    async def reload(self) -> None:
        """Reads the file (a mounted ConfigMap changes by a symlink swap: the content is
        compared, not only the mtime) and applies it when it changed; binds the listeners
        that could not bind before."""
        path = self.settings.config_path
        try:
            text = path.read_text()
        except OSError as e:
            if self.config is None:
                self.config_error = f"{path}: {e.strerror or e}"
            await self._bind_missing()
            return
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest != self._config_digest:
            self._config_digest = digest
            try:
                config = parse_config(text, reserved_ports=frozenset({self.settings.admin_port}))
            except ConfigError as e:
                self.config_error = f"{path}: {e}"
                self.metrics.config_reloads.labels("invalid").inc()
                log.warning("configuration refused (the previous one stays): %s", self.config_error)
            else:
                self.config_error = None
                self.metrics.config_reloads.labels("ok").inc()
                self._apply(self.config or EMPTY, config)
                self.config = config
        await self._bind_missing()

    def _apply(self, old: HolderConfig, new: HolderConfig) -> None:
        for name, svc in old.services.items():
            if name not in new.services or new.services[name].port != svc.port:
                self._retire(name)
        for name, svc in new.services.items():
            listener = self.listeners.get(name)
            if listener is None:
                self.listeners[name] = self._listener(svc)
            else:
                listener.holder.config = svc  # backend, bounds, timeouts: in place

    def _listener(self, svc: ServiceConfig) -> Listener:
        holder = ServiceHolder(
            svc,
            upstream=self._upstream,
            waker=self._waker,
            metrics=self.metrics,
            timing=self.settings.timing,
        )
        return Listener(
            holder, host=self.settings.host, max_body_bytes=self.settings.max_body_bytes
        )

    def _retire(self, name: str) -> None:
        listener = self.listeners.pop(name, None)
        if listener is None:
            return
        log.info("%s: left the configuration; %d held or in flight", name, listener.holder.active)
        task = asyncio.ensure_future(self._finish_retiring(listener))
        self._retiring[task] = listener.holder
        task.add_done_callback(lambda t: self._retiring.pop(t, None))

    async def _finish_retiring(self, listener: Listener) -> None:
        await listener.stop_accepting()
        await listener.holder.wait_idle()
        await listener.close()
        if listener.holder.config.name not in self.listeners:
            self.metrics.forget(listener.holder.config.name)

    async def _bind_missing(self) -> None:
        if self.draining:
            return
        for listener in list(self.listeners.values()):
            if not listener.bound:
                await listener.bind()

    # ---------- the admin port ----------

    def ready(self) -> tuple[bool, str]:
        if self.draining:
            return False, "draining"
        if self.config is None:
            return False, f"no configuration loaded: {self.config_error or 'not read yet'}"
        unbound = [
            f"{name}: {lst.bind_error or 'not bound yet'}"
            for name, lst in sorted(self.listeners.items())
            if not lst.bound
        ]
        if unbound:
            return False, "listeners not bound: " + "; ".join(unbound)
        return True, f"{len(self.listeners)} services held for"

    def _admin_app(self) -> web.Application:
        app = web.Application()

        async def healthz(_request: web.Request) -> web.Response:
            return web.Response(text="ok\n")  # answered: the event loop runs

        async def readyz(_request: web.Request) -> web.Response:
            ok, why = self.ready()
            return web.Response(status=200 if ok else 503, text=why + "\n")

        async def metrics(_request: web.Request) -> web.Response:
            return web.Response(
                body=self.metrics.exposition(),
                headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            )

        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/metrics", metrics)
        return app
