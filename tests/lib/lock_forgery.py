"""A lock forged with care: an entry added under a made-up `# via`, the parent's `# requires:`, the header's
count and `written-sha256` made to agree. Used by the unit and e2e tests of the image-side lock closure."""

from __future__ import annotations

import re
from pathlib import Path

from sglstack.lockfile.text import parse_lock, written_sha256

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIX = ("six==1.16.0 \\\n    --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254\n"
       "    # via requests\n")
def forged_lock_text(text: str, entry: str = SIX, edge: str = "six") -> str:
    """`entry` added with a made-up `# via requests`, the parent's `# requires:` and the header made to agree,
    and `written-sha256` recomputed: everything a careful forger does to the file."""
    text = text.replace("idna==3.20 \\", entry + "idna==3.20 \\", 1)
    text = text.replace("# requires: certifi, charset-normalizer, idna, urllib3",
                        f"# requires: certifi, charset-normalizer, idna, {edge}, urllib3")
    text = re.sub(r"(?m)^# packages: 6 \(6 hashed", "# packages: 7 (7 hashed", text)
    text = text.replace("(6 hashed, 0 unhashed)", "(7 hashed, 0 unhashed)")
    sha = written_sha256(parse_lock(text))
    return re.sub(r"(?m)^# written-sha256: \S+$", f"# written-sha256: {sha}", text)
