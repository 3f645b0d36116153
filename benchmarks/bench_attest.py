"""What attestation adds to a release, on the embedded registry (distribution 2.8, tag scheme): the time
to list IMAGE's packages inside it and write its SBOM (a build phase), and the time and bytes to attach
SBOM, provenance and signature to the pushed digest (a release step), next to the promotion's own, and
the time `verify-image` takes.

Usage: python3 benchmarks/bench_attest.py [IMAGE]
(default: the SGLang double, sglstack-test/sglang-double:latest-test)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_publish_promotion import Counter, free_port  # the byte-counting proxy beside this script
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sglstack.adapters.docker import docker_client
from sglstack.attest.release import AttestPlan
from sglstack.attest.verify import verify_image
from sglstack.config.imageref import parse_image_reference, parse_repository
from sglstack.inventory.listing import image_inventory
from sglstack.inventory.sbom import SBOM_FILE, sbom_document
from sglstack.publish import promote, push_candidate
from sglstack.registry.client import RegistryClient
from sglstack.registry.local import registry_config, start_binary, stop_process

RUNS = 5


def main() -> None:
    image = sys.argv[1] if len(sys.argv) > 1 else "sglstack-test/sglang-double:latest-test"
    engine = docker_client()
    image_id = engine.images.get(image).id
    listing = []
    for _ in range(RUNS):
        start = time.monotonic()
        inventory = image_inventory(engine, image)
        sbom = sbom_document(inventory, image_name=image, image_id=image_id, created=dt.datetime.now(dt.UTC))
        listing.append(time.monotonic() - start)
    key = Ed25519PrivateKey.generate()
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-") as tmp:
        work = Path(tmp)
        (work / SBOM_FILE).write_bytes(sbom)
        record = {"stack": "bench", "target": "runtime", "image_id": image_id, "tag": image, "config_hash": "c" * 64,
                  "built_at": "2026-12-03T00:00:00Z", "builder": {"kind": "classic"}, "pins": {},
                  "base_image": {"name": "debian:bookworm-slim", "digest": "sha256:" + "d" * 64},
                  "sglang": {"version": "0.5.9"}, "lock": {"content_sha256": "e" * 64},
                  "provenance": {"patches": {"kimi-k25-eagle3": "f" * 64}, "sglstack": {"version": "0.1.0"}},
                  "sbom": {"sha256": hashlib.sha256(sbom).hexdigest()}}
        (work / "record.json").write_text(json.dumps(record))
        port = free_port()
        proc = start_binary(registry_config(port, work / "data"), work, port)
        try:
            proxy = Counter(port)
            attach_s, attach_b, promote_s, promote_b, verify_s = [], [], [], [], []
            for run in range(RUNS):
                repo = parse_repository(f"127.0.0.1:{proxy.port}/bench/attest{run}")
                client = RegistryClient(repo.registry)
                digest = push_candidate(engine, image, repo, "candidate", client)
                proxy.bytes = 0
                start = time.monotonic()
                AttestPlan(work / "record.json", key)(client, repo, digest)
                attach_s.append(time.monotonic() - start)
                attach_b.append(proxy.bytes)
                proxy.bytes = 0
                start = time.monotonic()
                promote(client, repo, digest, immutable=f"0.5.9-bench-{run}", moving=("0.5.9-bench", "bench"))
                promote_s.append(time.monotonic() - start)
                promote_b.append(proxy.bytes)
                start = time.monotonic()
                verify_image(client, parse_image_reference(repo.ref("bench")), key.public_key())
                verify_s.append(time.monotonic() - start)
        finally:
            stop_process(proc.pid)
    med = statistics.median
    print(f"image {image}: {len(inventory.python)} Python distributions, {len(inventory.debian)} Debian packages")
    print(f"SBOM: {len(sbom)} bytes; listed and written in {med(listing):.2f} s (median of {RUNS}, a build phase)")
    print(f"attach (SBOM + provenance + signature): {med(attach_s):.3f} s, {med(attach_b)} bytes sent")
    print(f"promotion (3 tags), for scale: {med(promote_s):.3f} s, {med(promote_b)} bytes sent")
    print(f"verify-image: {med(verify_s):.3f} s")


if __name__ == "__main__":
    main()
