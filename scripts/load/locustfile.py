"""Load test for ilpd (Debian's python3-locust), headless and time-bounded:

  locust -f scripts/load/locustfile.py --headless -u 20 -r 10 -t 30s --host http://127.0.0.1:8080

Half the users ask for JSON answers, half stream. A 529 with retry-after is
the server's back-pressure working as designed and counts as a success (the
user then waits retry-after seconds, as the official SDKs do);
anything else that is not a 200 with a well-formed answer is a failure.
Environment: ILPD_MAX_TOKENS (default 32), ILPD_API_KEY.
"""
import json
import os
import time

from locust import HttpUser, between, task

MAX_TOKENS = int(os.environ.get("ILPD_MAX_TOKENS", "32"))
PROMPTS = ["Once upon a time", "Tell me a story about a cat.", "The little dog", "One day, Lily found"]


def headers():
    h = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    if os.environ.get("ILPD_API_KEY"):
        h["x-api-key"] = os.environ["ILPD_API_KEY"]
    return h


def payload(i, stream):
    return {"model": "load-test", "max_tokens": MAX_TOKENS, "stream": stream,
            "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}


def judge(r, stream):
    if r.status_code == 529 and r.headers.get("retry-after"):
        r.success()
        time.sleep(min(float(r.headers["retry-after"]), 5.0))
    elif r.status_code != 200:
        r.failure("status %d: %s" % (r.status_code, r.text[:200]))
    elif stream and "event: message_stop" not in r.text:
        r.failure("stream without message_stop")
    elif not stream and json.loads(r.text).get("type") != "message":
        r.failure("not a message")
    else:
        r.success()


class JsonUser(HttpUser):
    wait_time = between(0.05, 0.3)
    n = 0

    @task
    def message(self):
        self.n += 1
        with self.client.post("/v1/messages", json=payload(self.n, False), headers=headers(), catch_response=True,
                              name="messages") as r:
            judge(r, False)


class StreamUser(HttpUser):
    wait_time = between(0.05, 0.3)
    n = 0

    @task
    def stream(self):
        self.n += 1
        with self.client.post("/v1/messages", json=payload(self.n, True), headers=headers(), catch_response=True,
                              name="messages stream") as r:
            judge(r, True)
