"""`rollout_state` (pure): what a LeaderWorkerSet's status says, read on each side of every branch, the whole
answer compared: a missing object, each count at, below and above what is wanted, defaults of a status the
controller has not written yet, and the Available condition among others."""

from __future__ import annotations

import pytest

from sglstack.deploy.k8s_flow import rollout_state


def _lws(*, generation=2, observed=2, replicas=3, updated=3, ready=3, conditions=None, status=True, spec=True):
    obj: dict = {"metadata": {"generation": generation}}
    if spec:
        obj["spec"] = {"replicas": replicas}
    if status:
        obj["status"] = {"observedGeneration": observed, "updatedReplicas": updated, "readyReplicas": ready,
                         "conditions": [{"type": "Progressing", "status": "True"},
                                        {"type": "Available", "status": "True", "message": "ok"}]
                         if conditions is None else conditions}
    return obj


@pytest.mark.parametrize(("obj", "answer"), [
    (None, (False, "the LeaderWorkerSet does not exist (is the LWS controller installed?)")),
    (_lws(), (True, "available")),
    (_lws(observed=3), (True, "available")),  # observed past the generation read: not waiting for it
    (_lws(observed=1), (False, "generation 2 not yet observed by the LWS controller")),
    (_lws(updated=2), (False, "2/3 groups updated")),
    (_lws(updated=4), (True, "available")),
    (_lws(ready=2), (False, "2/3 groups ready (leader /health)")),
    (_lws(ready=4), (True, "available")),
    (_lws(updated=2, ready=0), (False, "2/3 groups updated")),  # updated is said before ready
    (_lws(observed=1, updated=0), (False, "generation 2 not yet observed by the LWS controller")),
    (_lws(conditions=[{"type": "Available", "status": "False", "message": "0 of 3 ready"}]),
     (False, "condition Available is not True (0 of 3 ready)")),
    (_lws(conditions=[{"type": "Available", "status": "False"}]), (False, "condition Available is not True (not set)")),
    (_lws(conditions=[{"type": "Progressing", "status": "True"}]),
     (False, "condition Available is not True (not set)")),
    (_lws(conditions=[]), (False, "condition Available is not True (not set)")),
    (_lws(conditions=None) | {"status": {"observedGeneration": 2, "updatedReplicas": 3, "readyReplicas": 3,
                                         "conditions": None}}, (False, "condition Available is not True (not set)")),
    (_lws(status=False), (False, "generation 2 not yet observed by the LWS controller")),  # no status yet
    (_lws(status=False, generation=1), (False, "generation 1 not yet observed by the LWS controller")),
    (_lws(spec=False, replicas=1, updated=1, ready=1), (True, "available")),  # replicas default to 1
    (_lws(spec=False, updated=0), (False, "0/1 groups updated")),
    ({"spec": {"replicas": 1}, "status": {"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": 1,
                                          "conditions": [{"type": "Available", "status": "True"}]}},
     (True, "available")),  # no metadata.generation: taken as 1
    ({"spec": {"replicas": 1}, "status": {"observedGeneration": 0, "updatedReplicas": 1, "readyReplicas": 1}},
     (False, "generation None not yet observed by the LWS controller")),
])
def test_rollout_state_whole(obj, answer):
    assert rollout_state(obj) == answer


def test_a_status_the_controller_has_not_filled_reads_as_nothing_observed():
    assert rollout_state({"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {}}) == (
        False, "generation 1 not yet observed by the LWS controller")
    assert rollout_state({"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": None}) == (
        False, "generation 1 not yet observed by the LWS controller")


def test_counts_the_controller_has_not_written_yet_read_as_none():
    observed = {"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {"observedGeneration": 1}}
    assert rollout_state(observed) == (False, "0/1 groups updated")
    observed["status"]["updatedReplicas"] = 1
    assert rollout_state(observed) == (False, "0/1 groups ready (leader /health)")
