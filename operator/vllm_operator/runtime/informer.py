"""Watch caches of the operator's children (client-go's informer, in small): the source of
child events for the work queue, and of reads where a stale answer is safe (kube.CACHED_GETS).

Every watch carries the SERVER-SIDE label selector `app.kubernetes.io/managed-by=vllm-operator`
(render.meta.MANAGED_BY; every child and the pods of its Deployment and benchmark Job carry
it): the API server never sends the operator an object it does not own, however many
Deployments, Jobs and ConfigMaps the cluster holds. One watch per kind per watched namespace
(or one per kind cluster-wide): list, then watch from the list's resourceVersion with
bookmarks (a quiet watch still advances, so a restart resumes instead of relisting), relist
when the server answers 410 Gone (the version was compacted) or after an error.

An event updates the cache, then names the owning service (label SERVICE_LABEL) to the
callback: the work queue coalesces them, so a burst of child events is one reconcile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes.client.exceptions import ApiException

from vllm_operator import metrics
from vllm_operator.observe.benchresult import trim
from vllm_operator.render.holder import pod_holds
from vllm_operator.render.meta import MANAGED_BY, SERVICE_LABEL
from vllm_operator.write.transport import Kube, _path

log = logging.getLogger("vllm_operator")

MANAGED_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"
# (api_version, kind, whether an event of it wakes the owning service)
WATCHED: tuple[tuple[str, str, bool], ...] = (
    ("apps/v1", "Deployment", True),  # rollout progress, drift, deletion
    ("v1", "Service", True),  # drift, deletion
    ("autoscaling/v2", "HorizontalPodAutoscaler", True),  # its verdicts are in the status
    ("policy/v1", "PodDisruptionBudget", True),  # drift, deletion
    ("batch/v1", "Job", True),  # a benchmark run started, finished or failed
    ("v1", "ConfigMap", True),  # a benchmark run published its result
    # a canary's bake (rollout.canary.bake): its EndpointSlice, gone or changed
    ("discovery.k8s.io/v1", "EndpointSlice", True),
    # read by observe (why a replica is not up) only; the Deployment's own status reports
    # what a reconcile must react to, and pod problems are seen by the next resync. Except a
    # scale-to-zero holder's pod (HOLDER_WAKES): it wakes the services it holds for
    ("v1", "Pod", False),
)
# kinds whose objects wake, instead of an owner, the services their holds-for annotation
# names (render/holder.py): a holder pod Ready, gone or terminating changes who is in the
# slices of the services at zero, at once rather than at the next resync
HOLDER_WAKES = frozenset({"Pod"})

Key = tuple[str, str]

# What the cache leaves out of an object, as a transform (controller-runtime's
# cache.TransformFunc): a benchmark Job's result.json (up to ~900 KB; a lab result is 366 KB)
# is read once, when its run is first seen finished, and then never again (its summary in
# the run's record is); kept, a thousand services' history is gigabytes in the cache and
# in every list's deep copy. Applied to each page of a list and to each event as it arrives.
TRIMMED: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"ConfigMap": trim}
# a smaller list page where one object may be ~1 MB (a page is held whole until trimmed)
PAGE_SIZE = {"ConfigMap": 50}

# Labels the cache indexes (per namespace): every list the reconcile makes selects on one of
# them (the service label; the pods' instance label), so a list costs what the service owns,
# not a scan of every object of the kind (which made each resync O(services^2)).
INDEXED = (SERVICE_LABEL, "app.kubernetes.io/instance")

# Fields whose change alone wakes no one: the HPA controller rewrites currentMetrics at every
# sync (15 s) while nothing the reconcile reports (conditions, replica counts) changes; at a
# thousand services that would be a reconcile per HPA per sync, for nothing.
QUIET_STATUS = {"HorizontalPodAutoscaler": ("currentMetrics", "lastScaleTime")}


def parse_selector(selector: str) -> dict[str, str] | None:
    """`a=b,c=d` as a dict; None for anything but equality terms (then the cache does not
    answer and the read goes to the API server)."""
    out: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term or "=" not in term or any(c in term for c in "() "):
            return None
        key, _, value = term.partition("==") if "==" in term else term.partition("=")
        out[key.strip()] = value.strip()
    return out


def matches(labels: dict[str, str] | None, wanted: dict[str, str]) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _version(obj: dict[str, Any]) -> int | None:
    """The resourceVersion as a number (etcd's revision; Kubernetes calls it opaque, so a
    version that is not a number compares as unknown and the newer event simply wins)."""
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


def _newer(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    if old is None:
        return True
    a, b = _version(new), _version(old)
    return a is None or b is None or a >= b


def _same(kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when `new` differs from `old` only where nothing is reacted to (its version,
    QUIET_STATUS): the event updates the cache but wakes no reconcile."""
    if old is None:
        return False
    quiet = QUIET_STATUS.get(kind, ())

    def view(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        status = {k: v for k, v in (obj.get("status") or {}).items() if k not in quiet}
        return {**obj, "metadata": meta, "status": status}

    return view(old) == view(new)


def _entries(key: Key, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    labels = obj["metadata"].get("labels") or {}
    return [(key[0], label, labels[label]) for label in INDEXED if label in labels]


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace", "")), str(meta["name"])


def _slim(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """The object as a GET returns it (list items carry no apiVersion/kind), without
    managedFields (the biggest part of most objects, and never read by the operator) and
    what TRIMMED leaves out."""
    obj["metadata"].pop("managedFields", None)
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    transform = TRIMMED.get(kind)
    return transform(obj) if transform is not None else obj


class Informer:
    """One list+watch of one kind in one namespace (None: cluster-wide), kept in memory."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        kind: str,
        namespace: str | None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        *,
        selector: str = MANAGED_SELECTOR,
        timeout_seconds: int = 300,
        page_size: int = 500,
    ) -> None:
        self.kube = kube
        self.api_version, self.kind, self.namespace = api_version, kind, namespace
        self.selector = selector
        self._wanted = parse_selector(selector) or {}
        self.on_event = on_event
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        self.synced = threading.Event()
        self.relists = 0  # lists after the first (410 Gone, errors): for tests and logs
        self._store: dict[Key, dict[str, Any]] = {}
        self._index: dict[tuple[str, str, str], set[Key]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._version = ""
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        return _path(self.api_version, self.kind, self.namespace)

    def start(self) -> None:
        where = self.namespace or "cluster"
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{self.kind}-{where}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops after the watch request in flight ends (the thread is a daemon)."""
        self._stop.set()

    # -- the cache ----------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._store.get((namespace, name))

    def select(self, namespace: str | None, wanted: dict[str, str]) -> list[dict[str, Any]]:
        with self._lock:
            label = next((k for k in INDEXED if k in wanted), None)
            if namespace is not None and label is not None:
                keys = self._index.get((namespace, label, wanted[label]), set())
                candidates = [self._store[k] for k in sorted(keys)]
            else:
                candidates = [
                    obj
                    for (ns, _), obj in self._store.items()
                    if namespace is None or ns == namespace
                ]
            return [obj for obj in candidates if matches(obj["metadata"].get("labels"), wanted)]

    def _put(self, key: Key, obj: dict[str, Any]) -> None:
        """Stores `obj` and indexes it (the caller holds the lock)."""
        self._drop(key)
        self._store[key] = obj
        for entry in _entries(key, obj):
            self._index.setdefault(entry, set()).add(key)

    def _drop(self, key: Key) -> None:
        old = self._store.pop(key, None)
        if old is None:
            return
        for entry in _entries(key, old):
            keys = self._index.get(entry)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[entry]

    def keys(self) -> list[Key]:
        with self._lock:
            return list(self._store)

    def written(self, obj: dict[str, Any]) -> None:
        """The answer to the operator's own write: kept when it is one this watch would
        carry and newer than what the cache holds (the watch event follows anyway)."""
        if not matches(obj["metadata"].get("labels"), self._wanted):
            return
        obj = _slim(obj, self.api_version, self.kind)
        with self._lock:
            if _newer(obj, self._store.get(_key(obj))):
                self._put(_key(obj), obj)

    def removed(self, namespace: str, name: str) -> None:
        with self._lock:
            self._drop((namespace, name))

    # -- list and watch -----------------------------------------------------------------------

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                self._list()
                delay = 1.0
                self._watch()  # returns when the server says the version is gone
            except Exception as exc:  # noqa: BLE001  # any failure: relist after a pause
                level = logging.WARNING if not isinstance(exc, ApiException) else logging.INFO
                log.log(
                    level,
                    "watch of %s in %s: %s; relisting in %.0fs",
                    self.kind,
                    self.namespace or "the cluster",
                    exc,
                    delay,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)
            if self.synced.is_set():
                self.relists += 1

    def _list(self) -> None:
        items: list[dict[str, Any]] = []
        size = min(self.page_size, PAGE_SIZE.get(self.kind, self.page_size))
        query = [("labelSelector", self.selector), ("limit", str(size))]
        page: dict[str, Any] = {}
        while True:
            cont = page.get("metadata", {}).get("continue")
            page = self.kube._call(
                "GET", self.path, query=query + ([("continue", cont)] if cont else [])
            )
            items += [_slim(o, self.api_version, self.kind) for o in page.get("items", [])]
            page["items"] = []  # (trimmed: the page's whole objects are not kept)
            if not page.get("metadata", {}).get("continue"):
                break
        fresh = {_key(o): o for o in items}
        with self._lock:
            old, self._store, self._index = self._store, {}, {}
            for key, obj in fresh.items():
                self._put(key, obj)
            self._version = str(page.get("metadata", {}).get("resourceVersion", ""))
        self.synced.set()
        # what changed while the watch was down (everything, the first time)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None or _version(before) != _version(obj):
                self._emit("ADDED" if before is None else "MODIFIED", obj)
        for key in old.keys() - fresh.keys():
            self._emit("DELETED", old[key])

    def _watch(self) -> None:
        while not self._stop.is_set():
            query = [
                ("labelSelector", self.selector),
                ("resourceVersion", self._version),
                ("allowWatchBookmarks", "true"),
            ]
            try:
                events = self.kube.watch(self.path, query, self.timeout_seconds)
                for event in events:
                    if not self._handle(event):
                        return
            except ApiException as exc:
                if exc.status == 410:
                    return  # relist
                raise

    def _handle(self, event: dict[str, Any]) -> bool:
        """Applies one watch event; False when the watch must relist."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                return False
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        version = str(obj.get("metadata", {}).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            self._version = version or self._version
            return True
        obj = _slim(obj, self.api_version, self.kind)
        key = _key(obj)
        with self._lock:
            before = self._store.get(key)
            if kind == "DELETED":
                self._drop(key)
            elif _newer(obj, before):
                self._put(key, obj)
            self._version = version or self._version
        metrics.WATCH_EVENTS.labels(self.kind).inc()
        if kind == "DELETED" or not _same(self.kind, before, obj):
            self._emit(str(kind), obj)
        return True

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, obj)
        except Exception:  # a callback's bug must not stop the watch
            log.exception("handling a %s event of %s %s", kind, self.kind, _key(obj))


class Cache:
    """The informers of every watched kind in every watched namespace; kube.ReadCache.

    `on_owner(namespace, service)` is called for each event of a kind that wakes its owner."""

    def __init__(
        self,
        kube: Kube,
        namespaces: Iterable[str],
        on_owner: Callable[[str, str], None],
        *,
        timeout_seconds: int = 300,
        watched: tuple[tuple[str, str, bool], ...] = WATCHED,
    ) -> None:
        self.namespaces = tuple(namespaces)
        self.on_owner = on_owner
        self.informers: dict[tuple[str, str, str | None], Informer] = {}
        for api_version, kind, wakes in watched:
            for namespace in self.namespaces or (None,):
                self.informers[(api_version, kind, namespace)] = Informer(
                    kube,
                    api_version,
                    kind,
                    namespace,
                    self._wake if wakes else self._wake_holding if kind in HOLDER_WAKES else None,
                    timeout_seconds=timeout_seconds,
                )

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def wait_synced(self, timeout: float) -> bool:
        return all(i.synced.wait(timeout) for i in self.informers.values())

    def _wake(self, _: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        service = (meta.get("labels") or {}).get(SERVICE_LABEL)
        if service and meta.get("namespace"):
            self.on_owner(str(meta["namespace"]), str(service))

    def _wake_holding(self, _: str, obj: dict[str, Any]) -> None:
        namespace = obj["metadata"].get("namespace")
        if namespace:
            for service in pod_holds(obj):
                self.on_owner(str(namespace), service)

    def _informer(self, api_version: str, kind: str, namespace: str) -> Informer | None:
        """The synced informer that holds `kind` objects of `namespace`, if any."""
        informer = self.informers.get((api_version, kind, None)) or self.informers.get(
            (api_version, kind, namespace)
        )
        return informer if informer is not None and informer.synced.is_set() else None

    # -- kube.ReadCache -----------------------------------------------------------------------

    def lookup(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> tuple[bool, dict[str, Any] | None]:
        informer = self._informer(api_version, kind, namespace)
        if informer is None:
            return False, None
        return True, informer.get(namespace, name)

    def select(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]] | None:
        informer = self._informer(api_version, kind, namespace)
        wanted = parse_selector(selector)
        if informer is None or wanted is None:
            return None
        return informer.select(namespace, wanted)

    def written(self, obj: dict[str, Any]) -> None:
        informer = self._informer(
            str(obj.get("apiVersion")), str(obj.get("kind")), str(obj["metadata"]["namespace"])
        )
        if informer is not None:
            informer.written(obj)

    def removed(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        informer = self._informer(api_version, kind, namespace)
        if informer is not None:
            informer.removed(namespace, name)
