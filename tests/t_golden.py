#!/usr/bin/python3
"""stories260K against its golden file (made by another engine).

- `ilpd generate -p "Once upon a time" -n 64 --temp 0` prints exactly the
  golden greedy text, for the F32 and the F16 file;
- teacher-forced on the golden ids, every argmax is the next golden id (so the
  greedy ids themselves match);
- the logits after the prompt match the golden vector within 1e-4 of the
  largest |logit|;
- the numpy reference (tests/reference/reference.py, the oracle of
  t_engine_reference.py) passes the same: logits after the prompt within 1e-4
  and 64 greedy ids, for the F32 and the F16 file, so the oracle itself is
  checked against an independent engine.
"""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from reference import Model  # noqa: E402

ILPD = os.environ.get("ILPD", "./ilpd")
SHARED = os.environ.get("SHARED", "../shared")
TMP = os.environ.get("TESTS_TMP", "/tmp")
DIR = os.path.join(SHARED, "models", "stories260K")


def main():
    if not os.path.isdir(DIR):
        print("skip - stories260K golden: %s absent" % DIR)
        return 0
    golden = json.load(open(os.path.join(DIR, "stories260K.golden.json")))
    failed = 0

    def report(ok, name, why=""):
        nonlocal failed
        if ok:
            print("ok - " + name)
        else:
            failed += 1
            print("not ok - %s: %s" % (name, why))

    for fname in ("stories260K.gguf", "stories260K-F16.gguf"):
        model = os.path.join(DIR, fname)
        p = subprocess.run([ILPD, "generate", "-m", model, "-p", golden["prompt"], "-n", "64", "--temp", "0"],
                           capture_output=True)
        text = p.stdout.decode("utf-8", "replace")
        report(p.returncode == 0 and text == golden["greedy_text"], "%s greedy text" % fname,
               "exit %d, got %r" % (p.returncode, text[:120]))

        p = subprocess.run([ILPD, "tokenize", "-m", model, golden["prompt"]], capture_output=True, text=True)
        ids = [int(t) for t in p.stdout.split()] if p.returncode == 0 else None
        report(ids == golden["prompt_ids"], "%s prompt ids" % fname, "got %r" % ids)

        seq = golden["prompt_ids"] + golden["greedy_ids"]
        out = os.path.join(TMP, "golden.f32")
        p = subprocess.run([ILPD, "logits", "-m", model, "--tokens", ",".join(map(str, seq)), "-o", out],
                           capture_output=True, text=True)
        if p.returncode != 0:
            report(False, "%s logits" % fname, p.stderr.strip())
            continue
        logits = np.fromfile(out, dtype=np.float32).reshape(len(seq), -1)
        n_prompt = len(golden["prompt_ids"])
        argmax = [int(i) for i in np.argmax(logits[n_prompt - 1:-1], axis=1)]
        report(argmax == golden["greedy_ids"], "%s greedy ids (teacher-forced argmax)" % fname,
               "first mismatch at step %s" % next((i for i, (a, b) in enumerate(zip(argmax, golden["greedy_ids"])) if a != b), None))
        if fname == "stories260K.gguf":
            want = np.asarray(golden["logits_after_prompt"], dtype=np.float64)
            err = float(np.max(np.abs(logits[n_prompt - 1] - want)))
            bound = 1e-4 * float(np.max(np.abs(want)))
            report(err <= bound, "%s logits after prompt within 1e-4 of max|logit|" % fname,
                   "max error %.3g > %.3g" % (err, bound))

        ref = Model(model)
        if fname == "stories260K.gguf":
            want = np.asarray(golden["logits_after_prompt"], dtype=np.float64)
            err = float(np.max(np.abs(ref.forward(golden["prompt_ids"])[-1] - want)))
            bound = 1e-4 * float(np.max(np.abs(want)))
            report(err <= bound, "reference.py on %s: logits after prompt within 1e-4 of max|logit|" % fname,
                   "max error %.3g > %.3g" % (err, bound))
        want_ids = golden["greedy_ids"]
        ids, _ = ref.greedy(golden["prompt_ids"], len(want_ids))
        report(ids == want_ids, "reference.py on %s: %d greedy ids" % (fname, len(want_ids)),
               "first mismatch at step %s" % next((i for i, (a, b) in enumerate(zip(ids, want_ids)) if a != b), None))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
