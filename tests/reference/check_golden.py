#!/usr/bin/python3
"""Check the numpy reference against the stories260K golden file.

Passes (exit 0) when the logits after the prompt match logits_after_prompt
within 1e-4 * max|logit| and 64 greedy steps reproduce greedy_ids; prints one
line either way. Also checks the F16 copy of the model decodes the same text.

Usage: /usr/bin/python3 tests/reference/check_golden.py [MODEL_DIR]
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import Model  # noqa: E402

DEFAULT_DIR = "/work/shared/models/stories260K"
REL_TOL = 1e-4


def check(model_dir):
    """Return a list of failure messages (empty when everything matches)."""
    golden = json.load(open(os.path.join(model_dir, "stories260K.golden.json")))
    prompt, want_ids = golden["prompt_ids"], golden["greedy_ids"]
    want = np.asarray(golden["logits_after_prompt"], dtype=np.float64)
    failures = []
    model = Model(os.path.join(model_dir, "stories260K.gguf"))
    got = model.forward(prompt)[-1]
    err = np.abs(got - want).max()
    if err > REL_TOL * np.abs(want).max():
        failures.append("logits_after_prompt max error %.3g > %.3g"
                        % (err, REL_TOL * np.abs(want).max()))
    for label, path in (("F32", "stories260K.gguf"), ("F16", "stories260K-F16.gguf")):
        ids, _ = Model(os.path.join(model_dir, path)).greedy(prompt, len(want_ids))
        if ids != want_ids:
            first = next(i for i, (a, b) in enumerate(zip(ids, want_ids)) if a != b)
            failures.append("%s greedy diverges at step %d (%d vs %d)"
                            % (label, first, ids[first], want_ids[first]))
    return failures, err / np.abs(want).max()


def main():
    """Run the check; returns the exit code."""
    model_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    failures, rel = check(model_dir)
    if failures:
        print("check_golden: FAIL: " + "; ".join(failures))
        return 1
    print("check_golden: OK: stories260K logits rel err %.2e, 64 greedy ids match (F32 and F16)" % rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
