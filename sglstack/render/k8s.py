"""Serving spec + image digest -> a LeaderWorkerSet and a Service (pure), checked, and their writer.

The LWS controller (kubernetes-sigs/lws) runs one group of `size` pods per replica: the leader (worker
index 0) serves the API, the others join it through torch.distributed. Every pod runs the very argv the
smoke gate tested (`serving.serving_argv`), with the node values taken from the variables LWS injects
into each container; Kubernetes expands `$(VAR)` in `command` from the container's environment.
Nothing here reads records, calls kubectl or writes a file (deploy and `imagebuild.context` write them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from ..config.fields import SIZE_RE, bound_text
from ..config.imageref import names_a_digest
from ..config.names import k8s_object_name, k8s_service_name
from ..config.platforms import ARCH_OF_PLATFORM
from ..config.schema import Stack
from ..core import labels as lb
from ..core.credentials import argv_references
from ..core.errors import first_line, one_line
from ..core.quoting import k8s_literal, one_line_problem
from ..serving import (
    SECRET_ENV,
    NodeArgs,
    RecordedOptions,
    ServingError,
    ServingOverrides,
    ServingSpec,
    gpu_count,
    serving_argv,
    serving_spec,
)
from ..serving.caches import with_kernel_caches
from . import k8s_lws as lws
from .k8s_cache import CacheCandidates, cache_volume, init_container, pull_secret_volume

K8S_DIR = "k8s"
LWS_FILE = "leaderworkerset.yaml"
SERVICE_FILE = "service.yaml"
CONTAINER = "sglang"
# torch.distributed's rendezvous on the leader; upstream's LWS example for SGLang uses the same port.
DIST_INIT_PORT = 20000
HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "HF_TOKEN"
# The schema version kubernetes-validate checks the core objects against (LWS needs Kubernetes >= 1.26).
SCHEMA_VERSION = "1.32.0"
ARCH_NODE_LABEL = "kubernetes.io/arch"  # the well-known label every kubelet sets from its GOARCH
STARTUP_PERIOD_S = 10
RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
RESOURCE_NAME_MAX = 63  # the name part of a qualified name; its prefix is a DNS subdomain
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # RFC 1123: namespaces
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # Secrets
DNS_SUBDOMAIN_MAX = 253
INT32_MAX = 2**31 - 1  # replicas, size and extended-resource counts are int32 fields of the API
ANNOTATION_PREFIX = lb.K8S_PREFIX


@dataclass(frozen=True)
class K8sOptions(RecordedOptions):
    """How a stack is served on Kubernetes: recorded with every k8s deployment, so that a rollback
    applies the same objects with the previous digest. None means "the stack's serving value"."""

    eagle3: bool = True
    gpus: int | bool | None = None  # nvidia.com/gpu limits (0: a CPU pod, no RDMA); None: the stack's (gpu_count)
    nnodes: int = 1  # the LWS group size: pods (nodes) per replica
    replicas: int = 1  # groups, each serving the whole model
    namespace: str | None = None  # None: the context's namespace
    host_network: bool = False  # NCCL over the node's own interfaces (RoCE/IB without a CNI for RDMA)
    rdma: str | None = None  # RESOURCE[=COUNT] of an RDMA device plugin, e.g. rdma/ib or rdma/hca_shared_devices_a=1
    hf_cache: str | None = None  # an absolute folder on every node (hostPath); default: the pod's own emptyDir
    # The Secret holding key HF_TOKEN (optional: public models need none) and the key of every `${NAME}`
    # reference of serving.env (required).
    hf_token_secret: str = HF_TOKEN_SECRET
    dist_init_port: int = DIST_INIT_PORT
    start_period_s: int | None = None  # startup probe budget; default: the stack's serving.startup_timeout_s
    # The server's kernel caches in a volume an init container fills on the node (render/k8s_cache.py).
    kernel_cache: bool = False
    # The Secret (kubernetes.io/dockerconfigjson) the pods pull the image with; the kernel-cache init
    # container reads the registry with it too. None: the node's or the service account's pull credentials.
    image_pull_secret: str | None = None

    def serving_overrides(self) -> ServingOverrides:
        return ServingOverrides(
            eagle3=self.eagle3,
            gpus=gpu_count(self.gpus),
            hf_cache=self.hf_cache,
            healthcheck_start_period_s=self.start_period_s,
            nnodes=self.nnodes,
            node_rank=0,
            # The spec's own placement is the leader's; every pod's real values come from LWS (node_args).
            dist_init_addr=f"$({lws.ENV_LEADER_ADDRESS}):{self.dist_init_port}",
            flags={"hf_cache": "--hf-cache", "nnodes": "--nnodes"},
        )

    def rdma_resource(self) -> tuple[str, int] | None:
        """(resource, count) of `rdma` (checked by `k8s_spec`: see `rdma_problem`)."""
        if not self.rdma:
            return None
        name, _, count = self.rdma.partition("=")
        return name, int(count) if count else 1


def rdma_problem(rdma: str) -> str | None:
    """Why `--rdma` is not RESOURCE[=COUNT] with a count a pod can ask for; None if it is."""
    res, sep, count = rdma.partition("=")
    prefix, _, name = res.rpartition("/")
    if (not RESOURCE_NAME.fullmatch(res) or len(name) > RESOURCE_NAME_MAX or len(prefix) > DNS_SUBDOMAIN_MAX
            or (sep and not re.fullmatch(r"[0-9]+", count))):
        return "not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"
    if sep and not 1 <= int(count) <= INT32_MAX:
        return f"the count must be from 1 to {INT32_MAX}"
    return None


def node_args(options: K8sOptions) -> NodeArgs:
    """The placement flags of every pod in a group, as LWS tells each container."""
    return NodeArgs(
        f"$({lws.ENV_GROUP_SIZE})",
        f"$({lws.ENV_WORKER_INDEX})",
        f"$({lws.ENV_LEADER_ADDRESS}):{options.dist_init_port}",
    )


def object_name(stack_name: str) -> str:
    """The LWS name (`names.py`: the matrix refuses two stacks that share one)."""
    return k8s_object_name(stack_name)


def service_name(stack_name: str) -> str:
    return k8s_service_name(stack_name)


def k8s_spec(stack: Stack, options: K8sOptions) -> ServingSpec:
    """The serving spec the manifests serve, every option checked (one line naming it)."""
    name = stack.name

    def bad(message: str) -> ServingError:
        return ServingError(message, stack=name)

    # Every number written into a manifest, within what its field can hold (int32 counts, TCP ports).
    for flag, value, low, high in (("--nnodes", options.nnodes, 1, INT32_MAX),
                                   ("--replicas", options.replicas, 1, INT32_MAX),
                                   ("--dist-init-port", options.dist_init_port, 1, 65535)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise bad(f"{flag} {value}: must be a whole number from {low} to {high}")
    if options.namespace is not None and not (DNS_LABEL.fullmatch(options.namespace)
                                              and len(options.namespace) <= DNS_LABEL_MAX):
        raise bad(f"--namespace '{one_line(options.namespace)}': not a namespace name (a DNS label: at most "
                  f"{DNS_LABEL_MAX} lowercase letters, digits and '-', starting and ending with a letter or digit)")
    if options.hf_cache is not None and (not options.hf_cache.startswith("/") or one_line_problem(options.hf_cache)):
        raise bad(f"--hf-cache '{one_line(options.hf_cache)}': on Kubernetes, an absolute folder on every node "
                  "(hostPath), on one line")
    if options.rdma is not None:
        if rdma_problem(options.rdma):
            raise bad(f"--rdma '{one_line(options.rdma)}': {rdma_problem(options.rdma)}")
        if gpu_count(options.gpus) == 0:
            raise bad("--rdma: needs GPUs (it was given with --gpus 0)")
    for flag, secret in (("--hf-token-secret", options.hf_token_secret),
                         ("--image-pull-secret", options.image_pull_secret)):
        if secret is not None and not (DNS_SUBDOMAIN.fullmatch(secret) and len(secret) <= DNS_SUBDOMAIN_MAX):
            raise bad(f"{flag} '{one_line(secret)}': not a Secret name (a DNS subdomain: lowercase letters, "
                      "digits, '-' and '.')")
    spec = serving_spec(stack, options.serving_overrides())
    if options.dist_init_port == spec.port:
        raise bad(f"--dist-init-port {options.dist_init_port}: the serving port; torch.distributed needs another")
    return with_kernel_caches(spec) if options.kernel_cache else spec


def shm_quantity(shm_size: str) -> str:
    """Docker's shm size (binary units b/k/m/g, or bytes) as a Kubernetes quantity."""
    m = SIZE_RE.fullmatch(re.sub(r"\s+", "", shm_size))  # the schema's rule, white space aside
    if not m:
        raise ServingError(f"serving.shm_size '{shm_size}': not a size such as 32g")
    number, unit = m.groups()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[unit.lower()]


def _volumes(spec: ServingSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(spec.shm_size)}}
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for i, mount in enumerate(spec.mounts):
        name = f"mount-{i}"
        if mount.source.startswith("/"):
            volumes.append({"name": name, "hostPath": {"path": mount.source, "type": "DirectoryOrCreate"}})
        else:
            # `~` names a user's home on a Docker host; a Kubernetes node has none: the pod's own disk.
            volumes.append({"name": name, "emptyDir": {}})
        mounts.append({"name": name, "mountPath": mount.target, **({"readOnly": True} if mount.read_only else {})})
    return volumes, mounts


def _probes(spec: ServingSpec) -> dict[str, Any]:
    h = spec.healthcheck
    get = {"httpGet": {"path": h.path, "port": spec.port}, "timeoutSeconds": h.timeout_s}
    return {
        # Liveness and readiness start only after this succeeds: a model may load for an hour.
        "startupProbe": {**get, "periodSeconds": STARTUP_PERIOD_S,
                         "failureThreshold": max(1, math.ceil(h.start_period_s / STARTUP_PERIOD_S))},
        "readinessProbe": {**get, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**get, "periodSeconds": h.interval_s, "failureThreshold": h.retries},
    }


def pod_argv(spec: ServingSpec, options: K8sOptions) -> list[str]:
    """The smoke-tested argv, with only the LWS placement values left for Kubernetes to expand."""
    node = node_args(options)
    # Placeholders no argument can hold (a NUL ends an argv string): where they land is where LWS's
    # values go, unescaped; every other word, the stack's own text included, is escaped whatever it says.
    marks = NodeArgs("\x00nnodes", "\x00node-rank", "\x00dist-init-addr")
    real = {marks.nnodes: node.nnodes, marks.node_rank: node.node_rank, marks.dist_init_addr: node.dist_init_addr}
    argv = serving_argv(spec, node=marks)
    # A secret flag's `${NAME}` becomes `$(NAME)`: the pod's variable NAME, from key NAME of the Secret.
    refs = argv_references(argv)
    return [real[t] if t in real else f"{refs[i][0]}$({refs[i][1]})" if i in refs else k8s_literal(t)
            for i, t in enumerate(argv)]


def node_affinity(platforms: tuple[str, ...]) -> dict[str, Any]:
    """Pods only on nodes of the stack's platforms (`kubernetes.io/arch`): on a cluster of x86 and Grace nodes an
    image of one architecture never lands on the other's (an `exec format error` crash loop)."""
    archs = [ARCH_OF_PLATFORM[p] for p in platforms]
    term = {"matchExpressions": [{"key": ARCH_NODE_LABEL, "operator": "In", "values": archs}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pod_template(spec: ServingSpec, image_ref: str, options: K8sOptions, *, leader: bool,
                 caches: CacheCandidates | None = None, platforms: tuple[str, ...] = ("linux/amd64",)
                 ) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": k, "value": k8s_literal(v)} for k, v in spec.plain_env]
    # A `${NAME}` reference of serving.env is key NAME of the same Secret as the HF token; it is required
    # (the stack asked for it), where the HF token is optional (public models need none).
    env += [{"name": k, "valueFrom": {"secretKeyRef": {"name": options.hf_token_secret, "key": name}}}
            for k, name in spec.secret_references]
    # The variables the command's `$(NAME)` take (the schema refused a serving.env key NAME set otherwise).
    env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": options.hf_token_secret, "key": name}}}
            for name in spec.argv_secret_names if name not in spec.environment]
    env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": options.hf_token_secret, "key": HF_TOKEN_KEY,
                                                          "optional": True}}}
            for name in SECRET_ENV if name not in spec.environment]
    volumes, mounts = _volumes(spec)
    limits: dict[str, Any] = {}
    if spec.gpus:
        limits["nvidia.com/gpu"] = spec.gpus
    rdma = options.rdma_resource()
    if rdma:
        limits[rdma[0]] = rdma[1]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image_ref,
        "imagePullPolicy": "IfNotPresent",
        "command": pod_argv(spec, options),
        "env": env,
        "resources": {"limits": limits} if limits else {},
        "volumeMounts": mounts,
    }
    if rdma:
        # Registering RDMA memory pins pages: the container needs to lock memory.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    if leader:
        container["ports"] = [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}]
        container.update(_probes(spec))
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes, "affinity": node_affinity(platforms)}
    if options.image_pull_secret is not None:
        pod["imagePullSecrets"] = [{"name": options.image_pull_secret}]
    if options.kernel_cache:
        volume, mount = cache_volume()
        volumes.append(volume)
        mounts.append(mount)
        if options.image_pull_secret is not None:
            volumes.append(pull_secret_volume(options.image_pull_secret))
        pod["initContainers"] = [init_container(image_ref, caches or CacheCandidates(), limits,
                                                options.image_pull_secret)]
    if options.host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"  # cluster DNS still resolves the leader's address
    role = "leader" if leader else "worker"
    return {"metadata": {"labels": {"app.kubernetes.io/name": "sglang", lb.K8S_ROLE_LABEL: role}}, "spec": pod}


def manifests(
    stack: Stack, image_ref: str, options: K8sOptions, *, smoke_report: str | None = None,
    caches: CacheCandidates | None = None,
) -> dict[str, dict[str, Any]]:
    """{file name: object}: the LeaderWorkerSet and the Service serving `image_ref` (a digest)."""
    spec = k8s_spec(stack, options)
    if not names_a_digest(image_ref):
        raise ServingError(f"k8s manifests serve an image by digest (REPO@sha256:...), not '{image_ref}': "
                           "a tag can move under a running group", stack=stack.name)
    name = object_name(stack.name)
    meta: dict[str, Any] = {"name": name}
    if options.namespace:
        meta["namespace"] = options.namespace
    labels = {"app.kubernetes.io/name": "sglang", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/managed-by": "sglstack", lb.K8S_STACK_LABEL: object_name(stack.name)[9:]}
    annotations = {
        ANNOTATION_PREFIX + "stack": stack.name,
        ANNOTATION_PREFIX + "image": image_ref,
        ANNOTATION_PREFIX + "model": spec.model,
        ANNOTATION_PREFIX + "speculative": spec.speculative_summary(),
        ANNOTATION_PREFIX + "smoke-report": smoke_report or "unknown",
    }
    lws_obj = {
        "apiVersion": lws.API_VERSION,
        "kind": lws.KIND,
        "metadata": {**meta, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": options.replicas,
            # Workers start with the leader: SGLang's ranks wait for each other at the rendezvous anyway.
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": options.nnodes,
                # One lost rank stalls every collective: the whole group restarts together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(spec, image_ref, options, leader=True, caches=caches,
                                               platforms=stack.platforms),
                "workerTemplate": pod_template(spec, image_ref, options, leader=False, caches=caches,
                                               platforms=stack.platforms),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        # The exact stack name: the deploy checks it before applying over a Service of this (derived) name.
        "metadata": {**meta, "name": service_name(stack.name), "labels": labels,
                     "annotations": {ANNOTATION_PREFIX + "stack": stack.name}},
        "spec": {
            "type": "ClusterIP",
            "selector": {lws.SET_NAME_LABEL: name, lws.WORKER_INDEX_LABEL: "0"},
            "ports": [{"name": "http", "port": spec.port, "targetPort": spec.port, "protocol": "TCP"}],
        },
    }
    return {LWS_FILE: lws_obj, SERVICE_FILE: service}


def validate_manifests(objects: Mapping[str, Mapping[str, Any]], *, version: str = SCHEMA_VERSION) -> None:
    """The LWS against our model of its API, the Service and both pod templates against Kubernetes'
    schemas (strict: no unknown field). Raises ServingError naming the file and the field."""
    import kubernetes_validate  # at call time: it loads JSON schemas, which `invoke --list` must not wait for

    for file, obj in objects.items():
        try:
            if obj.get("kind") == lws.KIND:
                model = lws.LeaderWorkerSet.model_validate(obj)
                tpl = model.spec.leaderWorkerTemplate
                for role, t in (("leaderTemplate", tpl.leaderTemplate), ("workerTemplate", tpl.workerTemplate)):
                    if t is None:
                        continue
                    pt = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": model.metadata.name},
                          "template": t.model_dump()}
                    _kv(kubernetes_validate, pt, version, f"{file} ({role})")
            else:
                _kv(kubernetes_validate, dict(obj), version, file)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ServingError(f"{file}: {where}: {bound_text(err)}") from None


def _kv(module: Any, obj: dict[str, Any], version: str, where: str) -> None:
    try:
        module.validate(obj, version, strict=True)
    except module.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "(top)"
        raise ServingError(f"{where}: {path}: {first_line(exc.message)}") from None


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]  # libyaml when built
    def ignore_aliases(self, data: Any) -> bool:
        return True  # the same probe target three times reads better than an anchor and two aliases


def dump(obj: Mapping[str, Any]) -> str:
    return yaml.dump(dict(obj), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def render_k8s(
    stack: Stack, image_ref: str, options: K8sOptions | None = None, *, smoke_report: str | None = None,
    caches: CacheCandidates | None = None,
) -> dict[str, str]:
    """{file name: YAML}: checked against the schemas before anything is written."""
    objects = manifests(stack, image_ref, options or K8sOptions(), smoke_report=smoke_report, caches=caches)
    validate_manifests(objects)
    return {name: dump(obj) for name, obj in objects.items()}
