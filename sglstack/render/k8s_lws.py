"""The LeaderWorkerSet fields sglstack renders, as a strict pydantic model (leaderworkerset.x-k8s.io/v1).

Kubernetes' own objects are checked against their published schemas (kubernetes-validate, offline);
the LWS CRD is not among them, so the fields we use are modelled here from the LWS API reference
(`api/leaderworkerset/v1/leaderworkerset_types.go` of kubernetes-sigs/lws). Unknown fields are refused:
a misspelt key would otherwise be dropped by the API server without a word. The pod templates inside are
checked by kubernetes-validate as PodTemplates (`k8s.validate_manifests`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
# Labels and environment variables the LWS controller puts on every pod of a group.
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
ENV_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
ENV_GROUP_SIZE = "LWS_GROUP_SIZE"
ENV_WORKER_INDEX = "LWS_WORKER_INDEX"
# The status conditions the controller sets (LeaderWorkerSetConditionType).
CONDITION_AVAILABLE = "Available"
CONDITION_PROGRESSING = "Progressing"
CONDITION_UPDATE_IN_PROGRESS = "UpdateInProgress"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ObjectMeta(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class PodTemplate(BaseModel):
    """A core/v1 PodTemplateSpec: its inside is kubernetes-validate's to check, not ours."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any]


class LeaderWorkerTemplate(_Strict):
    leaderTemplate: PodTemplate | None = None
    workerTemplate: PodTemplate
    size: int = Field(default=1, ge=1)
    restartPolicy: Literal["RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None", "Default"] = (
        "RecreateGroupOnPodRestart"
    )


class RollingUpdateConfiguration(_Strict):
    partition: int | None = Field(default=None, ge=0)
    maxUnavailable: int | str = 1
    maxSurge: int | str = 0


class RolloutStrategy(_Strict):
    type: Literal["RollingUpdate"] = "RollingUpdate"
    rollingUpdateConfiguration: RollingUpdateConfiguration | None = None


class NetworkConfig(_Strict):
    subdomainPolicy: Literal["Shared", "UniquePerReplica"]


class LeaderWorkerSetSpec(_Strict):
    replicas: int = Field(default=1, ge=0)
    leaderWorkerTemplate: LeaderWorkerTemplate
    rolloutStrategy: RolloutStrategy | None = None
    startupPolicy: Literal["LeaderCreated", "LeaderReady"] = "LeaderCreated"
    networkConfig: NetworkConfig | None = None


class LeaderWorkerSet(_Strict):
    apiVersion: Literal["leaderworkerset.x-k8s.io/v1"]
    kind: Literal["LeaderWorkerSet"]
    metadata: ObjectMeta
    spec: LeaderWorkerSetSpec
